"""``anthropic-beta`` per upstream kind: a Claude-Code-shaped request reaches Bedrock and Vertex
with exactly the betas (and body fields) they take, a refused beta is a 400 in the Messages
format that costs nothing, the ``anthropic`` kind gets the header byte for byte, and a
provider's ``betas`` overrides the table. The fakes refuse betas outside what they accept with
``invalid beta flag``, as the clouds do."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest

from modelgate.upstream.betas import TABLE
from tests.cloud.harness import (
    BEDROCK_MODEL,
    ENV,
    VERTEX_MODEL,
    Clouds,
    bedrock_provider,
    start_clouds,
    vertex_provider,
)
from tests.conformance.conftest import issue_key, usage_records
from tests.fakes.upstream import FakeUpstream, RecordedRequest
from tests.gateway_server import GatewayServer, running_gateway
from tests.loop_thread import LoopThread

#: Claude Code 2.1.332's betas (reference wire-formats.md §7) and one nobody knows yet.
CLAUDE_CODE_BETAS = [
    "claude-code-20250219",
    "interleaved-thinking-2025-05-14",
    "context-management-2025-06-27",
    "mid-conversation-tool-changes-2026-07-01",
    "thinking-token-count-2026-05-13",
    "advanced-tool-use-2025-11-20",
    "effort-2025-11-24",
    "per-turn-control-2026-07-01",
    "some-future-beta-2027-01-01",
]
TOOLS: list[dict[str, Any]] = [
    {"name": "Bash", "description": "Run a command", "input_schema": {"type": "object"}},
    {"name": "WebFetch", "input_schema": {"type": "object"}, "defer_loading": True},
]
BODY: dict[str, Any] = {
    "max_tokens": 128000,
    "thinking": {"type": "adaptive", "display": "omitted"},
    "output_config": {"effort": "high"},
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "tools": TOOLS,
    "messages": [{"role": "user", "content": "hello there"}],
}
#: model -> provider
MODELS = {
    "aria-haiku-4.5": "bedrock",
    "aria-opus-4.8": "vertex",
    "aria-sonnet-4.6": "anthropic",
    "aria-opus-4.7": "bedrock-custom",
    "aria-opus-4.6": "anthropic-custom",
}


@dataclass
class Setup:
    gateway: GatewayServer
    clouds: Clouds
    anthropic: FakeUpstream


def accepted(kind: str) -> frozenset[str]:
    return frozenset(rule.send_as or beta for beta, rule in TABLE[kind].items() if rule.action == "pass")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    directory = tmp_path_factory.mktemp("betas")
    with LoopThread("fake-upstreams") as fakes:
        clouds = start_clouds(fakes, directory)
        anthropic = fakes.start(FakeUpstream(dialect="messages"))
        anthropic_kind = {
            "kind": "anthropic",
            "base_url": anthropic.base_url,
            "api_key_env": "FAKE_ANTHROPIC_KEY",
        }
        custom = {
            "pass": ["per-turn-control-2026-07-01", "some-future-beta-2027-01-01"],
            "strip": ["files-api-2025-04-14"],
            "refuse": ["effort-2025-11-24"],
        }
        providers = [
            {"name": "simulator", "kind": "simulator"},
            bedrock_provider("bedrock", clouds.bedrock),
            bedrock_provider("bedrock-custom", clouds.bedrock, betas=custom),
            vertex_provider("vertex", clouds.vertex, clouds.credential_files),
            {"name": "anthropic", **anthropic_kind},
            {
                "name": "anthropic-custom",
                **anthropic_kind,
                "betas": {"strip": ["context-management-2025-06-27"]},
            },
        ]
        upstream = {"bedrock": BEDROCK_MODEL, "vertex": VERTEX_MODEL}
        deployments = {
            model: [{"provider": name, "upstream_model": upstream.get(name.split("-")[0], "claude-x")}]
            for model, name in MODELS.items()
        }
        with running_gateway(
            directory / "data",
            env={**ENV, "FAKE_ANTHROPIC_KEY": "sk-ant-fake-0123456789abcdefghij"},
            providers=providers,
            deployments=deployments,
            routing={"max_attempts": 1},
        ) as gateway:
            yield Setup(gateway, clouds, anthropic)


@pytest.fixture
def fresh(setup: Setup) -> Setup:
    setup.clouds.reset()
    setup.anthropic.requests.clear()
    setup.clouds.bedrock.accepted_betas = accepted("bedrock")
    setup.clouds.vertex.accepted_betas = accepted("vertex")
    return setup


def send(
    setup: Setup, model: str, betas: str, *, count: bool = False, stream: bool = False, **extra: Any
) -> tuple[httpx.Response, str]:
    secret, key_id = issue_key(setup.gateway, "Pro")
    path = "/v1/messages/count_tokens" if count else "/v1/messages"
    body = {**BODY, "model": model, **extra}
    if count:
        body.pop("max_tokens")
    elif stream:
        body["stream"] = True
    headers = {"x-api-key": secret, "anthropic-version": "2023-06-01", "anthropic-beta": betas}
    response = httpx.post(f"{setup.gateway.base_url}{path}?beta=true", json=body, headers=headers, timeout=30)
    return response, key_id


def only(requests: list[Any]) -> RecordedRequest:
    (request,) = requests
    assert isinstance(request, RecordedRequest)
    return request


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_bedrock_receives_exactly_the_betas_it_takes_in_the_body(fresh: Setup, stream: bool) -> None:
    response, _ = send(fresh, "aria-haiku-4.5", ",".join(CLAUDE_CODE_BETAS), stream=stream)
    assert response.status_code == 200, response.text
    sent = only(fresh.clouds.bedrock.requests)
    body = sent.json()
    assert body["anthropic_beta"] == [
        "interleaved-thinking-2025-05-14",
        "context-management-2025-06-27",
        "mid-conversation-tool-changes-2026-07-01",
        "tool-search-tool-2025-10-19",  # advanced-tool-use under Bedrock's name
        "effort-2025-11-24",
    ]
    assert "anthropic-beta" not in sent.headers
    # Every field the passed betas allow is still there.
    assert body["context_management"] == BODY["context_management"]
    assert body["output_config"] == {"effort": "high"} and body["tools"] == TOOLS


def test_vertex_receives_exactly_the_betas_it_takes_in_the_header(fresh: Setup) -> None:
    response, _ = send(fresh, "aria-opus-4.8", ",".join(CLAUDE_CODE_BETAS))
    assert response.status_code == 200, response.text
    sent = only(fresh.clouds.vertex.requests)
    assert sent.headers["anthropic-beta"] == (
        "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,"
        "tool-search-tool-2025-10-19,per-turn-control-2026-07-01"
    )
    body = sent.json()
    assert "anthropic_beta" not in body
    # Vertex refuses the effort beta's name, but output_config.effort is generally available.
    assert (
        body["output_config"] == {"effort": "high"}
        and body["context_management"] == BODY["context_management"]
    )
    assert body["tools"] == TOOLS and body["thinking"] == BODY["thinking"]


def test_vertex_token_counting_gets_only_the_betas_its_counter_takes(fresh: Setup) -> None:
    response, _ = send(fresh, "aria-opus-4.8", ",".join(CLAUDE_CODE_BETAS), count=True)
    assert response.status_code == 200, response.text
    sent = only(fresh.clouds.vertex.requests)
    assert sent.headers["anthropic-beta"] == (
        "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27"
    )
    body = sent.json()
    assert body["tools"] == [TOOLS[0], {k: v for k, v in TOOLS[1].items() if k != "defer_loading"}]


def test_bedrock_token_counting_carries_the_same_betas(fresh: Setup) -> None:
    response, _ = send(fresh, "aria-haiku-4.5", ",".join(CLAUDE_CODE_BETAS), count=True)
    assert response.status_code == 200, response.text
    assert "tool-search-tool-2025-10-19" in only(fresh.clouds.bedrock.requests).json()["anthropic_beta"]


def test_betas_a_client_puts_in_the_body_are_judged_too(fresh: Setup) -> None:
    extra: dict[str, Any] = {"anthropic_beta": ["claude-code-20250219", "context-1m-2025-08-07"]}
    response, _ = send(fresh, "aria-haiku-4.5", "interleaved-thinking-2025-05-14", **extra)
    assert response.status_code == 200, response.text
    assert only(fresh.clouds.bedrock.requests).json()["anthropic_beta"] == [
        "interleaved-thinking-2025-05-14",
        "context-1m-2025-08-07",
    ]
    response, _ = send(fresh, "aria-opus-4.8", "", **extra)
    assert response.status_code == 200, response.text
    sent = only(fresh.clouds.vertex.requests)
    assert sent.headers["anthropic-beta"] == "claude-code-20250219,context-1m-2025-08-07"
    assert "anthropic_beta" not in sent.json()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(
    ("model", "beta"),
    [
        ("aria-haiku-4.5", "files-api-2025-04-14"),
        ("aria-opus-4.8", "mcp-client-2025-11-20"),
        ("aria-opus-4.7", "effort-2025-11-24"),
    ],
)
def test_a_refused_beta_is_a_400_in_messages_format_and_costs_nothing(
    fresh: Setup, model: str, beta: str, stream: bool
) -> None:
    response, key_id = send(fresh, model, f"claude-code-20250219,{beta}", stream=stream)
    assert response.status_code == 400 and response.headers["content-type"].startswith("application/json")
    payload = response.json()
    assert payload["type"] == "error" and payload["error"]["type"] == "invalid_request_error"
    assert beta in payload["error"]["message"]
    assert not fresh.clouds.bedrock.requests and not fresh.clouds.vertex.requests
    (record,) = usage_records(fresh.gateway, key_id)
    assert record.charged_uc == 0
    account = fresh.gateway.call(fresh.gateway.services.accounts.get_account(record.account_id))
    assert account is not None and (account.balance_uc, account.reserved_uc) == (100_000_000, 0)


def test_a_providers_betas_override_the_table(fresh: Setup) -> None:
    betas = (
        "claude-code-20250219,per-turn-control-2026-07-01,files-api-2025-04-14,some-future-beta-2027-01-01"
    )
    fresh.clouds.bedrock.accepted_betas = accepted("bedrock") | {
        "per-turn-control-2026-07-01",
        "some-future-beta-2027-01-01",
    }
    response, _ = send(fresh, "aria-opus-4.7", betas)
    assert response.status_code == 200, response.text
    # claude-code stripped by the table; per-turn-control and the unknown one passed; files-api
    # stripped instead of refused.
    assert only(fresh.clouds.bedrock.requests).json()["anthropic_beta"] == [
        "per-turn-control-2026-07-01",
        "some-future-beta-2027-01-01",
    ]


def test_the_fakes_refuse_what_the_table_strips(fresh: Setup) -> None:
    """The tests above mean something: sent as is, Claude Code's list fails on both fakes."""
    fresh.clouds.bedrock.accepted_betas = frozenset()
    response, _ = send(fresh, "aria-haiku-4.5", "interleaved-thinking-2025-05-14")
    assert response.status_code == 400 and "invalid beta flag" in response.text
    assert not accepted("vertex") >= set(CLAUDE_CODE_BETAS) and not accepted("bedrock") >= set(
        CLAUDE_CODE_BETAS
    )


@pytest.mark.parametrize(
    "header",
    [
        ",".join(CLAUDE_CODE_BETAS),
        "claude-code-20250219, interleaved-thinking-2025-05-14,  files-api-2025-04-14",
        "mcp-client-2025-11-20",
    ],
)
def test_the_anthropic_kind_gets_the_header_byte_for_byte(fresh: Setup, header: str) -> None:
    response, _ = send(fresh, "aria-sonnet-4.6", header)
    assert response.status_code == 200, response.text
    sent = only(fresh.anthropic.requests)
    assert sent.headers["anthropic-beta"] == header
    body = orjson.loads(sent.body)
    assert body["context_management"] == BODY["context_management"] and body["tools"] == TOOLS


def test_an_anthropic_provider_can_strip_a_beta_with_its_fields(fresh: Setup) -> None:
    response, _ = send(
        fresh, "aria-opus-4.6", "claude-code-20250219,context-management-2025-06-27,effort-2025-11-24"
    )
    assert response.status_code == 200, response.text
    sent = only(fresh.anthropic.requests)
    assert sent.headers["anthropic-beta"] == "claude-code-20250219,effort-2025-11-24"
    body = orjson.loads(sent.body)
    assert "context_management" not in body and body["output_config"] == {"effort": "high"}
