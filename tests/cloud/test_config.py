"""Start-up validation of the cloud kinds and of credential pools: every problem names its key.

Also: a gateway without cloud providers never imports the cloud SDKs (checked in a fresh
interpreter, since this one has imported them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from modelgate.upstream.config import DeploymentConfig, parse_provider, validate_upstreams

AWS_ENV = {"A": "AKIAFAKEVALIDATION01", "S": "fake/validation/secret/key"}


def _check(provider: dict[str, Any], env: dict[str, str] | None = None) -> None:
    validate_upstreams([parse_provider(provider)], {}, AWS_ENV if env is None else env)


def _bedrock(**extra: Any) -> dict[str, Any]:
    return {
        "name": "b",
        "kind": "bedrock",
        "region": "us-east-1",
        "aws_credentials": [{"access_key_id_env": "A", "secret_access_key_env": "S"}],
        **extra,
    }


@pytest.fixture
def no_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The standard AWS chain finds nothing, and never asks an instance metadata service."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))


def test_a_valid_bedrock_vertex_and_azure_configuration_passes(tmp_path: Path) -> None:
    account = tmp_path / "sa.json"
    account.write_text(json.dumps(_service_account()))
    validate_upstreams(
        [
            parse_provider(_bedrock()),
            parse_provider(
                {
                    "name": "v",
                    "kind": "vertex",
                    "region": "global",
                    "project": "p",
                    "credentials_file": str(account),
                }
            ),
            parse_provider(
                {
                    "name": "z",
                    "kind": "azure-openai",
                    "base_url": "https://r.openai.azure.com",
                    "api_key_env": "S",
                }
            ),
        ],
        {"aria-x": [DeploymentConfig(provider="b", upstream_model="anthropic.claude")]},
        AWS_ENV,
    )
    assert parse_provider(_bedrock()).resolved_base_url() == "https://bedrock-runtime.us-east-1.amazonaws.com"
    vertex = {"name": "v", "kind": "vertex", "project": "p"}
    assert (
        parse_provider({**vertex, "region": "us-east5"}).resolved_base_url()
        == "https://us-east5-aiplatform.googleapis.com"
    )
    assert (
        parse_provider({**vertex, "region": "global"}).resolved_base_url()
        == "https://aiplatform.googleapis.com"
    )
    assert (
        parse_provider({**vertex, "region": "eu"}).resolved_base_url()
        == "https://aiplatform.eu.rep.googleapis.com"
    )


@pytest.mark.parametrize(
    ("provider", "env", "message"),
    [
        (_bedrock(region=None), None, r"providers\[0\] \('b'\)\.region: required for kind 'bedrock'"),
        (_bedrock(region="us-east-one"), None, r"\.region: 'us-east-one' is not an AWS region name"),
        (_bedrock(region="mars-north-1"), None, r"\.region: 'mars-north-1' is not an AWS region name"),
        (
            _bedrock(),
            {"A": "x"},
            r"\.aws_credentials\[0\]\.secret_access_key_env: environment variable 'S' is not set",
        ),
        (
            _bedrock(aws_credentials=[{"access_key_id_env": "A"}]),
            None,
            r"\.aws_credentials\[0\]: needs profile",
        ),
        (_bedrock(aws_credentials=[]), None, r"\.aws_credentials: an empty list names no credential"),
        (_bedrock(api_key_env="S"), None, r"\.api_key_env: bedrock signs with AWS credentials"),
        ({"name": "v", "kind": "vertex", "region": "us-east5"}, None, r"\('v'\)\.project: required"),
        ({"name": "v", "kind": "vertex", "project": "p"}, None, r"\('v'\)\.region: required"),
        (
            {"name": "v", "kind": "vertex", "project": "p", "region": "US East"},
            None,
            r"is not a Vertex AI location",
        ),
        (
            {
                "name": "v",
                "kind": "vertex",
                "project": "p",
                "region": "us-east5",
                "credentials_file": ["/nonexistent/sa.json"],
            },
            None,
            r"\('v'\)\.credentials_file\[0\]: file '/nonexistent/sa.json' does not exist",
        ),
        (
            {"name": "z", "kind": "azure-openai", "base_url": "https://r.openai.azure.com"},
            None,
            r"\('z'\)\.api_key_env: required",
        ),
        (
            {
                "name": "z",
                "kind": "azure-openai",
                "base_url": "https://r",
                "api_key_env": "S",
                "entra_id": True,
            },
            None,
            r"\.entra_id: use either api_key_env or entra_id",
        ),
        (
            {
                "name": "z",
                "kind": "azure-openai",
                "base_url": "https://r",
                "api_key_env": "S",
                "azure_api": "deployments",
            },
            None,
            r"\.api_version: required with azure_api = 'deployments'",
        ),
        ({"name": "z", "kind": "azure-openai", "api_key_env": "S"}, None, r"\('z'\)\.base_url: required"),
        (
            {"name": "a", "kind": "anthropic", "api_key_env": "S", "region": "us-east-1"},
            None,
            r"\('a'\)\.region: only for kind\(s\) bedrock, vertex",
        ),
        (
            {"name": "a", "kind": "anthropic", "api_key_env": ["S", "K2"]},
            None,
            r"\('a'\)\.api_key_env\[1\]: environment variable 'K2' is not set",
        ),
        (
            {"name": "a", "kind": "anthropic", "api_key_env": ["S", "S"]},
            None,
            r"\.api_key_env: a variable is listed twice",
        ),
        (
            {"name": "a", "kind": "openai", "api_key_env": []},
            None,
            r"\.api_key_env: an empty list names no credential",
        ),
    ],
)
def test_a_bad_cloud_configuration_names_the_key(
    provider: dict[str, Any], env: dict[str, str] | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        _check(provider, env)


def test_missing_aws_credentials_and_profiles_are_named(no_aws: None, tmp_path: Path) -> None:
    with pytest.raises(
        ValueError,
        match=r"\('b'\)\.aws_credentials: not set, and the standard AWS chain .* found no credentials",
    ):
        _check(_bedrock(aws_credentials=None))
    with pytest.raises(ValueError, match=r"\.aws_credentials\[0\]\.profile: .*team-b"):
        _check(_bedrock(aws_credentials=[{"profile": "team-b"}]))


def test_missing_application_default_credentials_are_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(
        ValueError, match=r"\('v'\)\.credentials_file: not set, and no application default credentials"
    ):
        _check({"name": "v", "kind": "vertex", "project": "p", "region": "us-east5"})
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "service_account"}')
    with pytest.raises(
        ValueError, match=r"\('v'\)\.credentials_file: .*bad.json' is not a usable credentials file"
    ):
        _check(
            {
                "name": "v",
                "kind": "vertex",
                "project": "p",
                "region": "us-east5",
                "credentials_file": str(bad),
            }
        )


@pytest.mark.parametrize(
    ("module", "provider", "extra"),
    [
        ("botocore", _bedrock(), "bedrock"),
        ("google.auth", {"name": "v", "kind": "vertex", "project": "p", "region": "global"}, "vertex"),
        (
            "azure.identity",
            {"name": "z", "kind": "azure-openai", "base_url": "https://r", "entra_id": True},
            "azure",
        ),
    ],
)
def test_a_missing_extra_is_named(
    monkeypatch: pytest.MonkeyPatch, module: str, provider: dict[str, Any], extra: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # what an interpreter without the package sees
    with pytest.raises(
        ValueError,
        match=rf"\.kind: kind '{provider['kind']}' needs the optional extra: pip install 'modelgate\[{extra}\]'",
    ):
        _check(provider)


def test_serve_names_a_bad_region_and_exits_non_zero(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(
        'default_provider = ""\nunrouted = "hide"\n\n[[providers]]\nname = "bedrock"\nkind = "bedrock"\n'
        'region = "us-east-one"\n\n[[deployments."aria-sonnet-4.6"]]\nprovider = "bedrock"\n'
        'upstream_model = "anthropic.claude-sonnet-4-5-20250929-v1:0"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MODELGATE_", "AWS_"))}
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
    assert result.returncode == 1
    assert "providers[0] ('bedrock').region: 'us-east-one' is not an AWS region name" in " ".join(
        result.stderr.split()
    )


def test_the_cloud_sdks_are_imported_only_for_cloud_providers(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from modelgate.config import load_settings\n"
        "from modelgate.services import Services\n"
        f"Services.build(load_settings(None, environ={{}}, data_dir=Path({str(tmp_path)!r}), secret='x' * 40))\n"
        "print(sorted(m for m in ('botocore', 'google.auth', 'azure.identity') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


def _service_account() -> dict[str, str]:
    from tests.fakes.vertex import ServiceAccount

    return ServiceAccount.make("check", "p").info("p", "http://127.0.0.1:9/token")
