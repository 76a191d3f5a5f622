"""``[usage]`` settings: from the file and the environment, validated with the key's name; a
gateway with a retention runs the usage sweeper, one without does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelgate.config import ConfigError, load_settings
from tests.gateway_server import running_gateway


def test_usage_settings_from_the_file_and_the_environment(tmp_path: Path) -> None:
    assert load_settings(None, environ={}).usage.retention_days == 0
    config = tmp_path / "modelgate.toml"
    config.write_text("[usage]\nretention_days = 90\nretention_batch = 500\n")
    usage = load_settings(config, environ={}).usage
    assert (usage.retention_days, usage.retention_batch, usage.retention_interval_seconds) == (
        90,
        500,
        3600.0,
    )
    env = {"MODELGATE_USAGE__RETENTION_DAYS": "30"}
    assert load_settings(config, environ=env).usage.retention_days == 30
    for bad, key in (("retention_days = -1", "retention_days"), ("retention_batch = 0", "retention_batch")):
        config.write_text(f"[usage]\n{bad}\n")
        with pytest.raises(ConfigError, match=rf"usage\.{key}"):
            load_settings(config, environ={})


def test_the_usage_sweeper_runs_only_with_a_retention(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "off") as gateway:
        assert gateway.services.usage_sweeper is None
    with running_gateway(tmp_path / "on", usage={"retention_days": 7}) as gateway:
        sweeper = gateway.services.usage_sweeper
        assert sweeper is not None
        assert gateway.call(sweeper.sweep()) == 0
