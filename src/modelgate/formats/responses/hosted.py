"""Hosted tools on the Responses wire: the ``web_search`` tool the IR carries across dialects,
the hosted tools it does not (named for the caller), forced hosted tool choices, and the
``web_search_call`` output item (docs/wire-formats.md, "Hosted tools")."""

from __future__ import annotations

import re

import orjson

from modelgate import errors, ir
from modelgate.formats.jsonutil import Json, is_int, user_location

#: Tool types of OpenAI's hosted web search (current and preview spellings).
WEB_SEARCH_TYPES = frozenset(
    {"web_search", "web_search_2025_08_26", "web_search_preview", "web_search_preview_2025_03_11"}
)
#: Tool types that are not hosted: the client runs them (function tools, grouped or not).
CLIENT_TOOL_TYPES = frozenset({"function", "namespace"})
#: What a hosted tool's type may look like: it is named back in a response header and a log line.
TOOL_TYPE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def hosted_type(tool: Json, param: str) -> str:
    """A hosted tool's type, checked to be a plain name (it is echoed in a response header)."""
    kind = tool.get("type")
    if not isinstance(kind, str) or not TOOL_TYPE.fullmatch(kind):
        raise errors.InvalidRequest(
            "a tool type must be a name of letters, digits and _.-", param=f"{param}.type"
        )
    return kind


def offers_web_search(body: Json) -> bool:
    tools = body.get("tools")
    return isinstance(tools, list) and any(
        isinstance(t, dict) and t.get("type") in WEB_SEARCH_TYPES for t in tools
    )


def decode_hosted(body: Json, req: ir.Request) -> None:
    """The request's first web search tool into ``req.web_search`` (``max_tool_calls``, the
    limit on hosted tool calls, becomes its ``max_uses``); the types of the other hosted tools
    into ``req.hosted_tools``. Shapes are checked only where the IR keeps them."""
    tools = body.get("tools")
    if not isinstance(tools, list):
        return
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") in CLIENT_TOOL_TYPES:
            continue
        kind = hosted_type(tool, f"tools[{i}]")
        if kind in WEB_SEARCH_TYPES and req.web_search is None:
            req.web_search = _decode_web_search(tool, kind, f"tools[{i}]")
        elif kind not in WEB_SEARCH_TYPES:
            req.hosted_tools.append(kind)
    limit = body.get("max_tool_calls")
    if limit is None or req.web_search is None:
        return
    if not is_int(limit) or limit < 0:
        raise errors.InvalidRequest("max_tool_calls must be a non-negative integer", param="max_tool_calls")
    if limit == 0:
        req.web_search = None  # no hosted tool call allowed: the search is not on offer
    else:
        req.web_search.max_uses = limit


def _decode_web_search(tool: Json, kind: str, param: str) -> ir.WebSearchTool:
    search = ir.WebSearchTool(kind)
    filters = tool.get("filters")
    if filters is not None:
        if not isinstance(filters, dict):
            raise errors.InvalidRequest("filters must be an object", param=f"{param}.filters")
        domains = filters.get("allowed_domains")
        if domains is not None:
            if not isinstance(domains, list) or not all(isinstance(d, str) for d in domains):
                raise errors.InvalidRequest(
                    "allowed_domains must be a list of strings", param=f"{param}.filters.allowed_domains"
                )
            search.allowed_domains = list(domains) or None
    location = tool.get("user_location")
    if location is not None:
        search.user_location = user_location(location, f"{param}.user_location")
    return search


def decode_forced(choice: Json) -> ir.ToolChoice | None:
    """A tool choice forcing a hosted tool (``{"type": "web_search_preview"}``, ``file_search``,
    ``mcp``, ``custom``…), or None for the others (``allowed_tools`` lets the model choose)."""
    if choice.get("type") in ("function", "allowed_tools"):
        return None
    kind = hosted_type(choice, "tool_choice")
    name = ir.WEB_SEARCH_NAME if kind in WEB_SEARCH_TYPES else None
    return ir.ToolChoice("tool", name=name, hosted=kind)


def web_search_tool(search: ir.WebSearchTool) -> Json:
    """The ``web_search`` tool for a Responses upstream. Blocked domains and a use limit have no
    field on the tool (``max_uses`` becomes the request's ``max_tool_calls``)."""
    tool: Json = {"type": "web_search"}
    if search.allowed_domains:
        tool["filters"] = {"allowed_domains": list(search.allowed_domains)}
    if search.user_location:
        tool["user_location"] = dict(search.user_location)
    return tool


def forced_web_search() -> Json:
    """The tool choice that forces the ``web_search`` tool."""
    return {"type": "allowed_tools", "mode": "required", "tools": [{"type": "web_search"}]}


def web_search_call_item(part: ir.WebSearchCallPart, status: str | None = None) -> Json:
    """A ``web_search_call`` output item; its sources are the search's result URLs."""
    action: Json = {"type": "search", "query": part.query}
    result = part.result
    if result is not None:
        action["sources"] = [{"type": "url", "url": s.url} for s in result.sources]
    if status is None:
        status = "failed" if result is not None and result.error else "completed"
    return {"id": part.id, "type": "web_search_call", "status": status, "action": action}


def search_query(arguments: str) -> str:
    """The query of a search call whose input arrived as JSON text (``{"query": …}``)."""
    try:
        value = orjson.loads(arguments) if arguments else None
    except orjson.JSONDecodeError:
        return ""
    query = value.get("query") if isinstance(value, dict) else None
    return query if isinstance(query, str) else ""


def decode_web_search_call(item: Json) -> ir.WebSearchCallPart:
    """An upstream ``web_search_call`` item as the IR's search call (its ``search`` action)."""
    raw = item.get("action")
    action: Json = raw if isinstance(raw, dict) else {}
    query = action.get("query")
    if not isinstance(query, str):
        queries = action.get("queries")
        query = " ".join(q for q in queries if isinstance(q, str)) if isinstance(queries, list) else ""
    listed = action.get("sources")
    sources = [
        ir.WebSearchSource(str(s["url"]), str(s.get("title") or ""))
        for s in (listed if isinstance(listed, list) else ())
        if isinstance(s, dict) and isinstance(s.get("url"), str)
    ]
    error = "unavailable" if item.get("status") == "failed" else None
    return ir.WebSearchCallPart(str(item.get("id") or ""), query, ir.WebSearchResult(sources, error))
