"""What the two clouds serving Anthropic models (``bedrock``, ``vertex``) share: the request body
without ``model`` and with the cloud's ``anthropic_version``, replies named after the deployment,
and errors whose every credential-shaped refusal concerns the gateway's own identity.

A Messages body for a cloud keeps every field the client sent (unknown ones, thinking
signatures, ``cache_control``) but loses ``model`` (the URL names it) and gains
``anthropic_version``; the JSON is re-serialised once, its values unchanged.

The clouds answer with their own name for the model (``claude-sonnet-4-5-20250929`` for
``anthropic.claude-sonnet-4-5-20250929-v1:0``). The first ``"model"`` of a reply (the top-level
one in a whole message, the one in ``message_start`` in a stream) is renamed to the deployment's
upstream model id, which the relay then shows as the client's model, as for the ``anthropic`` kind.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson

from modelgate import errors
from modelgate.upstream.base import UpstreamReply
from modelgate.upstream.betas import BetaPlan, body_betas, plan_for, split_betas, strip_fields
from modelgate.upstream.kinds.bedrock import BedrockConfig
from modelgate.upstream.kinds.vertex import VertexConfig

_MODEL = re.compile(rb'"model"\s*:\s*"(?:[^"\\]|\\.)*"')


def cloud_body(body: bytes, *, version: str, keep: tuple[str, ...] = ()) -> tuple[str, dict[str, Any]]:
    """The model id the gateway put in ``body`` and the body for the cloud (``model`` removed
    unless kept, ``anthropic_version`` set)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise errors.InvalidRequest("the request body is not valid JSON") from None
    if not isinstance(data, dict) or not isinstance(data.get("model"), str):
        raise ValueError("a cloud provider needs the upstream model id in the body")  # gateway bug
    model: str = data["model"] if "model" in keep else data.pop("model")
    data["anthropic_version"] = version
    return model, data


def cloud_betas(
    kind: str,
    config: BedrockConfig | VertexConfig,
    data: dict[str, Any],
    client_headers: Mapping[str, str],
    *,
    counting: bool,
) -> BetaPlan:
    """The betas to send the cloud, from the client's header and body, with the body fields of
    the stripped ones removed from ``data``; raises ``InvalidRequest`` for a refused beta."""
    betas = split_betas(client_headers.get("anthropic-beta")) + body_betas(data)
    plan = plan_for(kind, config.anthropic_beta, config.betas.actions(), betas, counting=counting)
    strip_fields(data, plan.strip_fields)
    return plan


def rename_model(data: bytes, model: str) -> bytes:
    """``data`` with its first ``"model": "..."`` naming ``model`` instead."""
    match = _MODEL.search(data)
    if match is None:
        return data
    return data[: match.start()] + b'"model":' + orjson.dumps(model) + data[match.end() :]


class WholeRenamed:
    """A whole reply whose body names the deployment's model (``read``); streams untouched."""

    __slots__ = ("_model", "_reply", "headers", "status")

    def __init__(self, reply: UpstreamReply, model: str) -> None:
        self._reply = reply
        self._model = model
        self.status = reply.status
        self.headers: Mapping[str, str] = reply.headers

    async def read(self) -> bytes:
        return rename_model(await self._reply.read(), self._model)

    def iter_chunks(self) -> AsyncIterator[bytes]:
        return self._reply.iter_chunks()

    async def close(self) -> None:
        await self._reply.close()


class StreamRenamed:
    """An SSE reply whose first event (``message_start``) names the deployment's model; the
    bytes after it are relayed untouched."""

    __slots__ = ("_model", "_reply", "headers", "status")

    def __init__(self, reply: UpstreamReply, model: str) -> None:
        self._reply = reply
        self._model = model
        self.status = reply.status
        self.headers: Mapping[str, str] = reply.headers

    async def read(self) -> bytes:
        return await self._reply.read()

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        held = b""
        chunks = self._reply.iter_chunks()
        async for chunk in chunks:
            held += chunk
            end = held.find(b"\n\n")
            if end < 0 and b"\r\n\r\n" not in held:
                continue
            end = len(held) if end < 0 else end
            yield rename_model(held[:end], self._model) + held[end:]
            break
        else:
            if held:
                yield held
            return
        async for chunk in chunks:
            yield chunk

    async def close(self) -> None:
        await self._reply.close()
