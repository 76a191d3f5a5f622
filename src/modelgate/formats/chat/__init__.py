"""The OpenAI Chat Completions wire format (docs/reference/wire-formats.md §2): ``CODEC`` is its ``formats.base.Codec``,
``FORMAT`` everything else the gateway knows about it (``formats.format.Format``)."""

from modelgate.formats.chat.codec import CODEC
from modelgate.formats.format import Format, FormatRoute

FORMAT = Format(
    CODEC,
    routes=(FormatRoute("/v1/chat/completions", "chat"),),
    preferred_dialects=("chat", "messages", "responses"),
    # The format of the OpenAI SDKs, whose clients send nothing of their own: the answer on a
    # shared path when no format claims the client.
    answers_unclaimed=True,
)

__all__ = ["CODEC", "FORMAT"]
