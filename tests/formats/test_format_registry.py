"""The format registry: what the gateway derives from it, and that a format with its routes'
parameters in the path (Gemini's ``/{version}/models/{model}:generateContent``) fits one entry."""

from __future__ import annotations

import pytest
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from modelgate import errors
from modelgate.formats import (
    CODECS,
    DIALECTS,
    FORMATS,
    format_for_client,
    format_for_path,
)
from modelgate.formats.gemini import CODEC as GEMINI
from modelgate.server.app import Route

#: Gemini's registry entry: its routes carry their parameters in the path.
GEMINI_FORMAT = FORMATS["gemini"]


async def _nothing(scope: Scope, receive: Receive, send: Send) -> None:
    await Response()(scope, receive, send)


def test_the_registry_names_every_format_once_and_derives_the_codecs() -> None:
    assert list(FORMATS) == ["messages", "chat", "responses", "gemini"]
    assert {name: f.codec for name, f in FORMATS.items()} == dict(CODECS)
    assert FORMATS["gemini"].codec is GEMINI
    # Gemini is inbound only: no upstream speaks it, so it is no dialect.
    assert DIALECTS == ("messages", "chat", "responses")
    for fmt in FORMATS.values():
        if fmt.outbound:
            assert fmt.preferred_dialects[0] == fmt.name
        assert sorted(fmt.preferred_dialects) == sorted(DIALECTS)


def test_refusals_off_the_routes_follow_the_path_then_the_client() -> None:
    assert format_for_path("/v1/messages/batches", {}).name == "messages"
    assert format_for_path("/v1/messages", {}).name == "messages"
    assert format_for_path("/v1/messagesx", {}).name == "chat"
    assert format_for_path("/v1/nothing", {"anthropic-version": "2023-06-01"}).name == "messages"
    assert format_for_client({"x-api-key": "k"}).name == "messages"
    assert format_for_client({"authorization": "Bearer k"}).name == "chat"
    assert format_for_path("/v1beta/models/x:nothing", {}).name == "gemini"
    assert format_for_path("/v1/models/x:generateContent", {}).name == "gemini"
    assert format_for_path("/v1/models/x", {}).name == "chat"
    assert format_for_client({"x-goog-api-key": "k"}).name == "gemini"
    assert format_for_client({}, {"key": "k"}).name == "gemini"
    assert format_for_client({}, {"alt": "sse"}).name == "chat"


def test_errors_render_with_each_formats_status() -> None:
    overloaded = errors.Overloaded("busy")
    assert CODECS["messages"].http_status(overloaded) == 529
    assert CODECS["chat"].http_status(overloaded) == 503
    assert CODECS["responses"].http_status(overloaded) == 503
    assert GEMINI.http_status(overloaded) == 503
    relayed = errors.InvalidRequest("bad", status=422)
    assert all(codec.http_status(relayed) == 422 for codec in CODECS.values())


def test_the_model_and_the_stream_flag_come_from_where_the_format_keeps_them() -> None:
    chat = FORMATS["chat"]
    assert chat.model_name({"model": "aria", "stream": True}) == "aria"
    assert chat.wants_stream({"model": "aria", "stream": True})
    assert not chat.wants_stream({"stream": "yes"})
    generate, stream, *_ = GEMINI_FORMAT.routes
    assert GEMINI_FORMAT.model_name({"model": "ignored"}, {"model": "aria"}) == "aria"
    assert not GEMINI_FORMAT.wants_stream({"stream": True}, generate)
    assert GEMINI_FORMAT.wants_stream({}, stream)


def test_the_model_rewrite_uses_the_formats_field() -> None:
    assert FORMATS["messages"].model_rewrites("up", "aria") == (
        (b'"model":"up"', b'"model":"aria"'),
        (b'"model": "up"', b'"model": "aria"'),
    )
    assert GEMINI_FORMAT.model_rewrites("up", "aria")[0] == (b'"modelVersion":"up"', b'"modelVersion":"aria"')
    assert GEMINI_FORMAT.model_rewrites("aria", "aria") == ()


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/v1beta/models/aria-5:generateContent", ("generate_content", {"model": "aria-5"})),
        ("/v1/models/nova.5-mini:generateContent", ("generate_content", {"model": "nova.5-mini"})),
        ("/v1/models/aria:countTokens", ("count_tokens", {"model": "aria"})),
        ("/v1beta/models/a/b:generateContent", None),
        ("/v2/models/aria:generateContent", None),
        ("/v1beta/models/:generateContent", None),
        ("/v1beta/models/aria:generateContentx", None),
    ],
)
def test_a_templated_route_matches_one_segment_per_parameter(
    path: str, params: tuple[str, dict[str, str]] | None
) -> None:
    found = None
    for format_route in GEMINI_FORMAT.routes:
        route = Route(format_route.path, frozenset({"POST"}), _nothing)
        assert route.is_template
        match = route.pattern().fullmatch(path)
        if match is not None:
            found = (format_route.endpoint, match.groupdict())
            break
    assert found == params
