"""The wire without I/O: framing, the Noise handshake and ciphers, messages, request reading."""
