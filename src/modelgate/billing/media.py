"""Reading what an inline image or PDF will cost, from its bytes: pixels and pages.

A small, highly compressed high-resolution image, or a PDF of many blank pages, costs far more
input tokens than its bytes; these readers let the input bound (``billing.input_bound``) price media
by what the provider will see. They read only headers (and, for PDFs, the page tree), never decode
whole images, and return None when they cannot tell (the caller then assumes the worst allowed).
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
import zlib

#: Base64 characters needed to read any supported image header (JPEG may need to skip EXIF).
_IMAGE_HEAD_B64 = 96 * 1024
_PAGES_COUNT = re.compile(
    rb"/Type\s*/Pages\b[^>]*?/Count\s+(\d+)|/Count\s+(\d+)[^>]*?/Type\s*/Pages\b", re.DOTALL
)
_OBJECT_STREAM = re.compile(rb"/Type\s*/ObjStm\b.*?stream\r?\n", re.DOTALL)
#: Bytes of one compressed object stream we are willing to inflate.
_MAX_INFLATE = 8 * 1024 * 1024


def decode_base64(data: str, limit: int | None = None) -> bytes | None:
    """The bytes of (the first ``limit`` characters of) a base64 string, or None if it is not."""
    text = data if limit is None else data[: limit - limit % 4]
    try:
        return base64.b64decode(text, validate=False)
    except (binascii.Error, ValueError):
        return None


def image_pixels(data: str) -> int | None:
    """Width x height of a base64 PNG, GIF, JPEG or WebP image, from its header."""
    head = decode_base64(data, _IMAGE_HEAD_B64)
    if not head:
        return None
    size = _png(head) or _gif(head) or _webp(head) or _jpeg(head)
    if size is None:
        return None
    width, height = size
    return width * height if width > 0 and height > 0 else None


def _png(head: bytes) -> tuple[int, int] | None:
    if head[:8] != b"\x89PNG\r\n\x1a\n" or len(head) < 24:
        return None
    width, height = struct.unpack(">II", head[16:24])
    return int(width), int(height)


def _gif(head: bytes) -> tuple[int, int] | None:
    if head[:6] not in (b"GIF87a", b"GIF89a") or len(head) < 10:
        return None
    width, height = struct.unpack("<HH", head[6:10])
    return int(width), int(height)


def _webp(head: bytes) -> tuple[int, int] | None:
    if head[:4] != b"RIFF" or head[8:12] != b"WEBP" or len(head) < 30:
        return None
    chunk = head[12:16]
    if chunk == b"VP8X":
        width = 1 + int.from_bytes(head[24:27], "little")
        height = 1 + int.from_bytes(head[27:30], "little")
        return width, height
    if chunk == b"VP8L":
        bits = int.from_bytes(head[21:25], "little")
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    if chunk == b"VP8 ":
        width, height = struct.unpack("<HH", head[26:30])
        return int(width) & 0x3FFF, int(height) & 0x3FFF
    return None


def _jpeg(head: bytes) -> tuple[int, int] | None:
    if head[:2] != b"\xff\xd8":
        return None
    at = 2
    while at + 9 < len(head):
        if head[at] != 0xFF:
            at += 1
            continue
        marker = head[at + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            at += 2
            continue
        length = int.from_bytes(head[at + 2 : at + 4], "big")
        # Start-of-frame markers (baseline, progressive, lossless, ...) carry the size.
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", head[at + 5 : at + 9])
            return int(width), int(height)
        at += 2 + length
    return None


def pdf_pages(data: str) -> int | None:
    """The page count of a base64 PDF, from its page tree (compressed object streams included)."""
    pdf = decode_base64(data)
    if not pdf or not pdf.startswith(b"%PDF"):
        return None
    counts = [int(a or b) for a, b in _PAGES_COUNT.findall(pdf)]
    for match in _OBJECT_STREAM.finditer(pdf):
        end = pdf.find(b"endstream", match.end())
        if end < 0:
            continue
        try:
            inflated = zlib.decompressobj().decompress(pdf[match.end() : end], _MAX_INFLATE)
        except zlib.error:
            continue
        counts.extend(int(a or b) for a, b in _PAGES_COUNT.findall(inflated))
    # The root of the page tree has the largest count (intermediate nodes count their subtree).
    return max(counts) if counts else None
