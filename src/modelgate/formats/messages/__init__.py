"""The Anthropic Messages wire format (docs/reference/wire-formats.md §1): ``CODEC`` is its ``formats.base.Codec``,
``FORMAT`` everything else the gateway knows about it (``formats.format.Format``)."""

from modelgate.formats.format import Credentials, Format, FormatRoute
from modelgate.formats.messages.codec import CODEC, VERSION_HEADERS

FORMAT = Format(
    CODEC,
    routes=(
        FormatRoute("/v1/messages", "messages"),
        FormatRoute("/v1/messages/count_tokens", "count_tokens", counting=True),
    ),
    preferred_dialects=("messages", "chat", "responses"),
    credentials=Credentials(headers=("x-api-key",), bearer=True),
    refused_groups={
        "Nova": "Nova keys are not served on /v1/messages; use /v1/chat/completions or /v1/responses",
    },
    owned_prefixes=("/v1/messages/",),
    client_headers=(*VERSION_HEADERS, "x-api-key"),
)

__all__ = ["CODEC", "FORMAT"]
