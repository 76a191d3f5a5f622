"""The most server-side web searches a request may make the provider run, which the hold covers.

A provider runs (and bills per request) web searches only when the request offers its web search
tool: a Messages server tool whose ``type`` starts with ``web_search_`` (``web_search_20250305``),
or a Responses hosted tool ``web_search``/``web_search_preview`` (and their dated variants). The
bound is ``limit`` (``billing.max_web_searches_per_request``), lowered to the sum of the offered
tools' ``max_uses`` when every one of them sets it (Anthropic stops a request's searches there).
Nothing bounds a tool without ``max_uses`` but the provider, so searches beyond ``limit`` are
charged only from what is free, as any usage beyond a hold is (docs/billing.md).
"""

from __future__ import annotations

from typing import Any


def _is_web_search(tool: dict[str, Any]) -> bool:
    kind = tool.get("type")
    return isinstance(kind, str) and (kind.startswith("web_search_") or kind == "web_search")


def web_search_bound(body: Any, limit: int) -> int:
    """Web searches to hold for the request whose parsed body is ``body``; 0 without the tool."""
    tools = body.get("tools") if isinstance(body, dict) else None
    if not isinstance(tools, list):
        return 0
    offered = [t for t in tools if isinstance(t, dict) and _is_web_search(t)]
    if not offered:
        return 0
    uses = [t.get("max_uses") for t in offered]
    if all(isinstance(u, int) and not isinstance(u, bool) and u >= 0 for u in uses):
        return min(limit, sum(u for u in uses if isinstance(u, int)))
    return limit
