"""Config validation, retry-after parsing, cooldown state machine and retry budget (pure logic)."""

from __future__ import annotations

import email.utils
from pathlib import Path

import pytest
from pydantic import ValidationError

from modelgate.config import ConfigError, load_settings
from modelgate.upstream.config import (
    DeploymentConfig,
    ProviderConfig,
    RoutingConfig,
    parse_provider,
    validate_upstreams,
)
from modelgate.upstream.error_mapping import parse_error_body, retry_after_seconds
from modelgate.upstream.health import DeploymentHealth, RetryBudget


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def providers() -> list[ProviderConfig]:
    return [
        parse_provider(dict(name="anth", kind="anthropic", api_key_env="ANTH_KEY")),
        parse_provider(dict(name="vllm", kind="openai-compatible", base_url="http://10.0.0.5:8000")),
        parse_provider(dict(name="sim", kind="simulator")),
    ]


def test_valid_configuration_passes() -> None:
    deployments = {"aria-x": [DeploymentConfig(provider="anth", upstream_model="claude-x")]}
    validate_upstreams(providers(), deployments, {"ANTH_KEY": "sk-ant-1"})
    assert providers()[0].resolved_base_url() == "https://api.anthropic.com"
    assert (
        RoutingConfig().max_attempts == 3
        and parse_provider(dict(name="s", kind="simulator")).timeouts.idle == 60
    )


@pytest.mark.parametrize(
    ("provs", "deps", "env", "match"),
    [
        (
            None,
            {"m": [DeploymentConfig(provider="ghost", upstream_model="x")]},
            {"ANTH_KEY": "k"},
            r"deployments\['m'\]\[0\]\.provider: unknown provider 'ghost'",
        ),
        (None, {}, {}, r"providers\[0\] \('anth'\)\.api_key_env: environment variable 'ANTH_KEY' is not set"),
        (
            [parse_provider(dict(name="oa", kind="openai"))],
            {},
            {},
            r"providers\[0\] \('oa'\)\.api_key_env: required",
        ),
        (
            [parse_provider(dict(name="c", kind="openai-compatible"))],
            {},
            {},
            r"providers\[0\] \('c'\)\.base_url",
        ),
        (
            [parse_provider(dict(name="c", kind="openai-compatible", base_url="localhost:8000"))],
            {},
            {},
            "base_url",
        ),
        ([parse_provider(dict(name="s", kind="simulator"))] * 2, {}, {}, "duplicate"),
        (None, {"m": []}, {"ANTH_KEY": "k"}, r"deployments\['m'\]"),
    ],
)
def test_invalid_configuration_names_the_key(
    provs: list[ProviderConfig] | None,
    deps: dict[str, list[DeploymentConfig]],
    env: dict[str, str],
    match: str,
) -> None:
    with pytest.raises(ValueError, match=match):
        validate_upstreams(provs if provs is not None else providers(), deps, env)


def test_models_reject_bad_values() -> None:
    with pytest.raises(ValidationError):
        parse_provider({"name": "x", "kind": "gemini"})
    with pytest.raises(ValidationError):
        DeploymentConfig(provider="a", upstream_model="m", weight=0)
    with pytest.raises(ValidationError):
        parse_provider({"name": "x", "kind": "openai", "anthropic_beta": "sometimes"})
    assert parse_provider({"name": "x", "kind": "anthropic", "anthropic_beta": ["a"]}).anthropic_beta == ["a"]


def test_retry_after_parsing() -> None:
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_seconds({"retry-after": "3"}) == 3.0
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None
    date = email.utils.formatdate(1_000_010, usegmt=True)
    assert retry_after_seconds({"retry-after": date}, now=1_000_000) == pytest.approx(10)


def test_error_body_shapes() -> None:
    anth = parse_error_body(b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}')
    assert (anth.type, anth.message) == ("overloaded_error", "Overloaded")
    oa = parse_error_body(
        b'{"error":{"message":"m","type":"invalid_request_error","param":"tools","code":"c"}}'
    )
    assert (oa.message, oa.param, oa.code) == ("m", "tools", "c")
    assert parse_error_body(b'{"detail":"vllm says no"}').message == "vllm says no"
    assert parse_error_body(b'{"error":"plain"}').message == "plain"
    assert parse_error_body(b"<html>502 from 10.1.2.3</html>").message is None


def test_cooldown_state_machine() -> None:
    clock = Clock()
    health = DeploymentHealth(cooldown=30, failures_to_cooldown=3, clock=clock)
    for _ in range(2):
        health.failed("d")
    assert health.available("d")
    health.failed("d")
    assert not health.available("d") and health.available_at("d") == 130
    clock.now = 131
    assert health.available("d")
    health.begin("d")  # this request is the probe: others keep skipping "d"
    assert not health.available("d")
    health.failed("d")  # probe failed: cool down again
    assert not health.available("d") and health.available_at("d") == 161
    clock.now = 162
    health.begin("d")
    health.abandoned("d")  # cancelled probe: someone else may probe
    assert health.available("d")
    health.begin("d")
    health.succeeded("d")
    assert health.available("d") and health.consecutive_failures("d") == 0
    health.failed("e", hold=5)  # retry-after hold below the failure threshold
    assert not health.available("e")
    clock.now += 5
    assert health.available("e")


def test_retry_budget_ratio_reserve_and_expiry() -> None:
    clock = Clock()
    budget = RetryBudget(ratio=0.2, min_per_second=1, window=10, clock=clock)
    assert sum(budget.try_withdraw() for _ in range(50)) == 10  # the reserve alone
    for _ in range(100):
        budget.deposit()
    assert sum(budget.try_withdraw() for _ in range(50)) == 20  # 0.2 per first attempt
    clock.now += 10  # everything in the window expired
    assert budget.balance() == 10


def test_hosted_tools_policy_per_provider_from_the_file_and_the_environment(tmp_path: Path) -> None:
    assert (
        parse_provider(dict(name="c", kind="openai-compatible", base_url="http://h")).hosted_tools == "drop"
    )
    config = tmp_path / "modelgate.toml"
    config.write_text(
        'default_provider = ""\n[[providers]]\nname = "c"\nkind = "openai-compatible"\nbase_url = "http://h"\n'
        'hosted_tools = "refuse"\n'
    )
    assert load_settings(config, environ={}).providers[0].hosted_tools == "refuse"
    env = {"MODELGATE_PROVIDERS": '[{"name": "simulator", "kind": "simulator", "hosted_tools": "refuse"}]'}
    assert load_settings(None, environ=env).providers[0].hosted_tools == "refuse"
    config.write_text('[[providers]]\nname = "simulator"\nkind = "simulator"\nhosted_tools = "ignore"\n')
    with pytest.raises(ConfigError, match=r"providers\.0\.hosted_tools: Input should be 'drop' or 'refuse'"):
        load_settings(config, environ={})
