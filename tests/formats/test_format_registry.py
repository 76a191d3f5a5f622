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
    Credentials,
    Format,
    FormatRoute,
    format_for_client,
    format_for_path,
)
from modelgate.formats.gemini import CODEC as GEMINI
from modelgate.formats.gemini import paths
from modelgate.server.app import Route

#: Gemini as a registry entry would declare it (its package, once routed, exports this).
GEMINI_FORMAT = Format(
    GEMINI,
    routes=(
        FormatRoute("/{version}/models/{model}:generateContent", "gemini", stream=False),
        FormatRoute("/{version}/models/{model}:streamGenerateContent", "gemini", stream=True),
        FormatRoute("/{version}/models/{model}:countTokens", "count_tokens", counting=True, stream=False),
    ),
    preferred_dialects=GEMINI.preferred_dialects,
    credentials=Credentials(headers=(paths.KEY_HEADER,), bearer=False, query=paths.KEY_PARAMETER),
    model_field=None,
    stream_field=None,
    reply_model_field="modelVersion",
    owned_prefixes=("/v1beta/",),
    client_headers=(paths.KEY_HEADER,),
    outbound=False,
)


async def _nothing(scope: Scope, receive: Receive, send: Send) -> None:
    await Response()(scope, receive, send)


def test_the_registry_names_every_format_once_and_derives_the_codecs() -> None:
    assert list(FORMATS) == ["messages", "chat", "responses"]
    assert {name: f.codec for name, f in FORMATS.items()} == dict(CODECS)
    assert DIALECTS == ("messages", "chat", "responses")
    for fmt in FORMATS.values():
        assert fmt.preferred_dialects[0] == fmt.name
        assert sorted(fmt.preferred_dialects) == sorted(DIALECTS)


def test_refusals_off_the_routes_follow_the_path_then_the_client() -> None:
    assert format_for_path("/v1/messages/batches", {}).name == "messages"
    assert format_for_path("/v1/messages", {}).name == "messages"
    assert format_for_path("/v1/messagesx", {}).name == "chat"
    assert format_for_path("/v1/nothing", {"anthropic-version": "2023-06-01"}).name == "messages"
    assert format_for_client({"x-api-key": "k"}).name == "messages"
    assert format_for_client({"authorization": "Bearer k"}).name == "chat"


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
    generate, stream, _ = GEMINI_FORMAT.routes
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
        ("/v1beta/models/aria-5:generateContent", {"version": "v1beta", "model": "aria-5"}),
        ("/v1/models/nova.5-mini:generateContent", {"version": "v1", "model": "nova.5-mini"}),
        ("/v1beta/models/a/b:generateContent", None),
        ("/v1beta/models/aria:streamGenerateContent", None),
        ("/v1beta/models/:generateContent", None),
        ("/v1beta/models/aria:generateContentx", None),
    ],
)
def test_a_templated_route_matches_one_segment_per_parameter(
    path: str, params: dict[str, str] | None
) -> None:
    route = Route(GEMINI_FORMAT.routes[0].path, frozenset({"POST"}), _nothing)
    assert route.is_template
    found = route.pattern().fullmatch(path)
    assert (found.groupdict() if found else None) == params
