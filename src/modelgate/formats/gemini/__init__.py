"""The Gemini API (``generateContent``) as an inbound wire format.

Inbound only: Gemini clients are answered by translating through ``modelgate.ir`` to the upstream
dialects the gateway speaks (Messages, Chat, Responses); no upstream speaks Gemini, so the
codec's upstream-side methods refuse (``codec``).

What a route of this format needs, module by module:

- ``paths``: the routes (``ROUTES``, under ``/v1beta`` and ``/v1``); the model and the method
  from the path (``parse_call``); the stream flag from the method and ``alt=sse``
  (``wants_stream``: a stream without ``alt=sse`` is a 400); the key from ``x-goog-api-key`` or
  ``?key=`` (``api_key``) and a query string fit to log (``redact_query``).
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

from modelgate.formats.gemini.codec import CODEC

__all__ = ["CODEC"]
