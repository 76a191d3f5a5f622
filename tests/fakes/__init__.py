"""Fakes at the network boundary (real servers on loopback)."""

from tests.fakes.upstream import FakeUpstream, Fault, RecordedRequest, Reply, ToolCall, refused_base_url

__all__ = ["FakeUpstream", "Fault", "RecordedRequest", "Reply", "ToolCall", "refused_base_url"]
