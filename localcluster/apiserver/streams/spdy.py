"""SPDY/3.1 framing, as much of it as port-forwarding needs (pure, no I/O).

kubectl 1.32 port-forwards through a WebSocket whose binary messages carry a SPDY/3.1
connection (subprotocol ``SPDY/3.1+portforward.k8s.io``): each forwarded TCP connection
is a pair of SPDY streams the client opens, and the server answers each with SYN_REPLY.
This module parses and builds the frames: data frames, SYN_STREAM, SYN_REPLY,
RST_STREAM, PING, GOAWAY, WINDOW_UPDATE and SETTINGS; header blocks are zlib-compressed
with SPDY/3's dictionary, one compression context per direction for the whole
connection. No SPDY library is kept for Python; the protocol is small and fixed.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

VERSION = 3
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = (
    1, 2, 3, 4, 6, 7, 8, 9)
FLAG_FIN = 0x01
MAX_FRAME = (1 << 24) - 1
MAX_HEADER_BLOCK = 64 * 1024
"""A decompressed header block larger than this is a protocol error (zlib bombs)."""

_WORDS = (  # noqa: SIM905 - easier to read (and check) than 57 quoted strings
    "options head post put delete trace accept accept-charset accept-encoding "
    "accept-language accept-ranges age allow authorization cache-control connection "
    "content-base content-encoding content-language content-length content-location "
    "content-md5 content-range content-type date etag expect expires from host if-match "
    "if-modified-since if-none-match if-range if-unmodified-since last-modified location "
    "max-forwards pragma proxy-authenticate proxy-authorization range referer retry-after "
    "server te trailer transfer-encoding upgrade user-agent vary via warning "
    "www-authenticate method get status"
).split()
_TOKENS = (*_WORDS, "200 OK", "version", "HTTP/1.1", "url", "public", "set-cookie",
           "keep-alive", "origin")
_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417"
    "502504505203 Non-Authoritative Information204 No Content301 Moved Permanently"
    "400 Bad Request401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error"
    "501 Not Implemented503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct "
    "Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,"
    "image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8"
    "charset=iso-8859-1,utf-,*,enq=0."
)
DICTIONARY = b"".join(struct.pack(">I", len(t)) + t.encode() for t in _TOKENS) + \
    _TAIL.encode()
"""SPDY/3's header-compression dictionary: each token length-prefixed, then the tail."""


class ProtocolError(Exception):
    """The peer sent something that is not SPDY/3.1 as this server speaks it."""


@dataclass(frozen=True)
class Data:
    stream_id: int
    data: bytes
    fin: bool


@dataclass(frozen=True)
class Control:
    type: int
    flags: int
    payload: bytes
    headers: Mapping[str, str] = field(default_factory=dict)
    """Decoded header block (SYN_STREAM, SYN_REPLY, HEADERS), names lower-case."""

    @property
    def stream_id(self) -> int:
        return int(struct.unpack(">I", self.payload[:4])[0] & 0x7FFFFFFF) \
            if len(self.payload) >= 4 else 0

    @property
    def fin(self) -> bool:
        return bool(self.flags & FLAG_FIN)


Frame = Data | Control


def _header_block(pairs: Mapping[str, str]) -> bytes:
    out = [struct.pack(">I", len(pairs))]
    for name, value in pairs.items():
        n, v = name.lower().encode(), value.encode()
        out += [struct.pack(">I", len(n)), n, struct.pack(">I", len(v)), v]
    return b"".join(out)


def _parse_header_block(raw: bytes) -> dict[str, str]:
    try:
        (count,) = struct.unpack_from(">I", raw, 0)
        pos, out = 4, {}
        for _ in range(count):
            (n,) = struct.unpack_from(">I", raw, pos)
            name = raw[pos + 4:pos + 4 + n]
            pos += 4 + n
            (v,) = struct.unpack_from(">I", raw, pos)
            value = raw[pos + 4:pos + 4 + v]
            pos += 4 + v
            if len(name) != n or len(value) != v:
                raise ProtocolError("truncated header block")
            out[name.decode().lower()] = value.decode().split("\x00")[0]
        return out
    except (struct.error, UnicodeDecodeError) as err:
        raise ProtocolError(f"bad header block: {err}") from None


class Codec:
    """One SPDY connection's framing: feed received bytes, take frames; build frames to
    send. Holds both zlib contexts (they live as long as the connection)."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._inflate = zlib.decompressobj(zdict=DICTIONARY)
        self._deflate = zlib.compressobj(zdict=DICTIONARY)

    # -- reading ---------------------------------------------------------------------

    def feed(self, data: bytes) -> list[Frame]:
        self._buf += data
        frames: list[Frame] = []
        while len(self._buf) >= 8:
            length = int.from_bytes(self._buf[5:8], "big")
            if len(self._buf) < 8 + length:
                break
            head, payload = bytes(self._buf[:8]), bytes(self._buf[8:8 + length])
            del self._buf[:8 + length]
            flags = head[4]
            if head[0] & 0x80:
                version = int.from_bytes(head[0:2], "big") & 0x7FFF
                if version != VERSION:
                    raise ProtocolError(f"SPDY version {version}, not {VERSION}")
                ftype = int.from_bytes(head[2:4], "big")
                frames.append(Control(ftype, flags, payload, self._headers(ftype, payload)))
            else:
                stream_id = int.from_bytes(head[0:4], "big") & 0x7FFFFFFF
                frames.append(Data(stream_id, payload, bool(flags & FLAG_FIN)))
        return frames

    def _headers(self, ftype: int, payload: bytes) -> dict[str, str]:
        offset = {SYN_STREAM: 10, SYN_REPLY: 4, HEADERS: 4}.get(ftype)
        if offset is None:
            return {}
        try:
            raw = self._inflate.decompress(payload[offset:], MAX_HEADER_BLOCK)
        except zlib.error as err:
            raise ProtocolError(f"header block: {err}") from None
        if self._inflate.unconsumed_tail:
            raise ProtocolError("header block too large")
        return _parse_header_block(raw)

    # -- writing ---------------------------------------------------------------------

    @staticmethod
    def _control(ftype: int, flags: int, payload: bytes) -> bytes:
        return struct.pack(">HHI", 0x8000 | VERSION, ftype, (flags << 24) | len(payload)) + \
            payload

    @staticmethod
    def data(stream_id: int, data: bytes, *, fin: bool = False) -> bytes:
        if len(data) > MAX_FRAME:
            raise ValueError("data frame too large")
        return struct.pack(">II", stream_id & 0x7FFFFFFF,
                           ((FLAG_FIN if fin else 0) << 24) | len(data)) + data

    def syn_reply(self, stream_id: int, headers: Mapping[str, str] | None = None) -> bytes:
        block = self._deflate.compress(_header_block(headers or {}))
        block += self._deflate.flush(zlib.Z_SYNC_FLUSH)
        return self._control(SYN_REPLY, 0, struct.pack(">I", stream_id) + block)

    def rst_stream(self, stream_id: int, status: int) -> bytes:
        return self._control(RST_STREAM, 0, struct.pack(">II", stream_id, status))

    def ping(self, ping_id: int) -> bytes:
        return self._control(PING, 0, struct.pack(">I", ping_id))

    def goaway(self, last_stream_id: int, status: int = 0) -> bytes:
        return self._control(GOAWAY, 0, struct.pack(">II", last_stream_id, status))

    def window_update(self, stream_id: int, delta: int) -> bytes:
        return self._control(WINDOW_UPDATE, 0, struct.pack(">II", stream_id, delta))

    # -- for tests and clients ----------------------------------------------------------

    def syn_stream(self, stream_id: int, headers: Mapping[str, str], *,
                   fin: bool = False) -> bytes:
        block = self._deflate.compress(_header_block(headers))
        block += self._deflate.flush(zlib.Z_SYNC_FLUSH)
        payload = struct.pack(">IIH", stream_id, 0, 0) + block
        return self._control(SYN_STREAM, FLAG_FIN if fin else 0, payload)
