"""The Gemini API (``generateContent``) as an inbound wire format: ``CODEC`` is its
``formats.base.Codec``; ``paths``, ``models`` and ``wire`` hold what its routes need besides.

Inbound only: Gemini clients are answered by translating through ``modelgate.ir`` to the
upstream dialects the gateway speaks (Messages, Chat, Responses); no upstream speaks Gemini.
"""

from modelgate.formats.gemini.codec import CODEC

__all__ = ["CODEC"]
