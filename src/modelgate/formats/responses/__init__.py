"""The OpenAI Responses wire format (reference §3): ``CODEC`` is its ``formats.base.Codec``."""

from modelgate.formats.responses.codec import CODEC

__all__ = ["CODEC"]
