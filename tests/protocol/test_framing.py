"""Framing, no network: 2-byte frames, caps checked before buffering, chunks and reassembly."""

from __future__ import annotations

import pytest

from planfence_net.core.errors import LocalProtocolError, RemoteProtocolError
from planfence_net.protocol.framing import (
    CHUNK_DATA,
    DEFAULT_MAX_MESSAGE,
    HANDSHAKE_FRAME_CAP,
    LAST,
    MAX_FRAME,
    MORE,
    TAG_LEN,
    FrameDecoder,
    MessageAssembler,
    encode_frame,
    split_message,
)


def test_constants_fit_one_noise_transport_message_per_chunk() -> None:
    assert (MAX_FRAME, TAG_LEN, CHUNK_DATA, HANDSHAKE_FRAME_CAP) == (65535, 16, 65518, 256)
    assert DEFAULT_MAX_MESSAGE == 16 * 1024 * 1024
    assert (MORE, LAST) == (1, 0)
    assert 1 + CHUNK_DATA + TAG_LEN == MAX_FRAME


# -- frames ------------------------------------------------------------------------------------


def test_encode_frame_prefixes_a_big_endian_length() -> None:
    assert encode_frame(b"") == b"\x00\x00"
    assert encode_frame(b"abc") == b"\x00\x03abc"
    assert encode_frame(b"x" * 258)[:2] == b"\x01\x02"
    assert len(encode_frame(b"x" * MAX_FRAME)) == MAX_FRAME + 2


def test_encode_frame_refuses_more_than_65535_bytes() -> None:
    with pytest.raises(LocalProtocolError, match="^frame of 65536 bytes exceeds 65535$"):
        encode_frame(b"x" * (MAX_FRAME + 1))


def test_decoder_yields_frames_fed_byte_by_byte_and_in_bulk() -> None:
    wire = encode_frame(b"one") + encode_frame(b"") + encode_frame(b"three")
    decoder = FrameDecoder()
    frames = []
    for byte in wire:
        decoder.feed(bytes([byte]))
        frame = decoder.next_frame()
        if frame is not None:
            frames.append(frame)
    assert frames == [b"one", b"", b"three"] and decoder.buffered == 0
    decoder.feed(wire + b"\x00")
    assert [decoder.next_frame() for _ in range(4)] == [b"one", b"", b"three", None]
    assert decoder.buffered == 1


def test_decoder_checks_the_cap_on_the_length_prefix_before_the_body_arrives() -> None:
    decoder = FrameDecoder(HANDSHAKE_FRAME_CAP)
    decoder.feed((HANDSHAKE_FRAME_CAP + 1).to_bytes(2, "big"))
    assert decoder.buffered == 2  # only the prefix: the 257-byte body was never waited for
    with pytest.raises(RemoteProtocolError, match="^frame of 257 bytes exceeds the limit of 256$"):
        decoder.next_frame()


def test_decoder_accepts_a_frame_of_exactly_the_cap() -> None:
    decoder = FrameDecoder(HANDSHAKE_FRAME_CAP)
    decoder.feed(encode_frame(b"h" * HANDSHAKE_FRAME_CAP))
    assert decoder.next_frame() == b"h" * HANDSHAKE_FRAME_CAP


def test_decoder_cap_can_be_raised_after_the_handshake() -> None:
    decoder = FrameDecoder(HANDSHAKE_FRAME_CAP)
    decoder.feed(encode_frame(b"a" * 96) + encode_frame(b"b" * 1000))
    assert decoder.next_frame() == b"a" * 96
    decoder.max_frame = MAX_FRAME
    assert decoder.next_frame() == b"b" * 1000


def test_garbage_before_a_handshake_is_refused_at_its_first_two_bytes() -> None:
    decoder = FrameDecoder(HANDSHAKE_FRAME_CAP)
    decoder.feed(b"GET / HTTP/1.1\r\n")  # "GE" = 0x4745 = 18245
    with pytest.raises(
        RemoteProtocolError, match="^frame of 18245 bytes exceeds the limit of 256$"
    ):
        decoder.next_frame()


# -- chunks ------------------------------------------------------------------------------------


def test_split_message_chunk_boundaries() -> None:
    assert split_message(b"") == [b"\x00"]
    assert split_message(b"hi") == [b"\x00hi"]
    exact = split_message(b"a" * CHUNK_DATA)
    assert exact == [b"\x00" + b"a" * CHUNK_DATA]
    data = bytes(range(256)) * 600  # 153600 bytes: 65518 + 65518 + 22564
    chunks = split_message(data)
    assert [len(c) - 1 for c in chunks] == [65518, 65518, 22564]
    assert [c[0] for c in chunks] == [MORE, MORE, LAST]
    assert b"".join(c[1:] for c in chunks) == data
    over = split_message(b"b" * (CHUNK_DATA + 1))
    assert [(c[0], len(c)) for c in over] == [(MORE, 65519), (LAST, 2)]


def test_every_chunk_plus_tag_fits_one_frame() -> None:
    for chunk in split_message(b"z" * (3 * CHUNK_DATA + 7)):
        assert len(chunk) + TAG_LEN <= MAX_FRAME


def test_split_message_refuses_a_message_over_the_limit() -> None:
    assert len(split_message(b"m" * 100, max_message=100)) == 1
    with pytest.raises(LocalProtocolError, match="^message of 101 bytes exceeds 100$"):
        split_message(b"m" * 101, max_message=100)


def test_assembler_joins_chunks_and_resets() -> None:
    assembler = MessageAssembler()
    data = b"q" * (2 * CHUNK_DATA + 5)
    chunks = split_message(data)
    assert [assembler.add(c) for c in chunks[:-1]] == [None, None]
    assert assembler.add(chunks[-1]) == data
    assert assembler.add(b"\x00next") == b"next"
    assert assembler.add(b"\x00") == b""


def test_assembler_cap_counts_data_bytes_across_chunks() -> None:
    assembler = MessageAssembler(max_message=10)
    assert assembler.add(b"\x01" + b"x" * 6) is None
    assert assembler.add(b"\x00" + b"x" * 4) == b"x" * 10  # exactly the cap is fine
    assembler.add(b"\x01" + b"x" * 6)
    with pytest.raises(RemoteProtocolError, match="^message exceeds the limit of 10 bytes$"):
        assembler.add(b"\x01" + b"x" * 5)


def test_assembler_refuses_a_single_chunk_over_the_cap() -> None:
    with pytest.raises(RemoteProtocolError, match="^message exceeds the limit of 3 bytes$"):
        MessageAssembler(max_message=3).add(b"\x00abcd")


@pytest.mark.parametrize("chunk", [b"", b"\x02data", b"\xffdata", b"adata"])
def test_assembler_refuses_a_bad_or_missing_flag(chunk: bytes) -> None:
    with pytest.raises(RemoteProtocolError, match="^chunk without a valid continuation flag$"):
        MessageAssembler().add(chunk)


def test_a_screened_message_is_refused_at_its_first_chunk_and_the_rest_dropped() -> None:
    seen: list[bytes] = []

    def screen(prefix: bytes) -> RemoteProtocolError | None:
        seen.append(prefix)
        return RemoteProtocolError("bad start") if prefix.startswith(b"bad") else None

    assembler = MessageAssembler(max_message=3 * CHUNK_DATA, screen=screen)
    bad = split_message(b"bad" + b"x" * (2 * CHUNK_DATA))
    refused = assembler.add(bad[0])
    assert isinstance(refused, RemoteProtocolError) and str(refused) == "bad start"
    assert [assembler.add(c) for c in bad[1:]] == [None, None]  # dropped, not held
    assert assembler._parts == []
    good = b"good" + b"y" * CHUNK_DATA
    assert [assembler.add(c) for c in split_message(good)] == [None, good]
    assert assembler.add(b"\x00bad but one chunk") == b"bad but one chunk"  # not screened
    assert seen == [b"bad" + b"x" * (CHUNK_DATA - 3), good[:CHUNK_DATA]]


def test_a_dropped_message_still_counts_against_the_cap() -> None:
    assembler = MessageAssembler(max_message=10, screen=lambda p: RemoteProtocolError("no"))
    assert isinstance(assembler.add(b"\x01" + b"x" * 6), RemoteProtocolError)
    with pytest.raises(RemoteProtocolError, match="^message exceeds the limit of 10 bytes$"):
        assembler.add(b"\x01" + b"x" * 5)
