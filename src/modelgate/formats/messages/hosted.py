"""Server tools on the Messages wire: the web search tool the IR carries across dialects, the
server tools it does not (named for the caller), and the ``server_tool_use`` +
``web_search_tool_result`` blocks of a search (docs/wire-formats.md, "Hosted tools")."""

from __future__ import annotations

import re
from typing import Any

from modelgate import errors, ir
from modelgate.formats.jsonutil import Json, is_int, user_location

#: The web search tool version sent to Anthropic-dialect upstreams when translating.
WEB_SEARCH_TOOL_TYPE = "web_search_20250305"
_WEB_SEARCH_PREFIX = "web_search_"
#: What a server tool's type may look like: it is named back in a response header and a log line.
_TOOL_TYPE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def is_server_tool(tool: Json) -> bool:
    """Typed tools other than ``custom`` run on Anthropic's side (web search, code execution…)."""
    return tool.get("type") not in (None, "custom")


def offers_web_search(body: Json) -> bool:
    tools = body.get("tools")
    return isinstance(tools, list) and any(
        isinstance(t, dict) and str(t.get("type")).startswith(_WEB_SEARCH_PREFIX) for t in tools
    )


def decode_server_tool(tool: Json, param: str, req: ir.Request) -> None:
    """A web search server tool into ``req.web_search`` (the first one); any other server tool's
    type into ``req.hosted_tools``."""
    kind = tool.get("type")
    if not isinstance(kind, str) or not _TOOL_TYPE.fullmatch(kind):
        raise errors.InvalidRequest(
            f"{param}.type: expected a tool type name (letters, digits and _.-)", param=f"{param}.type"
        )
    if not kind.startswith(_WEB_SEARCH_PREFIX):
        req.hosted_tools.append(kind)
        return
    if req.web_search is not None:
        return
    search = ir.WebSearchTool(kind)
    max_uses = tool.get("max_uses")
    if max_uses is not None:
        if not is_int(max_uses) or max_uses < 1:
            raise errors.InvalidRequest(
                f"{param}.max_uses: expected a positive integer", param=f"{param}.max_uses"
            )
        search.max_uses = max_uses
    search.allowed_domains = _domains(tool, "allowed_domains", param)
    search.blocked_domains = _domains(tool, "blocked_domains", param)
    location = tool.get("user_location")
    if location is not None:
        search.user_location = user_location(location, f"{param}.user_location")
    req.web_search = search


def _domains(tool: Json, key: str, param: str) -> list[str] | None:
    value = tool.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(d, str) for d in value):
        raise errors.InvalidRequest(f"{param}.{key}: expected a list of strings", param=f"{param}.{key}")
    return list(value) or None


def web_search_tool(search: ir.WebSearchTool) -> Json:
    """Anthropic's web search server tool. Only one of allowed and blocked domains may be sent;
    the allow list wins (it is the narrower promise)."""
    tool: Json = {"type": WEB_SEARCH_TOOL_TYPE, "name": ir.WEB_SEARCH_NAME}
    if search.max_uses is not None:
        tool["max_uses"] = search.max_uses
    if search.allowed_domains:
        tool["allowed_domains"] = list(search.allowed_domains)
    elif search.blocked_domains:
        tool["blocked_domains"] = list(search.blocked_domains)
    if search.user_location:
        tool["user_location"] = dict(search.user_location)
    return tool


def server_tool_use_block(part: ir.WebSearchCallPart) -> Json:
    return {
        "type": "server_tool_use",
        "id": part.id,
        "name": ir.WEB_SEARCH_NAME,
        "input": {"query": part.query},
    }


def result_block(tool_use_id: str, result: ir.WebSearchResult) -> Json:
    """A ``web_search_tool_result`` block: the results, or the error object of a failed search."""
    if result.error:
        content: Any = {"type": "web_search_tool_result_error", "error_code": result.error}
    else:
        content = [
            {
                "type": "web_search_result",
                "url": s.url,
                "title": s.title,
                "encrypted_content": s.encrypted_content,
                "page_age": s.page_age,
            }
            for s in result.sources
        ]
    return {"type": "web_search_tool_result", "tool_use_id": tool_use_id, "content": content}


def decode_result(block: Json) -> ir.WebSearchResult:
    """The content of an upstream ``web_search_tool_result`` block."""
    content = block.get("content")
    if isinstance(content, dict):
        return ir.WebSearchResult([], str(content.get("error_code") or "unavailable"))
    sources = [
        ir.WebSearchSource(
            str(r["url"]),
            str(r.get("title") or ""),
            str(r.get("encrypted_content") or ""),
            r["page_age"] if isinstance(r.get("page_age"), str) else None,
        )
        for r in (content if isinstance(content, list) else ())
        if isinstance(r, dict) and isinstance(r.get("url"), str)
    ]
    return ir.WebSearchResult(sources)


def search_query(tool_input: Any) -> str:
    query = tool_input.get("query") if isinstance(tool_input, dict) else None
    return query if isinstance(query, str) else ""


def citation(raw: Any) -> ir.Citation | None:
    """A ``web_search_result_location`` citation (other kinds cite documents the IR drops)."""
    if not isinstance(raw, dict) or raw.get("type") != "web_search_result_location":
        return None
    url = raw.get("url")
    if not isinstance(url, str):
        return None
    title = raw.get("title")
    return ir.Citation(url, title if isinstance(title, str) else "")


def citations(block: Json) -> list[ir.Citation]:
    listed = block.get("citations")
    found = (citation(c) for c in (listed if isinstance(listed, list) else ()))
    return [c for c in found if c is not None]
