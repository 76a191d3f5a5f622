"""The Gemini API (``generateContent``) as an inbound wire format: ``CODEC`` is its
``formats.base.Codec``, ``FORMAT`` everything else the gateway knows about it
(``formats.format.Format``): its routes under ``/v1beta`` and ``/v1``, its key header and query
parameter, its model list, its count answer.

Inbound only: Gemini clients are answered by translating through ``modelgate.ir`` to the upstream
dialects the gateway speaks (Messages, Chat, Responses); no upstream speaks Gemini, so the
codec's upstream-side methods refuse (``codec``).

What a route of this format needs, module by module:

- ``paths``: the routes (under ``/v1beta`` and ``/v1``); the model and the method from the path
  (``parse_call``); the stream flag from the method and ``alt=sse`` (``wants_stream``: a stream
  without ``alt=sse`` is a 400); the key from ``x-goog-api-key`` or ``?key=`` (``api_key``) and a
  query string fit to log (``redact_query``).
- ``CODEC`` (``codec``): ``validate``, ``requested_max_tokens`` (``generationConfig.maxOutputTokens``),
  ``decode_request(body, model=, stream=)``, ``decode_count_request``, ``encode_response``,
  ``stream_encoder``, ``render_error`` and ``http_status`` (Google's ``{"error": {code, message,
  status}}``), ``preferred_dialects``.
- ``response.encode_count``: the ``countTokens`` answer ``{"totalTokens": n}``.
- ``models``: ``GET …/models`` pages (``models_page``, ``page_size``) and ``GET …/models/{model}``
  (``model_object``), named ``models/<id>``.

Decoding follows ``request`` (what is refused, accepted, ignored) and ``parts`` (roles, media,
function-call ids, thought signatures); answers follow ``response`` and ``stream``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from modelgate.catalogue import Model
from modelgate.formats.format import Credentials, Format, FormatRoute
from modelgate.formats.gemini import models, paths, response
from modelgate.formats.gemini.codec import CODEC
from modelgate.formats.jsonutil import Json

#: Usage records name every generation ``generate_content`` (streamed or not) and a count
#: ``count_tokens``, as the other formats' counts.
_ROUTES = tuple(
    route
    for version in paths.API_VERSIONS
    for route in (
        FormatRoute(f"/{version}/models/{{model}}:generateContent", "generate_content", stream=False),
        FormatRoute(f"/{version}/models/{{model}}:streamGenerateContent", "generate_content", stream=True),
        FormatRoute(f"/{version}/models/{{model}}:countTokens", "count_tokens", counting=True, stream=False),
    )
)


def _check_query(route: FormatRoute, query: Mapping[str, str]) -> None:
    paths.check_query(route.stream is True, query)


def _models_page(listed: Sequence[Model], query: Mapping[str, str]) -> Json:
    return models.models_page(listed, models.page_size(query.get("pageSize")), query.get("pageToken"))


FORMAT = Format(
    CODEC,
    routes=_ROUTES,
    preferred_dialects=CODEC.preferred_dialects,
    # The SDK sends x-goog-api-key; curl examples ?key=. x-api-key and Bearer are read too, as
    # on every route of the gateway.
    credentials=Credentials(headers=(paths.KEY_HEADER, "x-api-key"), bearer=True, query=paths.KEY_PARAMETER),
    model_field=None,
    stream_field=None,
    reply_model_field="modelVersion",
    owns_path=paths.owns_path,
    client_headers=(paths.KEY_HEADER, "x-goog-api-client"),
    outbound=False,
    check_query=_check_query,
    count_answer=response.encode_count,
    # /v1/models and /v1/models/{id} are shared with the OpenAI and Anthropic SDKs: they answer
    # in this shape when the client is claimed (``client_headers`` or ``?key=``).
    model_paths=("/v1beta/models", "/v1beta/models/{model}"),
    models_page=_models_page,
    model_object=models.model_object,
)

__all__ = ["CODEC", "FORMAT"]
