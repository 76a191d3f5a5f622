"""Upstream credentials never leave the gateway; bad upstream configuration stops the start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from modelgate.config import ConfigError
from modelgate.services import Services
from tests.fakes import FakeUpstream, Fault, Reply
from tests.fakes.upstream import Step
from tests.gateway_server import make_settings, running_gateway
from tests.loop_thread import LoopThread
from tests.resilience.clients import Format, call
from tests.resilience.harness import (
    ANTHROPIC_KEY,
    ENV,
    OPENAI_KEY,
    QUICK_ROUTING,
    SECRETS,
    anthropic_provider,
    capture_logs,
    openai_provider,
    rescript,
)

#: (client format, key group, model) for one request in each wire format.
EVERY_FORMAT: list[tuple[Format, str, str]] = [
    ("messages", "Pro", "aria-sonnet-4.6"),
    ("chat", "Nova", "nova-5.5"),
    ("responses", "Nova", "nova-5.5"),
]
SCENARIOS: list[Step] = [
    Fault.echo_key(401),
    Fault.echo_key(403),
    Fault.echo_key(400),
    Fault.echo_key(500),
    Fault.echo_key(429),
    Fault.reset_after(2, then=Reply(event_delay=0.01)),
    Fault.malformed_sse(),
    Reply(),
]


def test_upstream_keys_appear_in_no_response_header_body_or_log(tmp_path: Path) -> None:
    with LoopThread("fake-upstreams") as fakes, capture_logs() as logs:
        fake = fakes.start(FakeUpstream())
        providers = [anthropic_provider("ant", fake.base_url), openai_provider("oai", fake.base_url)]
        deployments = {
            "aria-sonnet-4.6": [{"provider": "ant", "upstream_model": "claude-up"}],
            "nova-5.5": [{"provider": "oai", "upstream_model": "gpt-up"}],
        }
        with running_gateway(
            tmp_path / "data",
            env=ENV,
            providers=providers,
            deployments=deployments,
            default_provider="",
            unrouted="hide",
            routing=QUICK_ROUTING,
        ) as gateway:
            account = gateway.account("acme")
            keys = {g: gateway.key(account, g, rpm=10_000).secret for g in ("Pro", "Nova")}
            seen: list[str] = []
            carried = 0
            for step in SCENARIOS:
                for fmt, group, model in EVERY_FORMAT:
                    for stream in (False, True):
                        rescript(fake, default=step)
                        outcome = call(gateway.base_url, keys[group], fmt, model, stream=stream)
                        seen += [outcome.raw, outcome.message, str(outcome.headers)]
                        assert fake.requests, "the upstream was called"
                        carried += sum(
                            r.headers.get("x-api-key") == ANTHROPIC_KEY
                            or r.headers.get("authorization") == f"Bearer {OPENAI_KEY}"
                            for r in fake.requests
                        )
            operator = gateway.call(gateway.management.create_admin_token(None))
            for headers in ({}, {"authorization": f"Bearer {operator}"}):  # public and details
                health = httpx.get(f"{gateway.base_url}/health", headers=headers)
                seen.append(health.text + str(dict(health.headers)))
    # The credentials really travelled upstream (and the fake echoed them back in its errors).
    assert carried >= len(SCENARIOS) * 6
    text = "\n".join(seen + logs)
    assert "Incorrect API key provided" in text  # the echoed messages were relayed, scrubbed
    for secret in SECRETS:
        assert secret not in text
        assert secret[:20] not in text  # no prefix of it either
    assert fake.base_url not in text and fake.base_url.removeprefix("http://") not in text
    assert any("upstream" in line for line in logs), "upstream failures are logged (scrubbed)"


# --- start-up validation -------------------------------------------------------------------


def _build(tmp_path: Path, env: dict[str, str] | None = None, **overrides: object) -> Services:
    return Services.build(make_settings(tmp_path / "data", **overrides), env=ENV if env is None else env)


def test_configuration_errors_name_the_key(tmp_path: Path) -> None:
    ant = anthropic_provider("ant", "http://127.0.0.1:9")
    with pytest.raises(
        ConfigError, match=r"deployments\['aria-sonnet-4.6'\]\[0\]\.provider: unknown provider 'nope'"
    ):
        _build(
            tmp_path,
            providers=[ant],
            deployments={"aria-sonnet-4.6": [{"provider": "nope", "upstream_model": "x"}]},
            default_provider="",
            unrouted="hide",
        )
    with pytest.raises(
        ConfigError,
        match=r"providers\[0\] \('ant'\)\.api_key_env: environment variable 'ANTHROPIC_TEST_KEY' is not set",
    ):
        _build(tmp_path, env={}, providers=[ant], default_provider="ant")
    with pytest.raises(
        ConfigError, match=r"deployments: no deployment for catalogue model\(s\) .*aria-haiku-4.5"
    ):
        _build(
            tmp_path,
            providers=[ant],
            deployments={"aria-sonnet-4.6": [{"provider": "ant", "upstream_model": "x"}]},
            default_provider="",
        )
    # The message gives the lines that fix it.
    with pytest.raises(ConfigError) as missing:
        _build(tmp_path, providers=[ant])
    assert "default_provider: 'simulator' is not a configured provider (configured: ant)" in str(
        missing.value
    )
    assert 'default_provider = "ant"' in str(missing.value) and 'default_provider = ""' in str(missing.value)


def test_hidden_models_are_listed_nowhere_and_answer_404(tmp_path: Path) -> None:
    with LoopThread("fake-upstreams") as fakes:
        fake = fakes.start(FakeUpstream())
        with running_gateway(
            tmp_path / "data",
            env=ENV,
            providers=[anthropic_provider("ant", fake.base_url)],
            deployments={"aria-sonnet-4.6": [{"provider": "ant", "upstream_model": "claude-up"}]},
            default_provider="",
            unrouted="hide",
        ) as gateway:
            key = gateway.key(gateway.account("acme"), "Pro").secret
            listed = httpx.get(f"{gateway.base_url}/v1/models", headers={"x-api-key": key}).json()
            assert [m["id"] for m in listed["data"]] == ["aria-sonnet-4.6"]
            # The alias "sonnet" still resolves (its target is routed); "haiku" is hidden with its target.
            assert call(gateway.base_url, key, "messages", "sonnet", stream=False).status == 200
            hidden = call(gateway.base_url, key, "messages", "haiku", stream=False)
            assert (hidden.status, hidden.error_type) == (404, "not_found_error")
            assert fake.count == 1


MISSING_ENV_TOML = """
default_provider = ""
unrouted = "hide"

[[providers]]
name = "anthropic"
kind = "anthropic"
api_key_env = "MODELGATE_TEST_UNSET_KEY"

[[deployments."aria-sonnet-4.6"]]
provider = "anthropic"
upstream_model = "claude-sonnet-4-5"
"""
UNKNOWN_PROVIDER_TOML = MISSING_ENV_TOML.replace(
    'provider = "anthropic"\nupstream', 'provider = "anthropic-eu"\nupstream'
).replace("MODELGATE_TEST_UNSET_KEY", "RESILIENCE_TEST_SET_KEY")
UNROUTED_TOML = MISSING_ENV_TOML.replace('unrouted = "hide"\n', "").replace(
    "MODELGATE_TEST_UNSET_KEY", "RESILIENCE_TEST_SET_KEY"
)


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        (
            MISSING_ENV_TOML,
            "providers[0] ('anthropic').api_key_env: environment variable 'MODELGATE_TEST_UNSET_KEY' is not set",
        ),
        (
            UNKNOWN_PROVIDER_TOML,
            "deployments['aria-sonnet-4.6'][0].provider: unknown provider 'anthropic-eu'",
        ),
        (UNROUTED_TOML, "deployments: no deployment for catalogue model(s) aria-opus-5,"),
    ],
    ids=["missing-env", "unknown-provider", "routed-nowhere"],
)
def test_serve_with_a_bad_config_prints_the_error_and_exits_non_zero(
    tmp_path: Path, toml: str, expected: str
) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(toml)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELGATE_")}
    env["RESILIENCE_TEST_SET_KEY"] = "sk-ant-set-but-unused"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "modelgate",
            "serve",
            "--config",
            str(config),
            "--data-dir",
            str(tmp_path / "d"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode != 0
    # rich wraps long lines; compare with whitespace normalised.
    assert expected in " ".join(result.stderr.split()), result.stderr
    assert "sk-ant-set-but-unused" not in result.stderr + result.stdout
    # Nothing was seeded: a bad config prints no first-start secrets and leaves no database.
    assert "sk-cs4-" not in result.stdout and "admin token" not in result.stdout
    assert not (tmp_path / "d" / "modelgate.db").exists()
