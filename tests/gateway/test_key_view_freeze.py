"""Many keys loaded at start, or taken up later by the view's polls, are frozen out of the cyclic
garbage collector (``KeyView._freeze_if_grown``), so a full collection does not walk them while
requests wait. Run in a process of its own: a freeze is
process-wide and must not reach the test session."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import asyncio, gc, sys
from pathlib import Path
from modelgate.auth import KeyView
from modelgate.keys import Digester
from tests.whole_store import SqliteStore
from tests.gateway.test_key_view_scale import write_keys

async def main(folder: Path, keys: int, freeze_at: int, later: int) -> None:
    store = SqliteStore(folder / "freeze.db")
    await store.migrate()
    account = await store.create_account("freeze", 0, 0.0)
    write_keys(folder / "freeze.db", account.id, keys)
    view = KeyView(store, Digester(b"s" * 32))
    await view.start(60.0, freeze_at=freeze_at)
    out = [len(view), gc.get_freeze_count() > 0]
    if later:
        write_keys(folder / "freeze.db", account.id, later, first=keys)
        await view.refresh()  # what the running view's next poll does
        out += [len(view), gc.get_freeze_count() > 0]
    print(*out)
    await view.stop()
    await store.close()

asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
"""


def start_view(folder: Path, keys: int, freeze_at: int, later: int = 0) -> str:
    folder.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(folder), str(keys), str(freeze_at), str(later)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=Path(__file__).parents[2],
    )
    return done.stdout.strip()


def test_many_keys_at_start_are_frozen_and_few_are_not(tmp_path: Path) -> None:
    assert start_view(tmp_path / "many", 12_000, 10_000) == "12000 True"
    assert start_view(tmp_path / "few", 500, 10_000) == "500 False"


def test_many_keys_taken_up_by_polls_are_frozen_and_few_are_not(tmp_path: Path) -> None:
    # Keys bulk-created while the gateway serves: the poll that takes the growth past the step
    # freezes; a smaller growth does not.
    assert start_view(tmp_path / "grown", 500, 10_000, later=12_000) == "500 False 12500 True"
    assert start_view(tmp_path / "small", 500, 10_000, later=2_000) == "500 False 2500 False"
