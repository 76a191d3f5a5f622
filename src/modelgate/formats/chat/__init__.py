"""The OpenAI Chat Completions wire format (reference §2): ``CODEC`` is its ``formats.base.Codec``."""

from modelgate.formats.chat.codec import CODEC

__all__ = ["CODEC"]
