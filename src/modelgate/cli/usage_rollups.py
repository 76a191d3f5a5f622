"""``modelgate usage rebuild-rollups``: recompute the usage rollups from the usage records.

The rollups are kept on every write, so this is needed only after records were changed by hand,
restored from a backup, or to make the rollups forget what retention deleted. It runs in one
transaction that holds ledger writes back while it works (seconds per million records), so run
it at a quiet time; a running gateway keeps serving and its settlements wait, then go on.
"""

from __future__ import annotations

from modelgate.cli.context import (
    ConfigOpt,
    DataDirOpt,
    JsonOpt,
    Options,
    Repositories,
    emit_one,
    with_repositories,
)
from modelgate.management import Management


def rebuild_rollups_command(
    config: ConfigOpt = None, data_dir: DataDirOpt = None, json: JsonOpt = False
) -> None:
    """Recompute the usage rollups (reports' totals, daily charts, top keys) from the records."""
    options = Options(config, data_dir, json)

    async def work(_: Management, r: Repositories) -> int:
        return await r.usage.rebuild_rollups()

    rows = with_repositories(options, work)
    emit_one(options, {"rollup_rows": rows}, f"rebuilt the usage rollups: {rows} key rollup rows")
