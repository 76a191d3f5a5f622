"""``responses.keep_after_answer``: when a stored answer may be written after it is sent. ``auto``
allows it only where no other process can be asked for the response first (one process on
SQLite); the value is checked when the configuration loads, from the file or the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelgate.config import ConfigError, load_settings
from modelgate.gateway.state.keep import after_answer


def settings_of(tmp_path: Path, **environ: str) -> bool:
    env = {"MODELGATE_DATA_DIR": str(tmp_path), **{f"MODELGATE_{k.upper()}": v for k, v in environ.items()}}
    return after_answer(load_settings(environ=env))


def test_auto_writes_after_the_answer_only_for_one_process_on_sqlite(tmp_path: Path) -> None:
    assert settings_of(tmp_path)
    assert settings_of(tmp_path, database_url=f"sqlite:///{tmp_path}/other.db")
    assert not settings_of(tmp_path, server__workers="2")
    assert not settings_of(tmp_path, database_url="postgresql://gateway@db.internal/modelgate")


def test_on_and_off_are_taken_as_they_are(tmp_path: Path) -> None:
    postgres = "postgresql://gateway@db.internal/modelgate"
    assert settings_of(tmp_path, responses__keep_after_answer="on", database_url=postgres)
    assert settings_of(tmp_path, responses__keep_after_answer="on", server__workers="4")
    assert not settings_of(tmp_path, responses__keep_after_answer="off")


def test_another_value_is_refused_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"responses\.keep_after_answer"):
        settings_of(tmp_path, responses__keep_after_answer="sometimes")


def test_the_batch_window_is_checked(tmp_path: Path) -> None:
    env = {"MODELGATE_DATA_DIR": str(tmp_path), "MODELGATE_RESPONSES__KEEP_BATCH_SECONDS": "0.05"}
    assert load_settings(environ=env).responses.keep_batch_seconds == 0.05
    for bad in ("-1", "5"):
        env["MODELGATE_RESPONSES__KEEP_BATCH_SECONDS"] = bad
        with pytest.raises(ConfigError, match=r"responses\.keep_batch_seconds"):
            load_settings(environ=env)
