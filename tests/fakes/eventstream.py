"""AWS event-stream framing (``application/vnd.amazon.eventstream``), written the way Bedrock
writes it: a prelude (total length, headers length, CRC32 of both), string-typed headers, the
payload, and a CRC32 of everything before it. The gateway decodes with botocore; this encoder is
written from the format's definition so the two are independent."""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Sequence

import orjson

_STRING = 7  # header value type: UTF-8 string with a 2-byte length


def message(headers: Sequence[tuple[str, str]], payload: bytes) -> bytes:
    encoded = b"".join(
        struct.pack("!B", len(name))
        + name.encode()
        + struct.pack("!BH", _STRING, len(value))
        + value.encode()
        for name, value in headers
    )
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack("!II", total, len(encoded))
    head = prelude + struct.pack("!I", binascii.crc32(prelude))
    body = head + encoded + payload
    return body + struct.pack("!I", binascii.crc32(body))


def chunk(event: bytes, pad: int = 7) -> bytes:
    """A ``chunk`` event carrying one Messages stream event (JSON bytes), base64 as Bedrock does,
    with the ``p`` padding field Bedrock adds against traffic analysis."""
    payload = orjson.dumps(
        {"bytes": base64.b64encode(event).decode(), "p": "abcdefghijklmnopqrstuvwxyz"[:pad]}
    )
    headers = [(":event-type", "chunk"), (":content-type", "application/json"), (":message-type", "event")]
    return message(headers, payload)


def exception(code: str, text: str) -> bytes:
    """A typed exception message (``throttlingException``, ``modelStreamErrorException``, ...)."""
    headers = [
        (":exception-type", code),
        (":content-type", "application/json"),
        (":message-type", "exception"),
    ]
    return message(headers, orjson.dumps({"message": text}))
