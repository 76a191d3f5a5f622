"""Provider kinds as models: the configuration file's errors name the file's own keys, and each
kind's facts come from its model (upstream.kinds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelgate.config import ConfigError, load_settings
from modelgate.upstream.config import parse_provider, validate_upstreams
from modelgate.upstream.kinds import KINDS
from modelgate.upstream.kinds.anthropic import AnthropicConfig
from modelgate.upstream.kinds.bedrock import BedrockConfig
from modelgate.upstream.kinds.simulator import SimulatorProviderConfig


def _load(tmp_path: Path, providers_toml: str) -> None:
    config = tmp_path / "modelgate.toml"
    config.write_text('default_provider = ""\n' + providers_toml)
    load_settings(config, environ={})


def test_an_unknown_or_missing_kind_names_the_kinds_there_are(tmp_path: Path) -> None:
    expected = "'anthropic', 'openai', 'openai-compatible', 'bedrock', 'vertex', 'azure-openai', 'simulator'"
    with pytest.raises(ConfigError) as unknown:
        _load(tmp_path, '[[providers]]\nname = "g"\nkind = "gemini"\n')
    assert f"providers.0: kind: Input should be one of {expected}" in str(unknown.value)
    with pytest.raises(ConfigError) as missing:
        _load(tmp_path, '[[providers]]\nname = "g"\n')
    assert f"providers.0: kind: Field required (one of {expected})" in str(missing.value)


def test_errors_inside_a_provider_are_located_as_the_file_spells_them(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as typo:
        _load(tmp_path, '[[providers]]\nname = "a"\nkind = "anthropic"\napi_key = "K"\n')
    assert "providers.0.api_key: Extra inputs are not permitted" in str(typo.value)
    with pytest.raises(ConfigError) as bad:
        _load(tmp_path, '[[providers]]\nname = "b"\nkind = "bedrock"\nanthropic_version = 3\n')
    assert "providers.0.anthropic_version: Input should be a valid string" in str(bad.value)


def test_a_key_of_another_kind_is_named_with_the_kinds_that_take_it(tmp_path: Path) -> None:
    config = tmp_path / "modelgate.toml"
    config.write_text(
        'default_provider = ""\n[[providers]]\nname = "z"\nkind = "openai-compatible"\n'
        'base_url = "http://h"\nentra_id = true\n'
    )
    settings = load_settings(config, environ={})
    with pytest.raises(
        ValueError, match=r"providers\[0\] \('z'\)\.entra_id: only for kind\(s\) azure-openai$"
    ):
        validate_upstreams(settings.providers, {}, {})
    vertex_only = parse_provider({"name": "a", "kind": "anthropic", "api_key_env": "K", "project": "p"})
    with pytest.raises(ValueError, match=r"\('a'\)\.project: only for kind\(s\) vertex$"):
        validate_upstreams([vertex_only], {}, {"K": "sk-ant-0123456789"})


def test_each_entry_is_its_kinds_model_with_its_kinds_facts() -> None:
    anthropic = parse_provider({"name": "a", "kind": "anthropic"})
    assert isinstance(anthropic, AnthropicConfig)
    assert anthropic.resolved_base_url() == "https://api.anthropic.com" and anthropic.key_required
    bedrock = parse_provider({"name": "b", "kind": "bedrock", "region": "cn-north-1"})
    assert isinstance(bedrock, BedrockConfig)
    assert bedrock.resolved_base_url() == "https://bedrock-runtime.cn-north-1.amazonaws.com.cn"
    assert (bedrock.extra, bedrock.genai_provider, bedrock.runs_hosted_tools) == (
        ("bedrock", "botocore"),
        "aws.bedrock",
        False,
    )
    openai = parse_provider({"name": "o", "kind": "openai", "responses_state": "gateway"})
    assert openai.stores_responses and not openai.keeps_responses
    compatible = parse_provider({"name": "c", "kind": "openai-compatible", "base_url": "http://h"})
    assert not compatible.stores_responses and compatible.genai_provider == "openai-compatible"
    assert isinstance(parse_provider({"name": "s", "kind": "simulator"}), SimulatorProviderConfig)
    assert list(KINDS) == [
        "anthropic",
        "openai",
        "openai-compatible",
        "bedrock",
        "vertex",
        "azure-openai",
        "simulator",
    ]
