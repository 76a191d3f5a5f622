"""The input bound prices media by what the provider sees (issue #11): an image by its pixels, a
PDF by its pages, unknown media at their allowances; and a settlement past the hold is charged as
far as money is free, with the shortfall recorded."""

from __future__ import annotations

import base64
import math
import struct
import zlib
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from modelgate.billing.input_bound import MediaRules, input_bound
from modelgate.billing.media import image_pixels, pdf_pages
from modelgate.billing.pricing import affordable_output_tokens, bound_uc
from tests.gateway_server import running_gateway

RULES = MediaRules(
    overhead_tokens=1024,
    unknown_image_tokens=1600,
    image_pixels_per_token=400,
    image_base_tokens=100,
    tokens_per_pdf_page=3000,
    unknown_pdf_pages=100,
)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def png(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return b"\x89PNG\r\n\x1a\n" + chunk


def gif(width: int, height: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", width, height) + b"\x00\x00\x00"


def jpeg(width: int, height: int) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + sof + b"\xff\xd9"


def webp_vp8x(width: int, height: int) -> bytes:
    payload = b"\x00\x00\x00\x00" + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return (
        b"RIFF"
        + struct.pack("<I", 4 + 8 + len(payload))
        + b"WEBPVP8X"
        + struct.pack("<I", len(payload))
        + payload
    )


def pdf(pages: int, *, compressed: bool) -> bytes:
    tree = f"<< /Type /Pages /Kids [] /Count {pages} >>".encode()
    if not compressed:
        return b"%PDF-1.4\n1 0 obj\n" + tree + b"\nendobj\n%%EOF"
    stream = zlib.compress(b"2 0 " + tree)
    head = f"<< /Type /ObjStm /N 1 /First 4 /Filter /FlateDecode /Length {len(stream)} >>".encode()
    return b"%PDF-1.7\n1 0 obj\n" + head + b"\nstream\n" + stream + b"\nendstream\nendobj\n%%EOF"


@pytest.mark.parametrize(
    ("data", "pixels"),
    [
        (png(8000, 8000), 64_000_000),
        (gif(640, 480), 307_200),
        (jpeg(1920, 1080), 2_073_600),
        (webp_vp8x(3000, 2000), 6_000_000),
        (b"not an image at all", None),
    ],
)
def test_image_pixels_come_from_the_header(data: bytes, pixels: int | None) -> None:
    assert image_pixels(b64(data)) == pixels


def test_pdf_pages_come_from_the_page_tree_even_compressed() -> None:
    assert pdf_pages(b64(pdf(7, compressed=False))) == 7
    assert pdf_pages(b64(pdf(42, compressed=True))) == 42
    assert pdf_pages(b64(b"%PDF-1.4 nothing readable")) is None
    assert pdf_pages("!!!not base64") is None


def body_with(*parts: dict[str, Any]) -> tuple[bytes, Any]:
    body = {
        "model": "m",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": [*parts, {"type": "text", "text": "hi"}]}],
    }
    return orjson.dumps(body), body


def test_text_only_bound_is_bytes_plus_overhead() -> None:
    raw, body = body_with()
    assert input_bound(raw, body, RULES) == len(raw) + 1024


def test_an_inline_image_is_priced_by_pixels_not_bytes() -> None:
    data = b64(png(8000, 8000))
    raw, body = body_with(
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    )
    expected = len(raw) - len(data) + 1024 + math.ceil(64_000_000 / 400) + 100
    assert input_bound(raw, body, RULES) == expected


def test_other_formats_media_shapes_and_unknowns() -> None:
    data = b64(jpeg(1024, 1024))
    chat = {
        "messages": [
            {"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{data}"}},
                {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.png"}},
                {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{b64(pdf(3, compressed=False))}"}},
            ]}
        ]
    }  # fmt: skip
    raw = orjson.dumps(chat)
    pdf_data = b64(pdf(3, compressed=False))
    expected = (
        len(raw) - len(data) - len(pdf_data) + 1024
        + math.ceil(1024 * 1024 / 400) + 100  # the inline JPEG
        + 1600  # the image by URL
        + 3 * 3000  # the three-page PDF
    )  # fmt: skip
    assert input_bound(raw, chat, RULES) == expected
    responses = {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}, {"type": "input_file", "file_id": "file-2"}]}]}  # fmt: skip
    raw = orjson.dumps(responses)
    assert input_bound(raw, responses, RULES) == len(raw) + 1024 + 1600 + 100 * 3000


def test_the_hold_reflects_an_images_pixels(tmp_path: Path) -> None:
    """A tiny, very large image: the clamp header shows the hold priced its 64 megapixels."""
    with running_gateway(tmp_path / "data") as gateway:
        model = gateway.services.catalogue.resolve("aria-haiku-4.5")
        assert model is not None
        data = b64(png(8000, 8000))
        body = {
            "model": "aria-haiku-4.5",
            "max_tokens": 8000,
            "messages": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
                {"type": "text", "text": "what is this?"},
            ]}],
        }  # fmt: skip
        raw = orjson.dumps(body)
        bound = len(raw) - len(data) + 128 + math.ceil(64_000_000 / 400) + 100
        # Enough for the image's input bound and 1,000 output tokens: the 8,000 asked are clamped.
        balance = bound_uc(bound, 1_000, model.price)
        account = gateway.account("small", credits=balance / 1_000_000)
        key = gateway.key(account, "Basic").secret
        response = httpx.post(
            f"{gateway.base_url}/v1/messages",
            content=raw,
            headers={"x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json"},
        )
        assert response.status_code == 200, response.text
        affordable = affordable_output_tokens(balance, bound, model.price)
        assert 990 <= affordable <= 1_000
        assert response.headers["x-modelgate-max-tokens-clamped"] == f"8000->{affordable}; reason=credits"
