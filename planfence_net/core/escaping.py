"""Text from peers made safe to print: one escaping rule for every text output."""

from __future__ import annotations


def escape(text: str) -> str:
    """`text` with backslashes and every non-printable character (newlines, escape
    sequences, bidi controls, line separators) written as a backslash escape, so that a key
    or reason chosen by a peer cannot forge lines or colours in a terminal."""
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(c if c.isprintable() and c != "\\" else _escape_char(c) for c in text)


def _escape_char(c: str) -> str:
    if c == "\\":
        return "\\\\"
    code = ord(c)
    return (
        f"\\x{code:02x}"
        if code < 0x100
        else f"\\u{code:04x}"
        if code < 0x10000
        else f"\\U{code:08x}"
    )
