"""A client with its base URL one ``/v1`` off gets a 404 that says which base URL it takes."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.gateway_server import GatewayServer


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("/v1/v1/messages", "the base URL ends in /v1 and the client adds /v1 itself"),
        ("/v1/v1/chat/completions", "the base URL ends in /v1 and the client adds /v1 itself"),
        ("/chat/completions", "the endpoints are under /v1 (http://{host}/v1/chat/completions)"),
        ("/responses", "the endpoints are under /v1 (http://{host}/v1/responses)"),
        ("/messages", "the endpoints are under /v1 (http://{host}/v1/messages)"),
        ("/api/models", "the endpoints are under /v1 (http://{host}/v1/models)"),
    ],
)
def test_a_base_url_one_v1_off_is_told_which_it_needs(gateway: GatewayServer, path: str, says: str) -> None:
    host = gateway.base_url.removeprefix("http://")
    reply = httpx.post(f"{gateway.base_url}{path}", json={})
    assert reply.status_code == 404
    message = reply.json()["error"]["message"]
    assert message.startswith(f"no endpoint POST {path}: {says.format(host=host)}")
    assert (
        f"take the base URL http://{host}; OpenAI SDKs, Codex and AI SDK providers take http://{host}/v1"
        in (message)
    )


def test_other_unknown_paths_keep_the_plain_message(gateway: GatewayServer) -> None:
    reply = httpx.get(f"{gateway.base_url}/v1/nothing-here")
    assert reply.status_code == 404 and reply.json()["error"]["message"] == "no endpoint GET /v1/nothing-here"


def test_the_sdks_see_the_hint_in_their_own_error(gateway: GatewayServer) -> None:
    key = gateway.key(gateway.account("wrong-base"), "Pro")
    with (
        anthropic.Anthropic(base_url=f"{gateway.base_url}/v1", api_key=key.secret, max_retries=0) as claude,
        pytest.raises(anthropic.NotFoundError, match="adds /v1 itself"),
    ):
        claude.messages.create(
            model="aria-haiku-4.5", max_tokens=8, messages=[{"role": "user", "content": "Hi"}]
        )
    with (
        openai.OpenAI(base_url=gateway.base_url, api_key=key.secret, max_retries=0) as oai,
        pytest.raises(openai.NotFoundError, match="endpoints are under /v1"),
    ):
        oai.chat.completions.create(model="aria-haiku-4.5", messages=[{"role": "user", "content": "Hi"}])
