"""The Anthropic Messages wire format (reference §1): ``CODEC`` is its ``formats.base.Codec``."""

from modelgate.formats.messages.codec import CODEC

__all__ = ["CODEC"]
