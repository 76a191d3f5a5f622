"""``--cap WINDOW=CREDITS`` and ``--monthly-cap`` on ``keys create/update`` and ``accounts
create/update``, run as real subprocesses against the database of a running gateway, which
follows; hostile values fail with the flag named and change nothing."""

from __future__ import annotations

from tests.admin.test_cli import SECRET, as_json, chat, cli_gateway, modelgate, server_follows
from tests.gateway_server import GatewayServer

__all__ = ["SECRET", "cli_gateway"]  # the module's gateway fixture, shared


def test_key_and_account_caps_by_window(cli_gateway: GatewayServer) -> None:
    account = as_json(
        modelgate(
            cli_gateway, "accounts", "create", "cli-caps", "--credits", "50", "--cap", "week=20",
            "--monthly-cap", "40", "--json",
        )
    )  # fmt: skip
    assert (account["cap_week"], account["cap_month"], account["cap_day"]) == ("20", "40", "none")
    row = as_json(
        modelgate(
            cli_gateway, "keys", "create", "--account", "cli-caps", "--group", "Pro", "--cap", "5h=0.000001",
            "--cap", "day=3", "--json",
        )
    )  # fmt: skip
    assert (row["cap_5h"], row["cap_day"], row["cap_week"]) == ("0.000001", "3", "none")
    key_id, secret = row["id"], row["secret"]
    server_follows(cli_gateway, key_id)
    assert chat(cli_gateway, secret) == 402  # 1 µc in any 5 hours covers no request

    updated = as_json(modelgate(cli_gateway, "keys", "update", key_id, "--cap", "5h=none", "--json"))
    assert (updated["cap_5h"], updated["cap_day"]) == ("none", "3")
    server_follows(cli_gateway, key_id)
    assert chat(cli_gateway, secret) == 200

    changed = as_json(
        modelgate(
            cli_gateway, "accounts", "update", "cli-caps", "--cap", "day=0", "--monthly-cap", "none", "--json"
        )
    )
    assert (changed["cap_day"], changed["cap_week"], changed["cap_month"]) == ("0", "20", "none")
    assert chat(cli_gateway, secret) == 402  # the account's day cap binds all its keys

    for args in (
        ("keys", "update", key_id, "--cap", "month=5"),
        ("keys", "update", key_id, "--cap", "day"),
        ("keys", "update", key_id, "--cap", "day=-1"),
        ("keys", "update", key_id, "--cap", "day=1", "--cap", "day=2"),
        ("keys", "create", "--account", "cli-caps", "--group", "Pro", "--cap", "day=none"),
        ("accounts", "update", "cli-caps", "--cap", "year=5"),
        ("accounts", "update", "cli-caps", "--cap", "month=5", "--monthly-cap", "5"),
    ):
        failed = modelgate(cli_gateway, *args, ok=False)
        assert "cap" in failed.stderr, (args, failed.stderr)
    record = cli_gateway.call(cli_gateway.services.key_records.get_key(key_id))
    assert record is not None and record.window_caps == (None, 3_000_000, None, None)
