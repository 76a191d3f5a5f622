from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.resilience.routes import Env, routed_gateway


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """One routed gateway per test module (its fake is rescripted by each test)."""
    with routed_gateway(Path(tmp_path_factory.mktemp("routes")) / "data") as gateway_env:
        yield gateway_env
