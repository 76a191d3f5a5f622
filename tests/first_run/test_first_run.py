"""What a new user meets first: `make serve` installs only what serving needs and takes PORT; the
README's configuration example is a valid configuration; its Claude Code block needs nothing but
two environment variables, and a gateway without configuration serves Claude Code's model ids; its
curl examples say where `$KEY` comes from."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from modelgate.config import load_settings
from tests.gateway_server import running_gateway

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text("utf-8")
#: Claude Code 2.1.332's ids: default, --model sonnet, --model haiku (reference §7).
CLAUDE_CODE_IDS = {
    "claude-opus-5-5": "aria-opus-4.8",
    "claude-sonnet-5-5[1m]": "aria-sonnet-4.6",
    "claude-haiku-5-5": "aria-haiku-4.5",
}


def _blocks(language: str, text: str = README) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)


def _section(title: str) -> str:
    start = README.index(title)
    end = README.find("\n## ", start + len(title))
    return README[start : end if end > 0 else None]


def _dry_run(*args: str) -> list[str]:
    """The commands `make -n ARGS` would run, as a make started from a shell would print them."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return done.stdout.strip().splitlines()


def test_make_serve_installs_only_what_serving_needs_and_takes_port() -> None:
    dry = _dry_run("-B", "serve", "PORT=9000")
    assert dry[-1].split() == [".venv/bin/modelgate", "serve", "--port", "9000"]
    # Not quiet: the first install takes a minute and must not look like a hang.
    assert "pip install --progress-bar on -e ." in "\n".join(dry) and "[test]" not in "\n".join(dry)
    assert _dry_run("serve")[-1].split() == [".venv/bin/modelgate", "serve"]
    assert "pip install -q -e '.[test]'" in "\n".join(_dry_run("-B", "test"))


def test_the_readme_configuration_example_is_a_valid_configuration() -> None:
    (example,) = [b for b in _blocks("toml", _section("## Configuration")) if "[server]" in b]
    data: dict[str, Any] = tomllib.loads(example)
    settings = load_settings(None, environ={}, **data)
    assert settings.server.access_log is False and "access_log" in example
    assert settings.admin.csv_max_rows == 100_000
    assert settings.catalogue["alias_presets"] == ["claude-code"]
    assert settings.catalogue["claude_tiers"] == {"opus": "opus", "sonnet": "sonnet", "haiku": "haiku"}


def test_the_readme_claude_code_block_sets_only_the_two_variables() -> None:
    (block,) = _blocks("sh", _section("**Claude Code**"))[:1]
    exported = re.findall(r"^export (\w+)=", block, re.MULTILINE)
    assert exported == ["ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"]


@pytest.fixture(scope="module")
def unconfigured_gateway(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with running_gateway(tmp_path_factory.mktemp("claude-code") / "data") as server:
        yield server


@pytest.mark.parametrize(("model", "canonical"), CLAUDE_CODE_IDS.items())
def test_an_unconfigured_gateway_serves_claude_codes_default_ids(
    unconfigured_gateway: Any, model: str, canonical: str
) -> None:
    account = unconfigured_gateway.account(f"claude-code-{canonical}-{len(model)}")
    key = unconfigured_gateway.key(account, "Pro")
    with anthropic.Anthropic(
        base_url=unconfigured_gateway.base_url, api_key=key.secret, max_retries=0
    ) as client:
        # As Claude Code asks: streamed, max_tokens 128000 (clamped where the model caps lower).
        with client.messages.stream(
            model=model, max_tokens=128000, messages=[{"role": "user", "content": "Hello"}]
        ) as stream:
            message = stream.get_final_message()
        listed = {m.id for m in client.models.list()}
    assert message.model == canonical and message.content
    assert model not in listed and canonical in listed  # Claude ids are never listed


def test_curl_examples_say_where_the_key_comes_from() -> None:
    for block in _blocks("sh"):
        if "$KEY" in block:
            assert re.search(r"^KEY=", block, re.MULTILINE), block
    assert "`KEY` is one of the `sk-cs4-…` keys the first start printed" in README


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_a_json_body_is_served_whatever_its_content_type_says(
    unconfigured_gateway: Any, content_type: str | None
) -> None:
    """The README's promise under the curl example: the content-type is not what decides."""
    assert "read as JSON whatever their `content-type` says" in " ".join(README.split())
    key = unconfigured_gateway.key(unconfigured_gateway.account(f"ctype-{content_type}"), "Basic")
    headers = {"authorization": f"Bearer {key.secret}"}
    if content_type is not None:
        headers["content-type"] = content_type
    url = f"{unconfigured_gateway.base_url}/v1/chat/completions"
    body = b'{"model":"aria-haiku-4.5","messages":[{"role":"user","content":"Hi"}]}'
    assert httpx.post(url, headers=headers, content=body).status_code == 200
    refused = httpx.post(url, headers=headers, content=b"model=aria-haiku-4.5&messages=Hi")
    assert refused.status_code == 400 and refused.json()["error"]["type"] == "invalid_request_error"
