"""What a Chat or Responses client that names no output limit gets asked upstream (issue #35
item 2): the model's output limit (32,000 on nova-*) unless the catalogue entry sets
``default_max_tokens``, and a deployment's own ``default_max_tokens`` wins for that deployment.
Asserted on the bodies a fake openai-compatible upstream (a vLLM stand-in) and a fake OpenAI
upstream received."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from modelgate.config import ConfigError
from modelgate.formats import CODECS, ClientRequest
from modelgate.gateway.output_tokens import attempt_max_tokens, held_default
from modelgate.upstream.base import Deployment
from tests.fakes.upstream import FakeUpstream, RecordedRequest
from tests.gateway_server import GatewayServer, make_settings, running_gateway
from tests.loop_thread import LoopThread

PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses"}


@pytest.fixture(scope="module")
def fakes() -> Iterator[tuple[FakeUpstream, FakeUpstream]]:
    loop = LoopThread("default-max-tokens")
    try:
        yield loop.start(FakeUpstream()), loop.start(FakeUpstream())
    finally:
        loop.close()


def _providers(vllm: FakeUpstream, openai: FakeUpstream) -> list[dict[str, Any]]:
    return [
        {"name": "simulator", "kind": "simulator"},
        {"name": "vllm", "kind": "openai-compatible", "base_url": vllm.base_url + "/v1"},
        {"name": "openai", "kind": "openai", "base_url": openai.base_url, "api_key_env": "K"},
    ]


def _ask(gateway: GatewayServer, fmt: str, model: str, limit: int | None = None) -> None:
    secret = gateway.key(gateway.account(f"acct-{fmt}-{model}-{limit}"), "Nova", rpm=1000).secret
    body: dict[str, Any] = {"model": model}
    if fmt == "chat":
        body["messages"] = [{"role": "user", "content": "Hello"}]
        if limit is not None:
            body["max_tokens"] = limit
    else:
        body["input"] = "Hello"
        if limit is not None:
            body["max_output_tokens"] = limit
    response = httpx.post(
        f"{gateway.base_url}{PATHS[fmt]}",
        json=body,
        headers={"authorization": f"Bearer {secret}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text


def _limit_sent(request: RecordedRequest) -> Any:
    body = request.json()
    fields = ("max_tokens", "max_completion_tokens", "max_output_tokens")
    return {f: body[f] for f in fields if f in body}


def test_without_settings_the_models_output_limit_is_asked(
    fakes: tuple[FakeUpstream, FakeUpstream], tmp_path: Path
) -> None:
    vllm, openai = fakes
    deployments = {"nova-5.5": [{"provider": "vllm", "upstream_model": "qwen"}]}
    with running_gateway(
        tmp_path / "data", env={"K": "sk-x"}, providers=_providers(vllm, openai), deployments=deployments
    ) as gateway:
        _ask(gateway, "chat", "nova-5.5")
        assert _limit_sent(vllm.requests[-1]) == {"max_tokens": 32000}


def test_the_catalogue_entry_sets_the_default(
    fakes: tuple[FakeUpstream, FakeUpstream], tmp_path: Path
) -> None:
    vllm, openai = fakes
    deployments = {
        "nova-5.5": [{"provider": "vllm", "upstream_model": "qwen"}],
        "nova-6-sol": [{"provider": "openai", "upstream_model": "gpt-x"}],
    }
    catalogue = {
        "models": {"nova-5.5": {"default_max_tokens": 4096}, "nova-6-sol": {"default_max_tokens": 2048}}
    }
    with running_gateway(
        tmp_path / "data",
        env={"K": "sk-x"},
        providers=_providers(vllm, openai),
        deployments=deployments,
        catalogue=catalogue,
    ) as gateway:
        _ask(gateway, "chat", "nova-5.5")
        assert _limit_sent(vllm.requests[-1]) == {"max_tokens": 4096}
        _ask(gateway, "responses", "nova-5.5")  # translated to Chat for the vLLM server
        assert _limit_sent(vllm.requests[-1]) == {"max_completion_tokens": 4096}
        _ask(gateway, "chat", "nova-6-sol")
        assert _limit_sent(openai.requests[-1]) == {"max_completion_tokens": 2048}
        _ask(gateway, "responses", "nova-6-sol")
        assert _limit_sent(openai.requests[-1]) == {"max_output_tokens": 2048}
        # A limit the client names is sent as named.
        _ask(gateway, "chat", "nova-5.5", limit=9000)
        assert _limit_sent(vllm.requests[-1]) == {"max_tokens": 9000}


def test_a_deployment_sets_its_own_default(fakes: tuple[FakeUpstream, FakeUpstream], tmp_path: Path) -> None:
    vllm, openai = fakes
    deployments = {"nova-5.5": [{"provider": "vllm", "upstream_model": "qwen", "default_max_tokens": 1000}]}
    catalogue = {"models": {"nova-5.5": {"default_max_tokens": 4096}}}
    with running_gateway(
        tmp_path / "data",
        env={"K": "sk-x"},
        providers=_providers(vllm, openai),
        deployments=deployments,
        catalogue=catalogue,
    ) as gateway:
        _ask(gateway, "chat", "nova-5.5")
        assert _limit_sent(vllm.requests[-1]) == {"max_tokens": 1000}
        _ask(gateway, "responses", "nova-5.5")
        assert _limit_sent(vllm.requests[-1]) == {"max_completion_tokens": 1000}
        _ask(gateway, "chat", "nova-5.5", limit=3000)
        assert _limit_sent(vllm.requests[-1]) == {"max_tokens": 3000}


def test_the_hold_covers_the_largest_default_and_each_deployment_gets_its_own(tmp_path: Path) -> None:
    catalogue = {"models": {"nova-5.5": {"default_max_tokens": 4096}}}
    with running_gateway(tmp_path / "data", catalogue=catalogue) as gateway:
        model = gateway.services.catalogue.models["nova-5.5"]
    short, plain, big = Deployment("a", "m", 1, 1000), Deployment("b", "m"), Deployment("c", "m", 1, 10**9)
    assert held_default(model, [short]) == 1000
    assert held_default(model, [short, plain]) == 4096
    assert held_default(model, [short, big]) == model.output_limit == 32000
    omitted = ClientRequest(CODECS["chat"], {"model": "nova-5.5", "messages": []}, "nova-5.5")
    named = ClientRequest(
        CODECS["chat"], {"model": "nova-5.5", "messages": [], "max_tokens": 5000}, "nova-5.5"
    )
    assert attempt_max_tokens(model, short, 4096, omitted) == 1000
    assert attempt_max_tokens(model, plain, 4096, omitted) == 4096
    assert attempt_max_tokens(model, short, 300, omitted) == 300  # the hold afforded less
    assert attempt_max_tokens(model, short, 5000, named) == 5000  # the client's own limit
    # The deployment default does not split health state: same provider and model, same breaker.
    assert short == Deployment("a", "m", 1) and hash(short) == hash(Deployment("a", "m", 1))


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"catalogue": {"models": {"nova-5.5": {"default_max_tokens": 0}}}}, "nova-5.5.default_max_tokens"),
        ({"catalogue": {"models": {"nova-5.5": {"default_max_tokens": "many"}}}}, "default_max_tokens"),
        (
            {
                "deployments": {
                    "nova-5.5": [{"provider": "simulator", "upstream_model": "x", "default_max_tokens": 0}]
                }
            },
            "default_max_tokens",
        ),
    ],
)
def test_a_bad_default_is_a_clear_config_error(tmp_path: Path, overrides: dict[str, Any], says: str) -> None:
    with pytest.raises((ConfigError, ValueError), match=says):
        make_settings(tmp_path, **overrides)
        with running_gateway(tmp_path / "data", **overrides):
            pass


def test_the_documented_snippet_is_a_valid_configuration(tmp_path: Path) -> None:
    """docs/upstreams.md's example, with the vllm provider it names, loads and does what it says."""
    import tomllib

    from modelgate.catalogue import build_catalogue
    from modelgate.config import load_settings
    from modelgate.gateway.output_tokens import deployment_default
    from modelgate.services import deployments_of

    text = (Path(__file__).parents[2] / "docs" / "upstreams.md").read_text("utf-8")
    section = text[text.index("### Output tokens asked when the client names no limit") :]
    snippet = section[
        section.index("```toml") + len("```toml") : section.index("```", section.index("```toml") + 7)
    ]
    provider = '[[providers]]\nname = "vllm"\nkind = "openai-compatible"\nbase_url = "http://127.0.0.1:9"\n'
    path = tmp_path / "modelgate.toml"
    path.write_text('default_provider = ""\n' + provider + snippet, "utf-8")
    settings = load_settings(path, environ={}, data_dir=tmp_path)
    assert tomllib.loads(snippet)["catalogue"]["models"]["nova-5.5"]["default_max_tokens"] == 8192
    catalogue = build_catalogue(settings.catalogue)
    model = catalogue.models["nova-5.5"]
    (deployment,) = deployments_of(settings, catalogue)["nova-5.5"]
    assert (deployment_default(model, deployment), model.omitted_max_tokens) == (4096, 8192)
