"""HTTP providers against the fake upstream: headers, paths, byte-exact bodies, timeouts, aborts."""

from __future__ import annotations

import asyncio

import pytest

from modelgate.upstream.anthropic import AnthropicProvider
from modelgate.upstream.base import (
    ConnectFailed,
    Dialect,
    FirstByteTimeout,
    IdleTimeout,
    Provider,
    StreamBroken,
)
from modelgate.upstream.config import TimeoutConfig, parse_provider
from modelgate.upstream.openai import OpenAICompatibleProvider, OpenAIProvider
from modelgate.upstream.providers import build_provider
from tests.fakes import FakeUpstream, Fault, Reply, refused_base_url

KEY = "sk-ant-upstream-secret-0123456789abcdef"
FAST = TimeoutConfig(connect=0.5, first_byte=0.3, idle=0.3, total=5.0)
CLIENT = {
    "authorization": "Bearer sk-cs4-clientkeyclientkeyclientkey12",
    "x-api-key": "sk-cs4-clientkeyclientkeyclientkey12",
    "anthropic-version": "2026-10-21",
    "anthropic-beta": "context-1m-2025-08-07,interleaved-thinking-2025-05-14",
    "x-stainless-lang": "python",
}
BODY = b'{"model":"claude-x","max_tokens":5,"messages":[{"role":"user","content":"hi \\u00e9"}],"zz":1}'


def anthropic(base_url: str, **kw: object) -> AnthropicProvider:
    fields = {"name": "anth", "kind": "anthropic", "base_url": base_url, "api_key_env": "K"}
    cfg = parse_provider({**fields, "timeouts": FAST, **kw})
    return AnthropicProvider(cfg, KEY)


async def test_anthropic_headers_path_and_byte_exact_body() -> None:
    async with FakeUpstream() as fake:
        provider = anthropic(fake.base_url, headers={"x-extra": "1"})
        try:
            reply = await provider.send("messages", BODY, stream=False, client_headers=CLIENT)
            assert reply.status == 200
            assert reply.headers["content-type"].startswith("application/json")
            assert b'"type":"message"' in await reply.read()
            await reply.close()
            count = await provider.send(
                "messages", BODY, stream=False, client_headers={}, path_suffix="/count_tokens"
            )
            assert await count.read() == b'{"input_tokens":12}'
            await count.close()
        finally:
            await provider.aclose()
    first, second = fake.requests
    assert (first.method, first.path, first.body) == ("POST", "/v1/messages", BODY)
    assert first.headers["x-api-key"] == KEY
    assert "authorization" not in first.headers
    assert first.headers["anthropic-version"] == "2026-10-21"
    assert first.headers["anthropic-beta"] == CLIENT["anthropic-beta"]
    assert first.headers["x-extra"] == "1"
    assert "x-stainless-lang" not in first.headers
    assert second.path == "/v1/messages/count_tokens"
    assert second.headers["anthropic-version"] == "2023-06-01"
    assert "anthropic-beta" not in second.headers


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("drop", None), (["interleaved-thinking-2025-05-14", "other"], "interleaved-thinking-2025-05-14")],
)
async def test_anthropic_beta_policy(policy: object, expected: str | None) -> None:
    async with FakeUpstream() as fake:
        provider = anthropic(fake.base_url + "/v1/", anthropic_beta=policy)
        try:
            reply = await provider.send("messages", BODY, stream=False, client_headers=CLIENT)
            await reply.close()
        finally:
            await provider.aclose()
    assert fake.requests[0].path == "/v1/messages"  # trailing /v1/ in base_url tolerated
    assert fake.requests[0].headers.get("anthropic-beta") == expected


async def test_openai_and_compatible_providers() -> None:
    async with FakeUpstream() as fake:
        cfg = parse_provider(dict(name="oa", kind="openai", base_url=fake.base_url, api_key_env="K"))
        openai = build_provider(cfg, {"K": "sk-proj-upstreamsecret0123456789"})
        assert isinstance(openai, OpenAIProvider)
        local = build_provider(
            parse_provider(dict(name="vllm", kind="openai-compatible", base_url=fake.base_url)), {}
        )
        assert isinstance(local, OpenAICompatibleProvider)
        assert local.dialects == frozenset({"chat"})
        try:
            routes: list[tuple[Provider, Dialect]] = [
                (openai, "chat"),
                (openai, "responses"),
                (local, "chat"),
            ]
            for provider, dialect in routes:
                body = b'{"model":"g","input":"hi","messages":[],"stream":true}'
                reply = await provider.send(dialect, body, stream=True, client_headers=CLIENT)
                chunks = [c async for c in reply.iter_chunks()]
                await reply.close()
                assert b"".join(chunks).endswith(b"[DONE]\n\n" if dialect == "chat" else b"}\n\n")
            with pytest.raises(ValueError, match="responses"):
                await local.send("responses", b"{}", stream=False, client_headers={})
        finally:
            await openai.aclose()
            await local.aclose()
    chat, responses, compat = fake.requests
    assert chat.path == "/v1/chat/completions" and responses.path == "/v1/responses"
    assert chat.headers["authorization"] == "Bearer sk-proj-upstreamsecret0123456789"
    assert "x-api-key" not in chat.headers and "anthropic-version" not in chat.headers
    assert chat.headers["accept"] == "text/event-stream"
    assert "authorization" not in compat.headers and "x-api-key" not in compat.headers


async def test_connect_refused_raises_connect_failed() -> None:
    provider = anthropic(refused_base_url())
    try:
        with pytest.raises(ConnectFailed) as info:
            await provider.send("messages", BODY, stream=False, client_headers={})
        assert "127.0.0.1" not in info.value.message
    finally:
        await provider.aclose()


async def test_first_byte_timeout() -> None:
    async with FakeUpstream(default=Fault.hang()) as fake:
        provider = anthropic(fake.base_url)
        try:
            with pytest.raises(FirstByteTimeout) as info:
                await provider.send("messages", BODY, stream=False, client_headers={})
        finally:
            await provider.aclose()
        # The request reached the upstream, which was still holding its headers back (for an
        # hour): the provider gave up on the first byte, not on connecting.
        assert fake.count == 1 and not fake.requests[0].finished
        assert "no response within 0.3s" in info.value.message


async def test_idle_timeout_mid_stream() -> None:
    async with FakeUpstream(default=Fault.stall_after(2)) as fake:
        provider = anthropic(fake.base_url)
        try:
            reply = await provider.send("messages", b'{"stream":true}', stream=True, client_headers={})
            got = b""
            with pytest.raises(IdleTimeout):
                async for chunk in reply.iter_chunks():
                    got += chunk
            assert got.count(b"event: ") == 2
            await reply.close()
        finally:
            await provider.aclose()


async def test_reset_mid_stream_raises_stream_broken() -> None:
    async with FakeUpstream(default=Fault.reset_after(3)) as fake:
        provider = anthropic(fake.base_url)
        try:
            reply = await provider.send("messages", b'{"stream":true}', stream=True, client_headers={})
            with pytest.raises(StreamBroken):
                async for _ in reply.iter_chunks():
                    pass
            await reply.close()
            await reply.close()  # idempotent
        finally:
            await provider.aclose()


async def test_close_mid_stream_aborts_the_upstream_request() -> None:
    slow = Reply(text="x" * 200, chunks=100, event_delay=0.05)
    async with FakeUpstream(default=slow) as fake:
        provider = anthropic(fake.base_url)
        try:
            reply = await provider.send("messages", b'{"stream":true}', stream=True, client_headers={})
            chunks = reply.iter_chunks()
            await chunks.__anext__()
            await reply.close()
            # The upstream saw the connection go away before its 5-second reply could finish.
            ended = await fake.wait_ended(0)
            assert ended.disconnected_at is not None and not ended.finished
        finally:
            await provider.aclose()


async def test_max_concurrency_caps_requests_in_flight() -> None:
    in_flight = peak = 0

    async with FakeUpstream(default=Reply(text="abcdef", chunks=3, event_delay=0.05)) as fake:
        # Waiting for a pooled connection counts against the connect timeout: give it room.
        timeouts = TimeoutConfig(connect=5.0, first_byte=0.3, idle=0.3, total=5.0)
        provider = anthropic(fake.base_url, max_concurrency=2, timeouts=timeouts)

        async def one() -> None:
            nonlocal in_flight, peak
            reply = await provider.send("messages", b'{"stream":true}', stream=True, client_headers={})
            in_flight += 1
            peak = max(peak, in_flight)
            async for _ in reply.iter_chunks():
                pass
            in_flight -= 1
            await reply.close()

        try:
            await asyncio.gather(*(one() for _ in range(6)))
        finally:
            await provider.aclose()
    assert peak == 2
    assert fake.count == 6
