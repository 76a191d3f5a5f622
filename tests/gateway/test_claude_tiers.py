"""Claude model ids resolve by tier (catalogue ``claude_tiers``): whatever id a Claude Code release
sends, ``claude-<tier>-…`` reaches the target of the tier's alias before the allowed-models check
and billing, and answers and usage records carry the canonical id."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import pytest

from modelgate.catalogue import build_catalogue
from modelgate.config import ConfigError
from tests.billing.helpers import wait_for_record
from tests.gateway_server import GatewayServer, running_gateway

#: What Claude Code 2.1.332 sends by default, with --model sonnet and --model haiku (reference §7),
#: and ids of earlier releases and of the older naming.
CLAUDE_IDS = {
    "claude-opus-5-5": "aria-opus-4.8",
    "claude-opus-5-5[1m]": "aria-opus-4.8",
    "claude-sonnet-5-5": "aria-sonnet-4.6",
    "claude-sonnet-5-5[1m]": "aria-sonnet-4.6",
    "claude-haiku-5-5": "aria-haiku-4.5",
    "claude-haiku-5-5[1m]": "aria-haiku-4.5",
    "claude-haiku-4-5-20251001": "aria-haiku-4.5",
    "claude-3-5-sonnet-20241022": "aria-sonnet-4.6",
}


def _ask(server: GatewayServer, secret: str, model: str) -> tuple[str, anthropic.types.Message]:
    """The request id and the final message of a request shaped as Claude Code's."""
    with (
        anthropic.Anthropic(base_url=server.base_url, api_key=secret, max_retries=0) as client,
        client.messages.stream(
            # As Claude Code asks: streamed, 128,000 tokens (clamped to the model's limit).
            model=model,
            max_tokens=128000,
            messages=[{"role": "user", "content": "Hello"}],
        ) as stream,
    ):
        return stream.response.headers["request-id"], stream.get_final_message()


@pytest.fixture(scope="module")
def default_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    with running_gateway(tmp_path_factory.mktemp("tiers") / "data") as server:
        yield server


@pytest.mark.parametrize(("model", "canonical"), CLAUDE_IDS.items())
def test_claude_ids_resolve_to_their_tiers_alias_target_with_no_configuration(
    default_gateway: GatewayServer, model: str, canonical: str
) -> None:
    key = default_gateway.key(default_gateway.account(f"tier-{len(model)}-{model[-3:]}"), "Pro")
    request_id, message = _ask(default_gateway, key.secret, model)
    assert message.model == canonical and message.content
    (record,) = wait_for_record(default_gateway, request_id, key.record.id)
    assert record.model == canonical and record.charged_uc > 0


def test_the_allowed_models_check_sees_the_canonical_id(default_gateway: GatewayServer) -> None:
    key = default_gateway.key(default_gateway.account("tier-allowed"), "Basic", models=["aria-haiku-4.5"])
    assert _ask(default_gateway, key.secret, "claude-haiku-5-5")[1].model == "aria-haiku-4.5"
    with pytest.raises(anthropic.NotFoundError, match="claude-opus-5-5 is not available"):
        _ask(default_gateway, key.secret, "claude-opus-5-5")


def test_claude_ids_are_never_listed_and_unknown_tiers_stay_unknown(default_gateway: GatewayServer) -> None:
    key = default_gateway.key(default_gateway.account("tier-listing"), "Pro")
    with anthropic.Anthropic(base_url=default_gateway.base_url, api_key=key.secret, max_retries=0) as client:
        listed = {m.id for m in client.models.list()}
        with pytest.raises(anthropic.NotFoundError):
            client.messages.create(
                model="claude-instant-1", max_tokens=16, messages=[{"role": "user", "content": "Hi"}]
            )
    assert not any(m.startswith("claude-") for m in listed) and "aria-opus-4.8" in listed


def test_a_nova_key_cannot_reach_an_aria_model_through_a_claude_id(default_gateway: GatewayServer) -> None:
    key = default_gateway.key(default_gateway.account("tier-nova"), "Nova")
    reply = httpx.post(
        f"{default_gateway.base_url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key.secret}"},
        json={"model": "claude-sonnet-5-5", "messages": [{"role": "user", "content": "Hi"}]},
    )
    assert reply.status_code == 404 and reply.json()["error"]["code"] == "model_not_found"


def test_exact_aliases_win_and_tiers_can_be_pointed_elsewhere_or_turned_off(tmp_path: Path) -> None:
    catalogue = {
        "aliases": {"claude-opus-5-5": "aria-opus-5"},
        "claude_tiers": {"opus": "aria-opus-5-5", "haiku": ""},
    }
    with running_gateway(tmp_path / "on", catalogue=catalogue) as server:
        key = server.key(server.account("tier-pointed"), "Pro")
        assert _ask(server, key.secret, "claude-opus-5-5")[1].model == "aria-opus-5"  # the alias
        assert _ask(server, key.secret, "claude-opus-6")[1].model == "aria-opus-5-5"  # the tier
        assert _ask(server, key.secret, "claude-sonnet-5-5")[1].model == "aria-sonnet-4.6"  # default kept
        with pytest.raises(anthropic.NotFoundError):
            _ask(server, key.secret, "claude-haiku-5-5")  # that tier is off
    with running_gateway(tmp_path / "off", catalogue={"claude_tiers": False}) as server:
        key = server.key(server.account("tier-off"), "Pro")
        with pytest.raises(anthropic.NotFoundError):
            _ask(server, key.secret, "claude-sonnet-5-5")


def test_a_tier_aimed_at_no_model_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"claude_tiers\.opus: target 'aria-opus-9'"):
        build_catalogue({"claude_tiers": {"opus": "aria-opus-9"}})
    with pytest.raises(ValueError, match="claude_tiers: false, or a table"):
        build_catalogue({"claude_tiers": "yes"})
    deployments = {"claude-opus-5-5": [{"provider": "simulator", "upstream_model": "x"}]}
    with (
        pytest.raises(ConfigError, match=r"deployments\.claude-opus-5-5: not a catalogue model id"),
        running_gateway(tmp_path / "data", deployments=deployments),
    ):
        pass
