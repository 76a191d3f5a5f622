"""Where cloud credentials come from, and their renewal: Google tokens from a service-account
file or application default credentials, refreshed before they expire; Entra ID tokens from a
managed identity; AWS identities from the standard chain (with a session token) and from a
named profile. Counts of token requests and of the tokens requests carried, not durations."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cloud.harness import (
    AZURE_DEPLOYMENT,
    BEDROCK_MODEL,
    VERTEX_MODEL,
    azure_provider,
    bedrock_provider,
    start_clouds,
    vertex_provider,
)
from tests.cloud.sdk import Format, turn
from tests.conformance.conftest import issue_key
from tests.fakes.azure import IDENTITY_HEADER
from tests.fakes.bedrock import CloudRequest
from tests.fakes.sigv4 import AwsKey
from tests.gateway_server import GatewayServer, running_gateway
from tests.loop_thread import LoopThread

SESSION = AwsKey(
    "ASIAFAKESESSION00001", "session/secret/key/for/the/chain", "FwoGZXIvYXdzEfakeSessionToken0123456789"
)
PROFILE = AwsKey("AKIAFAKEPROFILE00002", "profile/secret/key/for/team-b", None)


def _ask(gateway: GatewayServer, fmt: Format, model: str, n: int) -> list[str]:
    secret, _ = issue_key(gateway, "Nova" if fmt != "messages" else "Pro")
    return [turn(fmt, gateway.base_url, secret, model, stream=i % 2 == 1).text for i in range(n)]


def _bearers(requests: list[CloudRequest]) -> list[str]:
    return [r.headers["authorization"].removeprefix("Bearer ") for r in requests]


def test_google_tokens_are_reused_and_refreshed_before_they_expire(tmp_path: Path) -> None:
    with LoopThread("fake-upstreams") as fakes:
        clouds = start_clouds(fakes, tmp_path)
        vertex = clouds.vertex
        provider = vertex_provider("vertex", vertex, clouds.credential_files, token_refresh_margin=300)
        deployments = {"aria-opus-4.8": [{"provider": "vertex", "upstream_model": VERTEX_MODEL}]}
        with running_gateway(
            tmp_path / "data",
            providers=[{"name": "simulator", "kind": "simulator"}, provider],
            deployments=deployments,
        ) as gateway:
            # Tokens valid for 200 s are inside the 300 s margin: each request gets a new one.
            vertex.expires_in = 200
            assert _ask(gateway, "messages", "aria-opus-4.8", 3) == ["Hello from the fake upstream."] * 3
            assert sum(vertex.token_requests.values()) == 3
            assert _bearers(vertex.requests) == vertex.issued()[:3]
            # Tokens valid for an hour are reused: one refresh (the last short one was due).
            vertex.expires_in = 3600
            assert _ask(gateway, "messages", "aria-opus-4.8", 4) == ["Hello from the fake upstream."] * 4
            assert sum(vertex.token_requests.values()) == 4
            assert _bearers(vertex.requests)[3:] == [vertex.issued()[3]] * 4


def test_application_default_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with LoopThread("fake-upstreams") as fakes:
        clouds = start_clouds(fakes, tmp_path)
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(clouds.credential_files[0]))
        provider = vertex_provider("vertex", clouds.vertex, clouds.credential_files)
        del provider["credentials_file"]
        deployments = {"aria-opus-4.8": [{"provider": "vertex", "upstream_model": VERTEX_MODEL}]}
        with running_gateway(
            tmp_path / "data",
            providers=[{"name": "simulator", "kind": "simulator"}, provider],
            deployments=deployments,
        ) as gateway:
            assert _ask(gateway, "messages", "aria-opus-4.8", 2) == ["Hello from the fake upstream."] * 2
    assert [r.credential for r in clouds.vertex.requests] == list(clouds.vertex.accounts)[:1] * 2


def test_entra_id_tokens_from_a_managed_identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with LoopThread("fake-upstreams") as fakes:
        clouds = start_clouds(fakes, tmp_path)
        azure = clouds.azure
        # App Service's managed identity endpoint, as azure-identity finds it.
        monkeypatch.setenv("IDENTITY_ENDPOINT", f"{azure.base_url}/msi/token")
        monkeypatch.setenv("IDENTITY_HEADER", IDENTITY_HEADER)
        for name in (
            "AZURE_CLIENT_ID",
            "AZURE_TENANT_ID",
            "AZURE_CLIENT_SECRET",
            "AZURE_FEDERATED_TOKEN_FILE",
            "MSI_ENDPOINT",
        ):
            monkeypatch.delenv(name, raising=False)
        provider = azure_provider("azure", azure, api="deployments", entra_id=True)
        del provider["api_key_env"]
        deployments = {"nova-5.5": [{"provider": "azure", "upstream_model": AZURE_DEPLOYMENT}]}
        with running_gateway(
            tmp_path / "data",
            providers=[{"name": "simulator", "kind": "simulator"}, provider],
            deployments=deployments,
        ) as gateway:
            for fmt in ("chat", "responses"):
                assert _ask(gateway, fmt, "nova-5.5", 2) == ["Hello from the fake upstream."] * 2
    assert azure.token_requests == 1
    (token,) = azure.tokens
    assert [r.credential for r in azure.requests] == [f"entra:{token}"] * 4
    assert all("api-key" not in r.headers for r in azure.requests)


def test_aws_identities_from_the_standard_chain_and_a_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "credentials"
    shared.write_text(
        f"[team-b]\naws_access_key_id = {PROFILE.access_key_id}\naws_secret_access_key = {PROFILE.secret_access_key}\n"
    )
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(shared))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", SESSION.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SESSION.secret_access_key)
    monkeypatch.setenv("AWS_SESSION_TOKEN", SESSION.session_token or "")
    with LoopThread("fake-upstreams") as fakes:
        clouds = start_clouds(fakes, tmp_path)
        bedrock = clouds.bedrock
        bedrock.keys = {k.access_key_id: k for k in (SESSION, PROFILE)}
        chain = bedrock_provider("chain", bedrock)
        del chain["aws_credentials"]
        profile = bedrock_provider("profile", bedrock, aws_credentials=[{"profile": "team-b"}])
        deployments = {
            "aria-haiku-4.5": [{"provider": "chain", "upstream_model": BEDROCK_MODEL}],
            "aria-opus-4.8": [{"provider": "profile", "upstream_model": BEDROCK_MODEL}],
        }
        providers = [{"name": "simulator", "kind": "simulator"}, chain, profile]
        with running_gateway(tmp_path / "data", providers=providers, deployments=deployments) as gateway:
            assert _ask(gateway, "messages", "aria-haiku-4.5", 2) == ["Hello from the fake upstream."] * 2
            assert _ask(gateway, "messages", "aria-opus-4.8", 2) == ["Hello from the fake upstream."] * 2
    # The fake verified each signature, and the session token of the chain's identity.
    assert [r.credential for r in bedrock.requests] == [SESSION.access_key_id] * 2 + [
        PROFILE.access_key_id
    ] * 2
    assert all(r.headers.get("x-amz-security-token") == SESSION.session_token for r in bedrock.requests[:2])
