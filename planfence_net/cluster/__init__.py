"""This machine's cluster folder: roster and keys on disk, owner and shaper processes, ports."""
