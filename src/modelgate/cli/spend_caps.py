"""``--cap WINDOW=CREDITS`` (repeatable) on ``keys create/update`` and ``accounts create/update``:
spend caps by window beside the month's (``storage.spend_windows``)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from modelgate.cli.context import fail
from modelgate.management import ManagementError, format_credits, parse_credits
from modelgate.storage.spend_windows import WINDOWS, Window

CapOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--cap",
        help="A spend cap by window, WINDOW=CREDITS (repeatable): 5h (rolling), day (UTC), week "
        "(UTC ISO week); on accounts also month. CREDITS 'none' removes it (update only).",
    ),
]


def parse_caps(
    values: list[str] | None, windows: tuple[Window, ...], *, clearable: bool
) -> dict[Window, int]:
    """The ``--cap`` values by window, in µc (``-1``: remove it)."""
    caps: dict[Window, int] = {}
    for value in values or []:
        name, sep, amount = value.partition("=")
        window = next((w for w in windows if w == name.strip().lower()), None)
        if not sep or window is None:
            fail(f"--cap: {value[:40]!r} is not WINDOW=CREDITS with WINDOW one of {', '.join(windows)}")
        if window in caps:
            fail(f"--cap: {window} given twice")
        if clearable and amount.strip().lower() == "none":
            caps[window] = -1
            continue
        try:
            caps[window] = parse_credits(amount, f"--cap {window}")
        except ManagementError as exc:
            fail(str(exc))
    return caps


def caps_row(caps: tuple[int | None, ...]) -> dict[str, Any]:
    """``cap_5h``, ``cap_day``, ``cap_week`` (and ``cap_month`` when given) columns: credits, or ``none``."""
    return {
        f"cap_{w}": "none" if c is None else format_credits(c) for w, c in zip(WINDOWS, caps, strict=False)
    }
