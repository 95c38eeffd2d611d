"""SPDY/3.1 framing for port-forward: the dictionary, frames both ways, bad input."""

from __future__ import annotations

import hashlib
import struct
import zlib

import pytest

from localcluster.apiserver.streams import spdy


def test_dictionary_is_spdy3s() -> None:
    # The 1423 bytes zlib is seeded with in every SPDY/3 implementation (checked against
    # the one compiled into kubectl 1.32): any other byte and no header block inflates.
    assert len(spdy.DICTIONARY) == 1423
    assert hashlib.sha256(spdy.DICTIONARY).hexdigest() == \
        "51d27341373f923f3cd88e1eb7162aeaa3723d7585ff2399201dc06498407f02"


def test_syn_stream_reply_data_round_trip() -> None:
    client, server = spdy.Codec(), spdy.Codec()
    wire = client.syn_stream(1, {"streamType": "error", "port": "8080", "requestID": "0"})
    wire += client.syn_stream(3, {"streamType": "data", "port": "8080", "requestID": "0"})
    wire += client.data(3, b"GET / HTTP/1.0\r\n\r\n", fin=True)
    frames = []
    for i in range(0, len(wire), 7):  # arbitrary chunking, as WebSocket messages may be
        frames += server.feed(wire[i:i + 7])
    syn1, syn3, data = frames
    assert isinstance(syn1, spdy.Control) and syn1.type == spdy.SYN_STREAM
    assert syn1.stream_id == 1
    assert syn1.headers == {"streamtype": "error", "port": "8080", "requestid": "0"}
    assert isinstance(syn3, spdy.Control) and syn3.headers["streamtype"] == "data"
    assert data == spdy.Data(3, b"GET / HTTP/1.0\r\n\r\n", True)
    replies = client.feed(server.syn_reply(1) + server.syn_reply(3) +
                          server.data(3, b"hi") + server.ping(7) + server.rst_stream(1, 5))
    assert [(f.type, f.stream_id) for f in replies if isinstance(f, spdy.Control)] == [
        (spdy.SYN_REPLY, 1), (spdy.SYN_REPLY, 3), (spdy.PING, 7), (spdy.RST_STREAM, 1)]
    assert spdy.Data(3, b"hi", False) in replies


def test_bad_input_is_a_protocol_error() -> None:
    codec = spdy.Codec()
    v2 = struct.pack(">HHI", 0x8002, spdy.PING, 4) + b"\0\0\0\1"
    with pytest.raises(spdy.ProtocolError, match="version 2"):
        codec.feed(v2)
    garbage = struct.pack(">HHI", 0x8003, spdy.SYN_STREAM, 14) + b"\0\0\0\1\0\0\0\0\0\0xxxx"
    with pytest.raises(spdy.ProtocolError, match="header block"):
        spdy.Codec().feed(garbage)


def test_a_header_block_bomb_is_refused() -> None:
    deflate = zlib.compressobj(zdict=spdy.DICTIONARY)
    big = struct.pack(">I", 1) + struct.pack(">I", 4) + b"name" + \
        struct.pack(">I", 1 << 20) + b"a" * (1 << 20)
    block = deflate.compress(big) + deflate.flush(zlib.Z_SYNC_FLUSH)
    frame = struct.pack(">HHI", 0x8003, spdy.SYN_STREAM, 10 + len(block)) + \
        struct.pack(">IIH", 1, 0, 0) + block
    with pytest.raises(spdy.ProtocolError, match="too large"):
        spdy.Codec().feed(frame)


def test_partial_frames_wait_for_the_rest() -> None:
    codec = spdy.Codec()
    wire = codec.data(5, b"abcdef")
    assert codec.feed(wire[:10]) == []
    assert codec.feed(wire[10:]) == [spdy.Data(5, b"abcdef", False)]
