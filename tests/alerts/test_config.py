"""``[alerts]`` from the file and the environment: wrong values are refused at start with the key's
dotted path, and a right file gives the webhooks as written."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelgate.config import ConfigError, load_settings

GOOD = """
[alerts]
low_balance_uc = 5000000
cap_levels = [100, 50, 80, 80]

[[alerts.webhooks]]
url = "https://ops.example.com/hook"
secret = "0123456789abcdef"
events = ["balance.low"]
format = "slack"
"""


def test_a_file_with_webhooks_loads(tmp_path: Path) -> None:
    path = tmp_path / "modelgate.toml"
    path.write_text(GOOD)
    settings = load_settings(path, environ={"MODELGATE_ALERTS__RECHECK_SECONDS": "0.5"})
    alerts = settings.alerts
    assert alerts.low_balance_uc == 5_000_000 and alerts.cap_levels == [50, 80, 100]
    assert alerts.recheck_seconds == 0.5
    (hook,) = alerts.webhooks
    assert (hook.url, hook.events, hook.format) == ("https://ops.example.com/hook", ["balance.low"], "slack")


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('[[alerts.webhooks]]\nurl = "ftp://x"\nsecret = "0123456789abcdef"', r"alerts\.webhooks\.0\.url"),
        ('[[alerts.webhooks]]\nurl = "https://x"\nsecret = "short"', r"alerts\.webhooks\.0\.secret"),
        (
            '[[alerts.webhooks]]\nurl = "https://x"\nsecret = "0123456789abcdef"\nevents = ["key.lost"]',
            r"alerts\.webhooks\.0\.events",
        ),
        (
            '[[alerts.webhooks]]\nurl = "https://x"\nsecret = "0123456789abcdef"\nformat = "teams"',
            r"alerts\.webhooks\.0\.format",
        ),
        ("[alerts]\ncap_levels = [0]", r"alerts\.cap_levels"),
        ("[alerts]\nlow_balance_uc = -1", r"alerts\.low_balance_uc"),
        ("[alerts]\nqueue_size = 0", r"alerts\.queue_size"),
        ("[alerts]\nretries = 3", r"alerts\.retries"),
    ],
)
def test_wrong_values_are_refused_naming_the_key(tmp_path: Path, text: str, named: str) -> None:
    path = tmp_path / "modelgate.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=named):
        load_settings(path, environ={})
