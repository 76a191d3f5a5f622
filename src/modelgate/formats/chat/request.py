"""Chat Completions requests: decoding into the IR and encoding for a Chat-dialect upstream.

Wire shapes follow docs/reference/wire-formats.md §2; cross-format mapping rules follow §4. Fields with no IR
equivalent (``logit_bias``, ``seed``, ``presence_penalty``, …) are ignored, never refused.
"""

from __future__ import annotations

from typing import Any

import orjson

from modelgate import errors, ir
from modelgate.formats.jsonutil import is_int

#: Chat allows at most four stop strings.
MAX_STOP = 4


def _invalid(message: str, param: str) -> errors.InvalidRequest:
    return errors.InvalidRequest(message, param=param)


def content_text(content: Any, param: str) -> str:
    """Text of system/developer/tool/assistant content: a string or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text") or p.get("refusal") or "")
            for p in content
            if isinstance(p, dict) and p.get("type") in ("text", "refusal")
        )
    raise _invalid(f"{param}: expected a string or a list of text parts", param)


def _data_url(url: str) -> tuple[str, str] | None:
    """``data:<media>;base64,<data>`` -> (media, data)."""
    if not url.startswith("data:"):
        return None
    head, sep, data = url[5:].partition(",")
    if not sep or not head.endswith(";base64"):
        return None
    return head[: -len(";base64")] or "application/octet-stream", data


def _user_part(part: Any, param: str) -> ir.Part | None:
    if not isinstance(part, dict):
        raise _invalid(f"{param}: expected an object", param)
    kind = part.get("type")
    if kind == "text":
        if not isinstance(part.get("text"), str):
            raise _invalid(f"{param}.text: expected a string", f"{param}.text")
        return ir.TextPart(part["text"])
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        if not isinstance(url, str):
            raise _invalid(f"{param}.image_url.url: expected a string", f"{param}.image_url.url")
        inline = _data_url(url)
        return ir.ImagePart(media_type=inline[0], data=inline[1]) if inline else ir.ImagePart(url=url)
    if kind == "file":
        file = part.get("file")
        if not isinstance(file, dict) or not isinstance(file.get("file_data"), str):
            return None  # file_id references point into OpenAI's file store; nothing to forward
        filename = file.get("filename") if isinstance(file.get("filename"), str) else None
        inline = _data_url(file["file_data"])
        if inline is None:
            return ir.DocumentPart(media_type="application/pdf", data=file["file_data"], filename=filename)
        return ir.DocumentPart(media_type=inline[0], data=inline[1], filename=filename)
    return None  # input_audio and future part types have no IR equivalent


def _assistant_parts(msg: dict[str, Any], param: str) -> list[ir.Part]:
    parts: list[ir.Part] = []
    text = content_text(msg.get("content"), f"{param}.content")
    if text:
        parts.append(ir.TextPart(text))
    if isinstance(msg.get("refusal"), str) and msg["refusal"]:
        parts.append(ir.TextPart(msg["refusal"]))
    calls = msg.get("tool_calls")
    if calls is None:
        return parts
    if not isinstance(calls, list):
        raise _invalid(f"{param}.tool_calls: expected a list", f"{param}.tool_calls")
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(call, dict) or not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise _invalid(f"{param}.tool_calls.{j}: expected a function call", f"{param}.tool_calls.{j}")
        parts.append(
            ir.ToolUsePart(str(call.get("id") or ""), fn["name"], ir.tool_input(fn.get("arguments")))
        )
    return parts


def _decode_messages(messages: list[Any], req: ir.Request) -> None:
    leading = True
    for i, msg in enumerate(messages):
        param = f"messages.{i}"
        if not isinstance(msg, dict):
            raise _invalid(f"{param}: expected an object", param)
        role = msg.get("role")
        if role in ("system", "developer"):
            text = content_text(msg.get("content"), f"{param}.content")
            if leading:
                req.system.append(text)
            else:
                req.messages.append(ir.Message("system", [ir.TextPart(text)]))
            continue
        leading = False
        if role == "user":
            content = msg.get("content")
            if isinstance(content, str):
                parts: list[ir.Part] = [ir.TextPart(content)]
            elif isinstance(content, list):
                decoded = (_user_part(p, f"{param}.content.{j}") for j, p in enumerate(content))
                parts = [p for p in decoded if p is not None]
            else:
                raise _invalid(f"{param}.content: expected a string or a list of parts", f"{param}.content")
            req.messages.append(ir.Message("user", parts))
        elif role == "assistant":
            req.messages.append(ir.Message("assistant", _assistant_parts(msg, param)))
        elif role == "tool":
            call_id = msg.get("tool_call_id")
            if not isinstance(call_id, str):
                raise _invalid(f"{param}.tool_call_id: expected a string", f"{param}.tool_call_id")
            result = ir.ToolResultPart(
                call_id, [ir.TextPart(content_text(msg.get("content"), f"{param}.content"))]
            )
            last = req.messages[-1] if req.messages else None
            # Consecutive tool messages answer one assistant turn: they share one user turn.
            if (
                last is not None
                and last.role == "user"
                and all(p.type == "tool_result" for p in last.content)
            ):
                last.content.append(result)
            else:
                req.messages.append(ir.Message("user", [result]))
        elif role != "function":  # legacy function results carry no call id; dropped
            raise _invalid(f"{param}.role: unknown role {role!r}", f"{param}.role")


def _decode_tool_choice(value: Any) -> ir.ToolChoice:
    if value in ("none", "auto", "required"):
        return ir.ToolChoice("any" if value == "required" else value)
    if isinstance(value, dict):
        fn = value.get("function")
        if value.get("type") == "function" and isinstance(fn, dict) and isinstance(fn.get("name"), str):
            return ir.ToolChoice("tool", fn["name"])
        if value.get("type") in ("allowed_tools", "custom"):
            return ir.ToolChoice("auto")
    raise _invalid("tool_choice: expected none, auto, required or a named function", "tool_choice")


def _decode_response_format(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        raise _invalid("response_format: expected an object", "response_format")
    kind = value.get("type")
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
            raise _invalid("response_format.json_schema: expected an object", "response_format.json_schema")
        name = spec.get("name") if isinstance(spec.get("name"), str) else "response"
        result = {"type": "json_schema", "name": name, "schema": spec.get("schema", {})}
        if isinstance(spec.get("strict"), bool):
            result["strict"] = spec["strict"]  # kept across translation (strict decoding upstream)
        return result
    return None


def _number(body: dict[str, Any], key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _invalid(f"{key}: expected a number", key)
    return float(value)


def decode_request(body: dict[str, Any]) -> ir.Request:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _invalid("model: required string", "model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _invalid("messages: required non-empty list", "messages")
    n = body.get("n")
    if n is not None and (not is_int(n) or n != 1):
        raise _invalid("n: only 1 choice is supported", "n")
    req = ir.Request(model=model, messages=[])
    _decode_messages(messages, req)
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if value is not None:
            if not is_int(value) or value < 0:
                raise _invalid(f"{key}: expected a non-negative integer", key)
            req.max_tokens = value
            break
    req.stream = body.get("stream") is True
    options = body.get("stream_options")
    req.include_usage = req.stream and isinstance(options, dict) and options.get("include_usage") is True
    stop = body.get("stop")
    if isinstance(stop, str):
        req.stop_sequences = [stop]
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        req.stop_sequences = list(stop)
    elif stop is not None:
        raise _invalid("stop: expected a string or a list of strings", "stop")
    req.temperature = _number(body, "temperature")
    req.top_p = _number(body, "top_p")
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _invalid("tools: expected a list", "tools")
        for i, tool in enumerate(tools):
            fn = tool.get("function") if isinstance(tool, dict) else None
            if not isinstance(tool, dict) or tool.get("type", "function") != "function":
                continue  # custom (free-form) tools have no IR equivalent
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise _invalid(f"tools.{i}.function.name: required string", f"tools.{i}.function.name")
            params = fn.get("parameters")
            description = fn.get("description") if isinstance(fn.get("description"), str) else None
            schema = params if isinstance(params, dict) else {"type": "object", "properties": {}}
            req.tools.append(ir.Tool(fn["name"], description, schema))
    if body.get("tool_choice") is not None:
        req.tool_choice = _decode_tool_choice(body["tool_choice"])
    if body.get("parallel_tool_calls") is False:
        req.tool_choice = req.tool_choice or ir.ToolChoice("auto")
        req.tool_choice.disable_parallel = True
    for key in ("user", "safety_identifier"):
        if isinstance(body.get(key), str):
            req.user = body[key]
            break
    effort = body.get("reasoning_effort")
    if effort is not None and not isinstance(effort, str):
        raise _invalid("reasoning_effort: expected a string", "reasoning_effort")
    req.reasoning_effort = effort
    if body.get("response_format") is not None:
        req.response_format = _decode_response_format(body["response_format"])
    return req


def _image_url(part: ir.ImagePart) -> dict[str, Any]:
    url = (
        part.url
        if part.url is not None
        else f"data:{part.media_type or 'image/png'};base64,{part.data or ''}"
    )
    return {"type": "image_url", "image_url": {"url": url}}


def _user_content(parts: list[ir.Part]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, ir.TextPart):
            out.append({"type": "text", "text": part.text})
        elif isinstance(part, ir.ImagePart):
            out.append(_image_url(part))
        elif isinstance(part, ir.DocumentPart):
            if part.data is not None:
                data_url = f"data:{part.media_type or 'application/pdf'};base64,{part.data}"
                out.append(
                    {
                        "type": "file",
                        "file": {"file_data": data_url, "filename": part.filename or "document.pdf"},
                    }
                )
            elif part.text is not None:
                out.append({"type": "text", "text": part.text})
            elif part.url is not None:
                out.append({"type": "text", "text": part.url})
    return out


def _encode_user(msg: ir.Message, out: list[dict[str, Any]]) -> None:
    """Tool results first, one ``tool`` message each; the rest of the turn after them.

    Images inside tool results cannot go in a ``tool`` message, so they follow in the user message.
    """
    rest: list[ir.Part] = []
    for part in msg.content:
        if isinstance(part, ir.ToolResultPart):
            text = "\n".join(p.text for p in part.content if isinstance(p, ir.TextPart))
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": part.tool_use_id,
                    "content": f"Error: {text}" if part.is_error else text,
                }
            )
            rest.extend(p for p in part.content if isinstance(p, ir.ImagePart))
        else:
            rest.append(part)
    content = _user_content(rest)
    if not content:
        return
    if all(c["type"] == "text" for c in content):
        out.append({"role": "user", "content": "".join(c["text"] for c in content)})
    else:
        out.append({"role": "user", "content": content})


def _encode_messages(req: ir.Request) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if req.system:
        out.append({"role": "system", "content": "\n\n".join(req.system)})
    for msg in req.messages:
        if msg.role == "user":
            _encode_user(msg, out)
        elif msg.role == "system":
            out.append(
                {
                    "role": "system",
                    "content": "".join(p.text for p in msg.content if isinstance(p, ir.TextPart)),
                }
            )
        else:
            text = "".join(p.text for p in msg.content if isinstance(p, ir.TextPart))
            calls = [
                {
                    "id": p.id,
                    "type": "function",
                    "function": {"name": p.name, "arguments": orjson.dumps(p.input).decode()},
                }
                for p in msg.content
                if isinstance(p, ir.ToolUsePart)
            ]
            if not text and not calls:
                continue  # thinking-only turns: Chat upstreams cannot take the reasoning back
            turn: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                turn["tool_calls"] = calls
            out.append(turn)
    return out


def encode_request(req: ir.Request, upstream_model: str) -> dict[str, Any]:
    """IR -> a Chat request for an OpenAI-dialect upstream (translation path).

    Streams always ask for usage (``stream_options.include_usage``): billing needs it even when
    the client did not ask; the usage chunk is then left out of what the client sees.
    """
    body: dict[str, Any] = {"model": upstream_model, "messages": _encode_messages(req)}
    if req.max_tokens is not None:
        body["max_completion_tokens"] = req.max_tokens
    if req.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if req.stop_sequences:
        body["stop"] = req.stop_sequences[:MAX_STOP]
    if req.temperature is not None:
        body["temperature"] = req.temperature
    if req.top_p is not None:
        body["top_p"] = req.top_p
    if req.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    **({"description": t.description} if t.description else {}),
                    "parameters": t.input_schema,
                },
            }
            for t in req.tools
        ]
    choice = req.tool_choice
    # Both APIs refuse tool_choice (and parallel_tool_calls) without tools.
    if choice is not None and req.tools:
        if choice.type == "tool":
            body["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
        else:
            body["tool_choice"] = "required" if choice.type == "any" else choice.type
        if choice.disable_parallel:
            body["parallel_tool_calls"] = False
    if req.user is not None:
        body["user"] = req.user
    if req.reasoning_effort is not None:
        body["reasoning_effort"] = req.reasoning_effort
    fmt = req.response_format
    if fmt is not None:
        if fmt.get("type") == "json_schema":
            schema = {"name": fmt.get("name") or "response", "schema": fmt.get("schema", {})}
            if isinstance(fmt.get("strict"), bool):
                schema["strict"] = fmt["strict"]
            body["response_format"] = {"type": "json_schema", "json_schema": schema}
        elif fmt.get("type") == "json_object":
            body["response_format"] = {"type": "json_object"}
    return body
