"""Gemini ``generateContent`` / ``countTokens`` request bodies -> the IR request.

The model and the stream flag are not in a Gemini body: they come from the path
(``models/{model}:generateContent`` or ``:streamGenerateContent``), so the caller passes them.

Refused, with a message saying why: ``cachedContent`` (Google-side caches), ``candidateCount``
other than 1, response modalities other than text, ``text/x.enum`` and other non-JSON response
types, audio/video media and files only Google can read (``parts``). Accepted and ignored,
because no upstream dialect has them: ``safetySettings`` (the upstream's own safety applies),
``presencePenalty``, ``frequencyPenalty``, ``seed``, ``responseLogprobs``/``logprobs``,
``mediaResolution``, ``labels``, ``serviceTier``; unknown fields likewise.
"""

from __future__ import annotations

from typing import Any

from modelgate import ir
from modelgate.formats.gemini import parts, schema
from modelgate.formats.gemini.wire import (
    bool_field,
    float_field,
    get,
    int_field,
    invalid,
    list_field,
    obj_field,
    str_field,
)
from modelgate.formats.jsonutil import Json

#: Gemini's own limit on stop sequences.
MAX_STOP = 5
#: ``thinkingLevel`` -> IR reasoning effort.
_LEVELS = {"MINIMAL": "minimal", "LOW": "low", "MEDIUM": "medium", "HIGH": "high", "XHIGH": "high"}
_MODES = {"AUTO": "auto", "VALIDATED": "auto", "MODE_UNSPECIFIED": "auto", "ANY": "any", "NONE": "none"}
_JSON_TYPES = ("application/json",)
_TEXT_TYPES = ("text/plain", "")


def _declaration(decl: Any, param: str) -> ir.Tool:
    if not isinstance(decl, dict):
        raise invalid(f"{param}: expected an object", param)
    name = str_field(decl, "name", f"{param}.name")
    if not name:
        raise invalid(f"{param}.name: required string", f"{param}.name")
    params = get(decl, "parameters", param)
    json_schema = get(decl, "parametersJsonSchema", param)
    if params is not None and json_schema is not None:
        raise invalid(f"{param}: give parameters or parametersJsonSchema, not both", param)
    tool = ir.Tool(name, str_field(decl, "description", f"{param}.description"))
    if params is not None:
        tool.input_schema = schema.to_json_schema(params, f"{param}.parameters")
    elif json_schema is not None:
        if not isinstance(json_schema, dict):
            raise invalid(
                f"{param}.parametersJsonSchema: expected an object", f"{param}.parametersJsonSchema"
            )
        tool.input_schema = json_schema
    return tool


def _tools(tools: list[Any], req: ir.Request) -> None:
    """Function declarations become IR tools; ``googleSearch`` the IR's hosted web search; other
    Google-hosted tools (``codeExecution``, ``urlContext``, …) are listed in ``hosted_tools``,
    dropped or refused by the translation like other formats' hosted tools."""
    for i, tool in enumerate(tools):
        where = f"tools.{i}"
        if not isinstance(tool, dict):
            raise invalid(f"{where}: expected an object", where)
        for key, value in tool.items():
            name = _camel(key)
            if value is None:
                continue
            if name == "functionDeclarations":
                if not isinstance(value, list):
                    raise invalid(f"{where}.{key}: expected a list", f"{where}.{key}")
                req.tools.extend(_declaration(d, f"{where}.{key}.{j}") for j, d in enumerate(value))
            elif name == "googleSearch":
                req.web_search = _web_search(value, f"{where}.{key}")
            elif name not in req.hosted_tools:
                req.hosted_tools.append(name)


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(word.capitalize() for word in rest)


def _web_search(value: Any, param: str) -> ir.WebSearchTool:
    if not isinstance(value, dict):
        raise invalid(f"{param}: expected an object", param)
    blocked = list_field(value, "excludeDomains", f"{param}.excludeDomains")
    if blocked is not None and not all(isinstance(d, str) for d in blocked):
        raise invalid(f"{param}.excludeDomains: expected a list of strings", f"{param}.excludeDomains")
    return ir.WebSearchTool(client_type="googleSearch", blocked_domains=blocked or None)


def _tool_choice(config: Json, req: ir.Request) -> ir.ToolChoice | None:
    calling = obj_field(config, "functionCallingConfig", "toolConfig.functionCallingConfig")
    if calling is None:
        return None
    param = "toolConfig.functionCallingConfig"
    mode = str_field(calling, "mode", f"{param}.mode") or "AUTO"
    if mode not in _MODES:
        raise invalid(f"{param}.mode: expected AUTO, ANY, NONE or VALIDATED, got {mode!r}", f"{param}.mode")
    allowed = list_field(calling, "allowedFunctionNames", f"{param}.allowedFunctionNames")
    choice = ir.ToolChoice("auto" if _MODES[mode] == "auto" else "any" if mode == "ANY" else "none")
    if not allowed:
        return choice
    where = f"{param}.allowedFunctionNames"
    if mode not in ("ANY", "VALIDATED"):
        raise invalid(f"{where}: only allowed with mode ANY or VALIDATED", where)
    declared = {t.name for t in req.tools}
    for name in allowed:
        if not isinstance(name, str) or name not in declared:
            raise invalid(f"{where}: {name!r} is not a declared function", where)
    # The IR has no "one of these": the other functions are left out of the request instead.
    req.tools = [t for t in req.tools if t.name in allowed]
    if mode == "ANY" and len(req.tools) == 1:
        return ir.ToolChoice("tool", req.tools[0].name)
    return choice


def _effort(config: Json, param: str) -> str | None:
    """``thinkingConfig`` -> IR reasoning effort (``includeThoughts`` only shapes the answer: see
    ``shows_thoughts``). A budget buckets
    like the Messages one (docs/reference/wire-formats.md §4.1); 0 turns thinking off (the least effort every dialect
    knows); -1 (dynamic) and no budget leave the upstream's default."""
    thinking = obj_field(config, "thinkingConfig", f"{param}.thinkingConfig")
    if thinking is None:
        return None
    where = f"{param}.thinkingConfig"
    bool_field(thinking, "includeThoughts", f"{where}.includeThoughts")
    level = str_field(thinking, "thinkingLevel", f"{where}.thinkingLevel")
    budget = int_field(thinking, "thinkingBudget", f"{where}.thinkingBudget", minimum=-1)
    if level is not None and budget is not None:
        raise invalid(f"{where}: give thinkingLevel or thinkingBudget, not both", where)
    if level is not None:
        if level.upper() == "THINKING_LEVEL_UNSPECIFIED":
            return None
        if level.upper() not in _LEVELS:
            raise invalid(
                f"{where}.thinkingLevel: expected MINIMAL, LOW, MEDIUM or HIGH", f"{where}.thinkingLevel"
            )
        return _LEVELS[level.upper()]
    if budget is None or budget < 0:
        return None
    if budget == 0:
        return "minimal"
    return "low" if budget < 4096 else "medium" if budget < 16384 else "high"


def _response_format(config: Json, param: str) -> Json | None:
    mime = (str_field(config, "responseMimeType", f"{param}.responseMimeType") or "").lower()
    openapi = get(config, "responseSchema", param)
    json_schema = get(config, "responseJsonSchema", param)
    if openapi is not None and json_schema is not None:
        raise invalid(f"{param}: give responseSchema or responseJsonSchema, not both", param)
    if mime in _TEXT_TYPES:
        if openapi is not None or json_schema is not None:
            raise invalid(f"{param}.responseMimeType: a response schema needs application/json", param)
        return None
    if mime not in _JSON_TYPES:
        raise invalid(
            f"{param}.responseMimeType: {mime} is not supported (text/plain or application/json)",
            f"{param}.responseMimeType",
        )
    if json_schema is not None:
        if not isinstance(json_schema, dict):
            raise invalid(f"{param}.responseJsonSchema: expected an object", f"{param}.responseJsonSchema")
        return {"type": "json_schema", "name": "response", "schema": json_schema}
    if openapi is not None:
        converted = schema.to_json_schema(openapi, f"{param}.responseSchema")
        return {"type": "json_schema", "name": "response", "schema": converted}
    return {"type": "json_object"}


def _generation(config: Json, req: ir.Request) -> None:
    """``generationConfig`` into ``req``."""
    param = "generationConfig"
    count = int_field(config, "candidateCount", f"{param}.candidateCount")
    if count is not None and count != 1:
        raise invalid(f"{param}.candidateCount: only 1 candidate is supported", f"{param}.candidateCount")
    req.max_tokens = int_field(config, "maxOutputTokens", f"{param}.maxOutputTokens", minimum=1)
    req.temperature = float_field(config, "temperature", f"{param}.temperature", low=0.0, high=2.0)
    req.top_p = float_field(config, "topP", f"{param}.topP", low=0.0, high=1.0)
    req.top_k = int_field(config, "topK", f"{param}.topK", minimum=1)
    stops = list_field(config, "stopSequences", f"{param}.stopSequences")
    if stops is not None:
        if len(stops) > MAX_STOP or not all(isinstance(s, str) for s in stops):
            where = f"{param}.stopSequences"
            raise invalid(f"{where}: expected at most {MAX_STOP} strings", where)
        req.stop_sequences = list(stops)
    modalities = list_field(config, "responseModalities", f"{param}.responseModalities")
    if modalities is not None and any(m not in ("TEXT", "text") for m in modalities):
        where = f"{param}.responseModalities"
        raise invalid(f"{where}: only TEXT output is supported by this gateway", where)
    req.response_format = _response_format(config, param)
    req.reasoning_effort = _effort(config, param)


def refuse_cached_content(body: Json) -> None:
    if get(body, "cachedContent") is not None:
        raise invalid(
            "cachedContent: Gemini context caches are not supported by this gateway; send the "
            "content in the request (the upstream's own prompt caching applies)",
            "cachedContent",
        )


def decode_request(body: Json, *, model: str = "", stream: bool = False) -> ir.Request:
    """A ``generateContent`` body -> IR; ``model`` and ``stream`` from the path."""
    refuse_cached_content(body)
    contents = list_field(body, "contents", "contents")
    if not contents:
        raise invalid("contents: required non-empty list", "contents")
    req = ir.Request(model=model, messages=parts.decode_contents(contents), stream=stream)
    system = get(body, "systemInstruction")
    if system is not None:
        req.system = parts.system_texts(system)
    tools = list_field(body, "tools", "tools")
    if tools:
        _tools(tools, req)
    tool_config = obj_field(body, "toolConfig", "toolConfig")
    if tool_config is not None:
        req.tool_choice = _tool_choice(tool_config, req)
    config = obj_field(body, "generationConfig", "generationConfig")
    if config is not None:
        _generation(config, req)
    return req


def decode_count_request(body: Json, *, model: str = "") -> ir.Request:
    """A ``countTokens`` body: ``contents`` alone, or a whole ``generateContentRequest``."""
    inner = obj_field(body, "generateContentRequest", "generateContentRequest")
    if inner is None:
        return decode_request(body, model=model)
    if get(body, "contents") is not None:
        raise invalid("countTokens: give contents or generateContentRequest, not both", "contents")
    return decode_request(inner, model=model)


def shows_thoughts(body: Json) -> bool:
    """``generationConfig.thinkingConfig.includeThoughts``: without it Gemini answers carry no
    thought parts (a cheap look, for the encoders; ``decode_request`` validated the body)."""
    config = body.get("generationConfig", body.get("generation_config"))
    thinking = (
        config.get("thinkingConfig", config.get("thinking_config")) if isinstance(config, dict) else None
    )
    if not isinstance(thinking, dict):
        return False
    return thinking.get("includeThoughts", thinking.get("include_thoughts")) is True
