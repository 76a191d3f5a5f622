"""Messages requests: decoding into the IR and encoding for an Anthropic-dialect upstream.

Wire shapes follow docs/reference/wire-formats.md §1; cross-format mapping rules follow §4. Requests are decoded
leniently: unknown and beta fields (``thinking``, ``context_management``, ``cache_control``, …) are
ignored rather than refused, because real clients send them and the real API accepts them.
"""

from __future__ import annotations

from typing import Any

from modelgate import errors, ir
from modelgate.formats.jsonutil import is_int
from modelgate.formats.messages import hosted

#: Placeholder first turn: the Messages API requires the conversation to start with a user turn.
CONTINUE_PLACEHOLDER = "(continue)"
#: Appended to ``system`` for ``response_format: json_object``, which Messages has no field for.
JSON_OBJECT_INSTRUCTION = "Respond with a single valid JSON object and nothing else."
#: Claude Code's stand-in among ``defer_loading`` tools (a name to keep the tool list non-empty,
#: never to be called): left out when translating, since deferred tools are sent in full.
DEFERRED_PLACEHOLDER = "DeferredToolPlaceholder"
#: Effort levels Messages upstreams accept; OpenAI's ``minimal`` reads as ``low`` and ``none``
#: as no effort at all.
MESSAGES_EFFORTS = ("low", "medium", "high", "xhigh", "max")


def tool_reference_text(name: str) -> str:
    """What a ``tool_reference`` block (a tool that tool search just loaded) says to an upstream
    without tool search, where every deferred tool was offered from the start."""
    return f"Tool {name} is now available."


def _invalid(message: str, param: str) -> errors.InvalidRequest:
    return errors.InvalidRequest(message, param=param)


def _opt_number(body: dict[str, Any], key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _invalid(f"{key}: expected a number", key)
    return float(value)


def _text_of(value: Any, param: str) -> list[str]:
    """Text of a ``system``-like value: a string or a list of ``text`` blocks."""
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list):
        out = []
        for i, block in enumerate(value):
            if not isinstance(block, dict):
                raise _invalid(f"{param}.{i}: expected an object", f"{param}.{i}")
            text = block.get("text")
            if isinstance(text, str) and text:
                out.append(text)
        return out
    raise _invalid(f"{param}: expected a string or a list of text blocks", param)


def _decode_source(source: Any, param: str) -> dict[str, Any]:
    if not isinstance(source, dict):
        raise _invalid(f"{param}: expected an object", param)
    return source


def _decode_image(block: dict[str, Any], param: str) -> ir.ImagePart:
    source = _decode_source(block.get("source"), f"{param}.source")
    if source.get("type") == "url":
        return ir.ImagePart(url=source.get("url"))
    return ir.ImagePart(media_type=source.get("media_type"), data=source.get("data"))


def _decode_document(block: dict[str, Any], param: str) -> ir.DocumentPart:
    source = _decode_source(block.get("source"), f"{param}.source")
    title = block.get("title") if isinstance(block.get("title"), str) else None
    kind = source.get("type")
    if kind == "url":
        return ir.DocumentPart(url=source.get("url"), filename=title)
    if kind == "text":
        return ir.DocumentPart(text=source.get("data"), media_type="text/plain", filename=title)
    if kind == "content":
        content = source.get("content")
        text = "\n".join(_text_of(content, f"{param}.source.content")) if content is not None else ""
        return ir.DocumentPart(text=text, media_type="text/plain", filename=title)
    return ir.DocumentPart(media_type=source.get("media_type"), data=source.get("data"), filename=title)


def _decode_tool_result(block: dict[str, Any], param: str) -> ir.ToolResultPart:
    tool_use_id = block.get("tool_use_id")
    if not isinstance(tool_use_id, str):
        raise _invalid(f"{param}.tool_use_id: expected a string", f"{param}.tool_use_id")
    content = block.get("content")
    parts: list[ir.TextPart | ir.ImagePart] = []
    #: The text part of the tool references just read: consecutive ones share it, a line each.
    references: ir.TextPart | None = None
    if isinstance(content, str):
        parts.append(ir.TextPart(content))
    elif isinstance(content, list):
        for j, item in enumerate(content):
            if not isinstance(item, dict):
                raise _invalid(f"{param}.content.{j}: expected an object", f"{param}.content.{j}")
            kind = item.get("type")
            if kind == "tool_reference":
                name = item.get("tool_name")
                if not isinstance(name, str) or not name:
                    where = f"{param}.content.{j}.tool_name"
                    raise _invalid(f"{where}: expected a non-empty string", where)
                if references is None:
                    references = ir.TextPart(tool_reference_text(name))
                    parts.append(references)
                else:
                    references.text += "\n" + tool_reference_text(name)
                continue
            references = None
            if kind == "text" and isinstance(item.get("text"), str):
                parts.append(ir.TextPart(item["text"]))
            elif kind == "image":
                parts.append(_decode_image(item, f"{param}.content.{j}"))
            elif kind in ("document", "search_result"):
                # Documents and search results inside a tool result degrade to their text.
                doc_text = _loose_text(item)
                if doc_text:
                    parts.append(ir.TextPart(doc_text))
    return ir.ToolResultPart(tool_use_id, parts, is_error=block.get("is_error") is True)


def _loose_text(block: dict[str, Any]) -> str:
    source = block.get("source")
    if isinstance(source, dict) and isinstance(source.get("data"), str) and source.get("type") == "text":
        return str(source["data"])
    content = block.get("content")
    if isinstance(content, list):
        return "\n".join(c["text"] for c in content if isinstance(c, dict) and isinstance(c.get("text"), str))
    return ""


def _decode_block(block: Any, param: str) -> ir.Part | None:
    if not isinstance(block, dict):
        raise _invalid(f"{param}: expected an object", param)
    kind = block.get("type")
    if kind == "text":
        text = block.get("text")
        if not isinstance(text, str):
            raise _invalid(f"{param}.text: expected a string", f"{param}.text")
        return ir.TextPart(text)
    if kind == "image":
        return _decode_image(block, param)
    if kind == "document":
        return _decode_document(block, param)
    if kind == "tool_use":
        tool_id, name, tool_input = block.get("id"), block.get("name"), block.get("input")
        if not isinstance(tool_id, str) or not isinstance(name, str):
            raise _invalid(f"{param}: tool_use needs string id and name", param)
        return ir.ToolUsePart(tool_id, name, tool_input if isinstance(tool_input, dict) else {})
    if kind == "tool_result":
        return _decode_tool_result(block, param)
    if kind == "thinking":
        sig = block.get("signature")
        return ir.ThinkingPart(str(block.get("thinking") or ""), sig if isinstance(sig, str) else None)
    if kind == "redacted_thinking":
        return ir.RedactedThinkingPart(str(block.get("data") or ""))
    # Server-tool round trips, search results, container uploads, future types: not translatable.
    return None


def _decode_message(msg: Any, i: int) -> ir.Message:
    param = f"messages.{i}"
    if not isinstance(msg, dict):
        raise _invalid(f"{param}: expected an object", param)
    role = msg.get("role")
    if role not in ("user", "assistant", "system"):
        raise _invalid(f"{param}.role: expected 'user', 'assistant' or 'system'", f"{param}.role")
    content = msg.get("content")
    parts: list[ir.Part] = []
    if isinstance(content, str):
        parts.append(ir.TextPart(content))
    elif isinstance(content, list):
        for j, block in enumerate(content):
            part = _decode_block(block, f"{param}.content.{j}")
            if part is not None:
                parts.append(part)
    else:
        raise _invalid(f"{param}.content: expected a string or a list of blocks", f"{param}.content")
    return ir.Message(role, parts)


def _decode_tools(value: Any, req: ir.Request) -> dict[str, str]:
    """Custom tools into ``req.tools`` (``defer_loading`` tools as ordinary ones, without Claude
    Code's placeholder), server tools into ``req.web_search``/``req.hosted_tools``. Returns the
    server tools' names -> types, for a tool choice naming one."""
    if not isinstance(value, list):
        raise _invalid("tools: expected a list", "tools")
    server: dict[str, str] = {}
    for i, tool in enumerate(value):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise _invalid(f"tools.{i}: expected an object with a string name", f"tools.{i}")
        if hosted.is_server_tool(tool):
            hosted.decode_server_tool(tool, f"tools.{i}", req)
            server[tool["name"]] = str(tool.get("type"))
            continue
        if tool.get("defer_loading") is True and tool["name"] == DEFERRED_PLACEHOLDER:
            continue
        schema = tool.get("input_schema")
        req.tools.append(
            ir.Tool(
                tool["name"],
                tool.get("description") if isinstance(tool.get("description"), str) else None,
                schema if isinstance(schema, dict) else {"type": "object", "properties": {}},
            )
        )
    return server


def _decode_tool_choice(value: Any, server: dict[str, str]) -> ir.ToolChoice | None:
    if not isinstance(value, dict):
        raise _invalid("tool_choice: expected an object", "tool_choice")
    kind = value.get("type")
    if kind not in ("auto", "any", "none", "tool"):
        raise _invalid("tool_choice.type: expected auto, any, tool or none", "tool_choice.type")
    name = value.get("name") if kind == "tool" else None
    if kind == "tool" and not isinstance(name, str):
        raise _invalid("tool_choice.name: required for type tool", "tool_choice.name")
    choice = ir.ToolChoice(kind, name, value.get("disable_parallel_tool_use") is True)
    if name is not None and name in server:
        # A server tool: runnable only where the IR carries it (web search), refused elsewhere.
        choice.hosted = server[name]
        choice.name = ir.WEB_SEARCH_NAME if server[name].startswith("web_search_") else None
    return choice


def _effort_from_thinking(thinking: Any) -> str | None:
    """Budget ↔ effort bucket (docs/reference/wire-formats.md §4.1) for upstreams that take ``reasoning_effort``."""
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        return None
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int):
        return None
    return "low" if budget < 4096 else "medium" if budget < 16384 else "high"


def decode_request(body: dict[str, Any], *, require_max_tokens: bool = True) -> ir.Request:
    """A Messages request body -> IR. ``require_max_tokens=False`` for ``count_tokens`` bodies."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _invalid("model: required string", "model")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise _invalid("messages: required list", "messages")
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        if require_max_tokens:
            raise _invalid("max_tokens: required integer", "max_tokens")
    elif not is_int(max_tokens) or max_tokens < 0:
        raise _invalid("max_tokens: expected a non-negative integer", "max_tokens")
    req = ir.Request(model=model, messages=[_decode_message(m, i) for i, m in enumerate(messages)])
    req.max_tokens = max_tokens
    if body.get("system") is not None:
        req.system = _text_of(body["system"], "system")
    req.stream = body.get("stream") is True
    server_tools = _decode_tools(body["tools"], req) if body.get("tools") is not None else {}
    if body.get("tool_choice") is not None:
        req.tool_choice = _decode_tool_choice(body["tool_choice"], server_tools)
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise _invalid("stop_sequences: expected a list of strings", "stop_sequences")
        req.stop_sequences = list(stops)
    req.temperature = _opt_number(body, "temperature")
    req.top_p = _opt_number(body, "top_p")
    top_k = body.get("top_k")
    if top_k is not None:
        if not is_int(top_k):
            raise _invalid("top_k: expected an integer", "top_k")
        req.top_k = top_k
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("user_id"), str):
        req.user = metadata["user_id"]
    output_config = body.get("output_config")
    # The older top-level ``output_format`` (structured-outputs beta) means what
    # ``output_config.format`` means; the newer field wins when both are sent.
    fmt = body.get("output_format")
    if isinstance(output_config, dict):
        effort = output_config.get("effort")
        if effort is not None and not isinstance(effort, str):
            raise _invalid("output_config.effort: expected a string", "output_config.effort")
        req.reasoning_effort = effort
        fmt = output_config.get("format", fmt)
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema" and isinstance(fmt.get("schema"), dict):
        name = fmt.get("name") if isinstance(fmt.get("name"), str) else "response"
        req.response_format = {"type": "json_schema", "name": name, "schema": fmt["schema"]}
    if req.reasoning_effort is None:
        req.reasoning_effort = _effort_from_thinking(body.get("thinking"))
    return req


def _encode_image(part: ir.ImagePart) -> dict[str, Any]:
    if part.url is not None:
        return {"type": "image", "source": {"type": "url", "url": part.url}}
    source = {"type": "base64", "media_type": part.media_type or "image/png", "data": part.data or ""}
    return {"type": "image", "source": source}


def _encode_part(part: ir.Part) -> dict[str, Any] | None:
    """One IR part as a Messages block; ``None`` for parts the API would refuse (empty text)."""
    if isinstance(part, ir.TextPart):
        return {"type": "text", "text": part.text} if part.text else None
    if isinstance(part, ir.ImagePart):
        return _encode_image(part)
    if isinstance(part, ir.DocumentPart):
        if part.url is not None:
            source: dict[str, Any] = {"type": "url", "url": part.url}
        elif part.text is not None:
            source = {"type": "text", "media_type": "text/plain", "data": part.text}
        else:
            source = {"type": "base64", "media_type": part.media_type or "application/pdf", "data": part.data}
        doc: dict[str, Any] = {"type": "document", "source": source}
        if part.filename:
            doc["title"] = part.filename
        return doc
    if isinstance(part, ir.ToolUsePart):
        return {"type": "tool_use", "id": part.id, "name": part.name, "input": part.input}
    if isinstance(part, ir.ToolResultPart):
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": part.tool_use_id}
        content = [b for b in map(_encode_part, part.content) if b is not None]
        if content:
            block["content"] = content
        if part.is_error:
            block["is_error"] = True
        return block
    if isinstance(part, ir.ThinkingPart):
        # A thinking block without its signature is refused upstream; it came from another format.
        if not part.signature:
            return None
        return {"type": "thinking", "thinking": part.thinking, "signature": part.signature}
    return {"type": "redacted_thinking", "data": part.data}


def _encode_messages(req: ir.Request) -> tuple[list[str], list[dict[str, Any]]]:
    """Messages for the upstream, plus the system text collected from mid-conversation turns.

    Invariants of the result: roles alternate, the first turn is ``user``, no turn is empty, and
    within a user turn ``tool_result`` blocks come first (the API requires it after ``tool_use``).
    """
    system = list(req.system)
    out: list[dict[str, Any]] = []
    for msg in req.messages:
        if msg.role == "system":
            # The real API takes role "system" only behind a beta; fold it into the top-level system.
            system.extend(p.text for p in msg.content if isinstance(p, ir.TextPart) and p.text)
            continue
        blocks = [b for b in map(_encode_part, msg.content) if b is not None]
        if not blocks:
            continue
        if out and out[-1]["role"] == msg.role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": msg.role, "content": blocks})
    for turn in out:
        if turn["role"] == "user":
            turn["content"].sort(key=lambda b: b["type"] != "tool_result")
    if not out or out[0]["role"] != "user":
        out.insert(0, {"role": "user", "content": [{"type": "text", "text": CONTINUE_PLACEHOLDER}]})
    return system, out


def encode_request(req: ir.Request, upstream_model: str) -> dict[str, Any]:
    """IR -> a Messages request for an Anthropic-dialect upstream (translation path).

    Mid-conversation system turns are appended, in order, to the top-level ``system``; a
    conversation that does not start with a user turn gets a ``(continue)`` user turn first.
    ``reasoning_effort`` becomes ``output_config.effort`` only: turning on ``thinking`` would make
    the upstream demand thinking blocks in replayed tool turns, which other formats cannot supply.
    """
    system, messages = _encode_messages(req)
    if req.response_format is not None and req.response_format.get("type") == "json_object":
        system.append(JSON_OBJECT_INSTRUCTION)
    body: dict[str, Any] = {
        "model": upstream_model,
        "messages": messages,
        "max_tokens": req.max_tokens if req.max_tokens is not None else 4096,
    }
    if system:
        body["system"] = [{"type": "text", "text": s} for s in system]
    if req.stream:
        body["stream"] = True
    if req.stop_sequences:
        body["stop_sequences"] = list(req.stop_sequences)
    if req.temperature is not None:
        body["temperature"] = min(max(req.temperature, 0.0), 1.0)
    if req.top_p is not None:
        body["top_p"] = req.top_p
    if req.top_k is not None:
        body["top_k"] = req.top_k
    tools = [
        {
            "name": t.name,
            **({"description": t.description} if t.description else {}),
            "input_schema": t.input_schema,
        }
        for t in req.tools
    ]
    if req.web_search is not None:
        tools.append(hosted.web_search_tool(req.web_search))
    if tools:
        body["tools"] = tools
    if req.tool_choice is not None:
        choice: dict[str, Any] = {"type": req.tool_choice.type}
        if req.tool_choice.type == "tool":
            choice["name"] = req.tool_choice.name
        if req.tool_choice.disable_parallel and req.tool_choice.type != "none":
            choice["disable_parallel_tool_use"] = True
        if tools:  # the API refuses tool_choice without tools
            body["tool_choice"] = choice
    if req.user is not None:
        body["metadata"] = {"user_id": req.user}
    output_config: dict[str, Any] = {}
    effort = "low" if req.reasoning_effort == "minimal" else req.reasoning_effort
    if effort in MESSAGES_EFFORTS:
        output_config["effort"] = effort
    if req.response_format is not None and req.response_format.get("type") == "json_schema":
        output_config["format"] = {"type": "json_schema", "schema": req.response_format.get("schema", {})}
    if output_config:
        body["output_config"] = output_config
    return body
