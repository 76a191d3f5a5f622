"""Fake clouds on one background loop and the gateway configuration that points at them.

Credentials are long, distinctive and shaped like the real ones, so scans for them in responses
and logs mean something. Each fake takes a ``Scripted`` (per-test steps, then a default).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conformance.upstreams import Scripted
from tests.fakes.azure import FakeAzure
from tests.fakes.bedrock import FakeBedrock
from tests.fakes.sigv4 import AwsKey
from tests.fakes.upstream import Reply
from tests.fakes.vertex import FakeVertex, ServiceAccount
from tests.loop_thread import LoopThread

AWS_KEYS = [
    AwsKey(f"AKIAFAKECLOUD{i}TESTX", f"wJalrXUtnFEMI/K7MDENG/bPxRfiCYCLOUD{i}SECRETKEY", None)
    for i in range(3)
]
AZURE_KEYS = [f"3f9c2b7e1d4a4c8e9b0aAZURE{i}SECRETKEY55" for i in range(3)]
PROJECT = "proj-1"
REGION_AWS = "us-east-1"
REGION_GCP = "us-east5"
TIMEOUTS = {"connect": 5.0, "first_byte": 15.0, "idle": 15.0, "total": 60.0}

ENV: dict[str, str] = {
    **{f"AWS_KEY_ID_{i}": k.access_key_id for i, k in enumerate(AWS_KEYS)},
    **{f"AWS_SECRET_{i}": k.secret_access_key for i, k in enumerate(AWS_KEYS)},
    **{f"AZURE_KEY_{i}": k for i, k in enumerate(AZURE_KEYS)},
}
#: Upstream model ids; the catalogue ids clients use differ, so every reply must be renamed.
BEDROCK_MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
VERTEX_MODEL = "claude-sonnet-4-5@20250929"
AZURE_DEPLOYMENT = "gpt-deploy"


@dataclass
class Clouds:
    bedrock: FakeBedrock
    vertex: FakeVertex
    azure: FakeAzure
    scripts: dict[str, Scripted]
    credential_files: list[Path]

    def reset(self, **steps: list[Any]) -> None:
        """Clear every request log; give the named fakes (bedrock, vertex, azure) new steps."""
        for name, script in self.scripts.items():
            script.reset(*steps.get(name, []))
        for fake, script in zip((self.bedrock, self.vertex, self.azure), self.scripts.values(), strict=True):
            fake._decide = script
            fake.requests.clear()


def start_clouds(fakes: LoopThread, directory: Path, accounts: int = 1) -> Clouds:
    scripts = {name: Scripted(default=Reply()) for name in ("bedrock", "vertex", "azure")}
    bedrock = FakeBedrock(AWS_KEYS, scripts["bedrock"], region=REGION_AWS)
    vertex = FakeVertex(
        [ServiceAccount.make(f"gateway{i}", PROJECT) for i in range(accounts)],
        scripts["vertex"],
        project=PROJECT,
        region=REGION_GCP,
    )
    azure = FakeAzure(AZURE_KEYS, scripts["azure"])
    for fake in (bedrock, vertex, azure):
        fakes.start(fake)
    return Clouds(bedrock, vertex, azure, scripts, vertex.write_credentials(directory))


def bedrock_provider(name: str, fake: FakeBedrock, keys: int = 1, **extra: Any) -> dict[str, Any]:
    credentials = [
        {"access_key_id_env": f"AWS_KEY_ID_{i}", "secret_access_key_env": f"AWS_SECRET_{i}"}
        for i in range(keys)
    ]
    return {
        "name": name,
        "kind": "bedrock",
        "region": REGION_AWS,
        "base_url": fake.base_url,
        "aws_credentials": credentials,
        "timeouts": TIMEOUTS,
        **extra,
    }


def vertex_provider(name: str, fake: FakeVertex, files: list[Path], **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "vertex",
        "region": REGION_GCP,
        "project": PROJECT,
        "base_url": fake.base_url,
        "credentials_file": [str(f) for f in files] if len(files) > 1 else str(files[0]),
        "timeouts": TIMEOUTS,
        **extra,
    }


def azure_provider(
    name: str, fake: FakeAzure, api: str = "v1", keys: int = 1, **extra: Any
) -> dict[str, Any]:
    names = [f"AZURE_KEY_{i}" for i in range(keys)]
    config: dict[str, Any] = {
        "name": name,
        "kind": "azure-openai",
        "base_url": fake.base_url,
        "azure_api": api,
        "api_key_env": names if keys > 1 else names[0],
        "timeouts": TIMEOUTS,
        **extra,
    }
    if api == "deployments":
        config.setdefault("api_version", "2024-10-21")
    return config


def secrets_of(clouds: Clouds) -> list[str]:
    """Everything that must never reach a client or a log."""
    out = [k.access_key_id for k in AWS_KEYS] + [k.secret_access_key for k in AWS_KEYS] + AZURE_KEYS
    out += clouds.vertex.issued() + list(clouds.azure.tokens)
    return out
