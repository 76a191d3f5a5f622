"""The OpenAI Responses wire format (docs/reference/wire-formats.md §3): ``CODEC`` is its ``formats.base.Codec``,
``FORMAT`` everything else the gateway knows about it (``formats.format.Format``)."""

from modelgate.formats.format import Format, FormatRoute
from modelgate.formats.responses.codec import CODEC

_NOT_FOR_ARIA = "Basic and Pro keys are not served on /v1/responses; use /v1/messages or /v1/chat/completions"

FORMAT = Format(
    CODEC,
    routes=(FormatRoute("/v1/responses", "responses", stateful=True),),
    preferred_dialects=("responses", "chat", "messages"),
    refused_groups={"Basic": _NOT_FOR_ARIA, "Pro": _NOT_FOR_ARIA},
)

__all__ = ["CODEC", "FORMAT"]
