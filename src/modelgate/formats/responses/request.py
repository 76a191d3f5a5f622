"""Responses requests: decoding into the IR and encoding for a Responses-dialect upstream.

Decoding is lenient where real clients need it (Codex sends ``store:false``, ``include``,
``prompt_cache_key``, ``client_metadata``, a hosted ``web_search`` tool and ``namespace`` tools with
every request): unknown fields are ignored, a ``web_search`` tool is kept for dialects that can
run one and other hosted tools are named in ``ir.Request.hosted_tools`` (``hosted``), and
``reasoning`` input items are dropped (their encrypted content is
upstream-specific). It is strict where silently guessing would change meaning: ``file_id``
inputs, and stateful fields that reach decoding (``refuse_stateful``: the gateway expands stored
state before decoding, so only a gateway with stored responses turned off gets here with them),
are 400s.

Namespace tools (``{"type":"namespace","name":ns,"tools":[...]}``) are flattened to function tools
named ``<ns>__<name>``; ``tool_namespaces(body)`` returns the reverse map, which the encoders use
to emit ``{"name": name, "namespace": ns}`` calls as the real API does.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Literal

import orjson

from modelgate import errors, ir
from modelgate.formats.jsonutil import Json
from modelgate.formats.responses import hosted
from modelgate.formats.responses.state import is_reference
from modelgate.formats.responses.wire import text_format, tool_choice_to_wire, tool_to_wire

NAMESPACE_SEPARATOR = "__"
_SYSTEM_ROLES = ("system", "developer")


def decode_request(body: dict[str, Any]) -> ir.Request:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise errors.InvalidRequest("model is required and must be a string", param="model")
    refuse_stateful(body)
    raw_input = body.get("input")
    if raw_input is None:
        raise errors.InvalidRequest("input is required", param="input")
    system: list[str] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        system.append(instructions)
    if isinstance(raw_input, str):
        messages = [ir.Message("user", [ir.TextPart(raw_input)])]
    elif isinstance(raw_input, list):
        messages = _decode_items(raw_input, system)
    else:
        raise errors.InvalidRequest("input must be a string or an array of items", param="input")

    reasoning = body.get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    if effort is not None and not isinstance(effort, str):
        raise errors.InvalidRequest("reasoning.effort must be a string", param="reasoning.effort")
    user = body.get("user") or body.get("safety_identifier")
    req = ir.Request(
        model=model,
        messages=messages,
        max_tokens=_opt_int(body.get("max_output_tokens"), "max_output_tokens"),
        system=system,
        stream=body.get("stream") is True,
        tools=_decode_tools(body.get("tools")),
        tool_choice=_decode_tool_choice(body.get("tool_choice"), body.get("parallel_tool_calls")),
        temperature=_opt_float(body.get("temperature"), "temperature"),
        top_p=_opt_float(body.get("top_p"), "top_p"),
        user=user if isinstance(user, str) else None,
        reasoning_effort=effort if isinstance(effort, str) else None,
        response_format=_decode_text_format(body.get("text")),
        tool_namespaces=tool_namespaces(body),
    )
    hosted.decode_hosted(body, req)
    return req


def refuse_stateful(body: dict[str, Any]) -> None:
    """Stateful fields never reach decoding when the gateway can honour them (``gateway.state``
    expands stored history first; an upstream that keeps state gets the body as it is). Here they
    would be dropped silently and change the answer, so each is a 400 naming the field."""
    if body.get("previous_response_id") is not None:
        raise errors.InvalidRequest(
            'previous_response_id is not supported: this gateway keeps no stored responses (responses.store = "off"); '
            "resend the full conversation with store:false",
            param="previous_response_id",
        )
    if body.get("conversation") is not None:
        raise errors.InvalidRequest(
            'conversation is not supported: this gateway keeps no conversations (responses.store = "off"); '
            "resend the full conversation in input",
            param="conversation",
        )
    if body.get("prompt") is not None:
        raise errors.InvalidRequest(
            "prompt (a stored prompt template) is not supported for this model: its upstream keeps no "
            "prompts; send the instructions and input instead",
            param="prompt",
        )
    if body.get("background") is True:
        raise errors.InvalidRequest(
            "background responses are not supported by this gateway; send the request without "
            "background (stream it for long answers)",
            param="background",
        )


def tool_namespaces(body: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Flattened tool name -> ``(namespace, name)`` for the request's namespace tools."""
    result: dict[str, tuple[str, str]] = {}
    tools = body.get("tools")
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, dict) and tool.get("type") == "namespace":
            namespace = str(tool.get("name") or "")
            inner_tools = tool.get("tools")
            for inner in inner_tools if isinstance(inner_tools, list) else ():
                if isinstance(inner, dict) and inner.get("type") == "function" and inner.get("name"):
                    name = str(inner["name"])
                    result[namespace + NAMESPACE_SEPARATOR + name] = (namespace, name)
    return result


def _decode_items(items: list[Any], system: list[str]) -> list[ir.Message]:
    messages: list[ir.Message] = []

    def add(role: Literal["user", "assistant", "system"], parts: list[ir.Part]) -> None:
        # Consecutive items of one role become one turn (a call and its sibling calls, a run of
        # function_call_output items), which is what Messages upstreams require.
        if messages and messages[-1].role == role:
            messages[-1].content.extend(parts)
        else:
            messages.append(ir.Message(role, parts))

    for position, item in enumerate(items):
        param = f"input[{position}]"
        if not isinstance(item, dict):
            raise errors.InvalidRequest("each input item must be an object", param=param)
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            parts = _decode_content(item.get("content"), param)
            if role in _SYSTEM_ROLES:
                text = "\n\n".join(p.text for p in parts if isinstance(p, ir.TextPart))
                if not messages:
                    system.append(text)  # still the leading instructions
                else:
                    add("system", [ir.TextPart(text)])
            elif role in ("user", "assistant"):
                add(role, parts)
            else:
                raise errors.InvalidRequest(f"unsupported message role {role!r}", param=f"{param}.role")
        elif kind == "function_call":
            call_id, name = item.get("call_id"), item.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise errors.InvalidRequest("function_call needs call_id and name", param=param)
            if isinstance(item.get("namespace"), str) and item["namespace"]:
                name = item["namespace"] + NAMESPACE_SEPARATOR + name
            add("assistant", [ir.ToolUsePart(call_id, name, ir.tool_input(item.get("arguments")))])
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise errors.InvalidRequest("function_call_output needs call_id", param=param)
            add("user", [ir.ToolResultPart(call_id, _decode_tool_output(item.get("output"), param))])
        elif kind == "item_reference" or is_reference(item):
            # The gateway resolves references before decoding (gateway.state); one left here
            # names nothing it keeps (stored responses are off).
            raise errors.InvalidRequest(
                "item_reference is not supported: this gateway keeps no stored items "
                '(responses.store = "off"); send the items inline',
                param=param,
            )
        # reasoning (encrypted, upstream-specific) and hosted-tool call items are dropped: the
        # matching tools are dropped too, so the model never sees half of a pair.
    return messages


def _decode_content(content: Any, param: str) -> list[ir.Part]:
    if isinstance(content, str):
        return [ir.TextPart(content)]
    if not isinstance(content, list):
        raise errors.InvalidRequest("message content must be a string or an array", param=f"{param}.content")
    parts: list[ir.Part] = []
    for index, part in enumerate(content):
        where = f"{param}.content[{index}]"
        if not isinstance(part, dict):
            raise errors.InvalidRequest("each content part must be an object", param=where)
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text", "summary_text"):
            parts.append(ir.TextPart(str(part.get("text") or "")))
        elif kind == "refusal":
            parts.append(ir.TextPart(str(part.get("refusal") or "")))
        elif kind == "input_image":
            parts.append(_decode_image(part, where))
        elif kind == "input_file":
            parts.append(_decode_file(part, where))
        else:
            raise errors.InvalidRequest(f"unsupported content part type {kind!r}", param=where)
    return parts


def _decode_image(part: Json, param: str) -> ir.ImagePart:
    url = part.get("image_url")
    if not isinstance(url, str) or not url:
        raise errors.InvalidRequest("input_image needs image_url (file_id is not supported)", param=param)
    if url.startswith("data:"):
        media_type, data = _split_data_url(url, param)
        return ir.ImagePart(media_type=media_type, data=data)
    return ir.ImagePart(url=url)


def _decode_file(part: Json, param: str) -> ir.DocumentPart:
    filename = part.get("filename") if isinstance(part.get("filename"), str) else None
    file_data, file_url = part.get("file_data"), part.get("file_url")
    if isinstance(file_url, str) and file_url:
        return ir.DocumentPart(url=file_url, filename=filename)
    if not isinstance(file_data, str) or not file_data:
        raise errors.InvalidRequest(
            "input_file needs file_data or file_url (file_id is not supported)", param=param
        )
    if file_data.startswith("data:"):
        media_type, data = _split_data_url(file_data, param)
    else:
        media_type, data = "application/pdf", file_data
    if media_type.startswith("text/"):
        try:
            return ir.DocumentPart(text=base64.b64decode(data).decode("utf-8"), filename=filename)
        except (binascii.Error, UnicodeDecodeError):
            raise errors.InvalidRequest(
                "input_file text data is not valid base64 UTF-8", param=param
            ) from None
    return ir.DocumentPart(media_type=media_type, data=data, filename=filename)


def _split_data_url(url: str, param: str) -> tuple[str, str]:
    header, sep, data = url.partition(",")
    if not sep or not header.endswith(";base64"):
        raise errors.InvalidRequest("data URLs must be base64 (data:<type>;base64,<data>)", param=param)
    return header[5:-7] or "application/octet-stream", data


def _decode_tool_output(output: Any, param: str) -> list[ir.TextPart | ir.ImagePart]:
    if isinstance(output, str):
        return [ir.TextPart(output)]
    if not isinstance(output, list):
        return [ir.TextPart("" if output is None else orjson.dumps(output).decode())]
    result: list[ir.TextPart | ir.ImagePart] = []
    for part in _decode_content(output, param + ".output"):
        if isinstance(part, ir.TextPart | ir.ImagePart):
            result.append(part)
        elif isinstance(part, ir.DocumentPart) and part.text is not None:
            result.append(ir.TextPart(part.text))
    return result


def _decode_tools(tools: Any) -> list[ir.Tool]:
    if not isinstance(tools, list):
        return []
    result: list[ir.Tool] = []
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "function":
            result.append(_function_tool(tool, ""))
        elif tool.get("type") == "namespace":
            prefix = str(tool.get("name") or "") + NAMESPACE_SEPARATOR
            members = tool.get("tools")
            inner = [
                t
                for t in (members if isinstance(members, list) else ())
                if isinstance(t, dict) and t.get("type") == "function"
            ]
            result.extend(_function_tool(t, prefix) for t in inner)
    return result


def _function_tool(tool: Json, prefix: str) -> ir.Tool:
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise errors.InvalidRequest("function tools need a name", param="tools")
    params = tool.get("parameters")
    description = tool.get("description")
    return ir.Tool(
        name=prefix + name,
        description=description if isinstance(description, str) else None,
        input_schema=params if isinstance(params, dict) else {"type": "object", "properties": {}},
    )


def _decode_tool_choice(choice: Any, parallel: Any) -> ir.ToolChoice | None:
    result: ir.ToolChoice | None = None
    if choice == "none" or choice == "auto":
        result = ir.ToolChoice(choice)
    elif choice == "required":
        result = ir.ToolChoice("any")
    elif (
        isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str)
    ):
        result = ir.ToolChoice("tool", name=choice["name"])
    elif isinstance(choice, dict) and (forced := hosted.decode_forced(choice)) is not None:
        result = forced  # a hosted tool: runnable upstream or refused (gateway.translate)
    elif choice is not None:
        # allowed_tools lists tools the model may choose from: let it choose among all of them.
        result = ir.ToolChoice("auto")
    if parallel is False:
        result = result or ir.ToolChoice("auto")
        result.disable_parallel = True
    return result


def _decode_text_format(text: Any) -> Json | None:
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict):
        return None
    if fmt.get("type") == "json_schema":
        result: Json = {
            "type": "json_schema",
            "name": fmt.get("name") or "response",
            "schema": fmt.get("schema") or {},
        }
        if "strict" in fmt:
            result["strict"] = bool(fmt["strict"])
        return result
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    return None


def _opt_int(value: Any, param: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise errors.InvalidRequest(f"{param} must be a non-negative integer", param=param)
    return value


def _opt_float(value: Any, param: str) -> float | None:
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise errors.InvalidRequest(f"{param} must be a number", param=param)
    return float(value)


def encode_request(req: ir.Request, upstream_model: str) -> dict[str, Any]:
    """``stop_sequences`` and ``top_k`` have no Responses equivalent and are dropped."""
    body: Json = {"model": upstream_model, "input": _encode_items(req.messages), "store": False}
    if req.system:
        body["instructions"] = "\n\n".join(req.system)
    if req.max_tokens is not None:
        body["max_output_tokens"] = req.max_tokens
    tools = [tool_to_wire(tool) for tool in req.tools]
    if req.web_search is not None:
        tools.append(hosted.web_search_tool(req.web_search))
        if req.web_search.max_uses is not None:
            body["max_tool_calls"] = req.web_search.max_uses
    if tools:
        body["tools"] = tools
    if req.tool_choice is not None:
        forced_search = req.tool_choice.hosted is not None and req.web_search is not None
        body["tool_choice"] = (
            hosted.forced_web_search() if forced_search else tool_choice_to_wire(req.tool_choice)
        )
        if req.tool_choice.disable_parallel:
            body["parallel_tool_calls"] = False
    for key, value in (
        ("temperature", req.temperature),
        ("top_p", req.top_p),
        ("safety_identifier", req.user),
    ):
        if value is not None:
            body[key] = value
    if req.reasoning_effort is not None:
        body["reasoning"] = {"effort": req.reasoning_effort}
    if req.response_format is not None:
        body["text"] = {"format": text_format(req.response_format)}
    if req.stream:
        body["stream"] = True
    return body


def _encode_items(messages: list[ir.Message]) -> list[Json]:
    items: list[Json] = []
    for message in messages:
        role = "developer" if message.role == "system" else message.role
        pending: list[Json] = []  # content parts of the message item being built
        for part in message.content:
            if isinstance(part, ir.TextPart):
                kind = "output_text" if role == "assistant" else "input_text"
                pending.append({"type": kind, "text": part.text})
            elif isinstance(part, ir.ImagePart):
                pending.append(_encode_image(part))
            elif isinstance(part, ir.DocumentPart):
                pending.append(_encode_document(part))
            elif isinstance(part, ir.ToolUsePart):
                pending = _flush(items, role, pending)  # keep text/call order as produced
                args = orjson.dumps(part.input).decode()
                items.append(
                    {"type": "function_call", "call_id": part.id, "name": part.name, "arguments": args}
                )
            elif isinstance(part, ir.ToolResultPart):
                pending = _flush(items, role, pending)
                output = _tool_output(part)
                items.append({"type": "function_call_output", "call_id": part.tool_use_id, "output": output})
            # thinking / redacted_thinking: no Responses equivalent without the upstream's encryption.
        _flush(items, role, pending)
    return items


def _flush(items: list[Json], role: str, pending: list[Json]) -> list[Json]:
    if pending:
        items.append({"type": "message", "role": role, "content": pending})
    return []


def _encode_image(part: ir.ImagePart) -> Json:
    url = (
        part.url
        if part.url is not None
        else f"data:{part.media_type or 'image/png'};base64,{part.data or ''}"
    )
    return {"type": "input_image", "image_url": url, "detail": "auto"}


def _encode_document(part: ir.DocumentPart) -> Json:
    if part.text is not None:
        return {"type": "input_text", "text": part.text}
    doc: Json = {"type": "input_file"}
    if part.url is not None:
        doc["file_url"] = part.url
    else:
        doc["file_data"] = f"data:{part.media_type or 'application/pdf'};base64,{part.data or ''}"
    doc["filename"] = part.filename or "document.pdf"
    return doc


def _tool_output(part: ir.ToolResultPart) -> str | list[Json]:
    prefix = "Error: " if part.is_error else ""  # Responses has no is_error flag
    if all(isinstance(p, ir.TextPart) for p in part.content):
        return prefix + "".join(p.text for p in part.content if isinstance(p, ir.TextPart))
    out: list[Json] = [{"type": "input_text", "text": prefix}] if prefix else []
    for p in part.content:
        out.append({"type": "input_text", "text": p.text} if isinstance(p, ir.TextPart) else _encode_image(p))
    return out
