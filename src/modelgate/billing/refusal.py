"""What a 402 says: the request's worst-case cost (its hold), what is left of the binding limit,
and what would make the request fit.

The ledger lowers ``max_tokens`` by itself to what is affordable, so a request is refused only
when not even its input bound plus one output token fits; the message says both figures, because
a client that asked for a large ``max_tokens`` sees the full worst case first. The levers named
are the ones that lower the hold: a shorter prompt (text, images, documents, tools), fewer web
searches when the request offers a search tool, a smaller ``max_tokens``; then the operator's
(raise the cap, top up the account).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from modelgate import errors
from modelgate.storage.base import Refusal
from modelgate.telemetry.metrics import Metrics

CODES = {
    "monthly_cap": "monthly_cap_reached",
    "balance": "insufficient_balance",
    "cap_5h": "cap_5h_reached",
    "cap_day": "cap_day_reached",
    "cap_week": "cap_week_reached",
}
#: ``x-modelgate-limit`` of a refusal by a spend cap (none for the balance).
LIMITS = {"monthly_cap": "cap-month", "cap_5h": "cap-5h", "cap_day": "cap-day", "cap_week": "cap-week"}
#: What is left, in words, of each cap (the key's or its account's: the refusal does not say which).
_LEFT = {
    "monthly_cap": ("monthly credit cap has {} left this UTC month", "monthly cap"),
    "cap_5h": ("credit cap over any 5 hours has {} left now", "5-hour cap"),
    "cap_day": ("daily credit cap has {} left this UTC day", "daily cap"),
    "cap_week": ("weekly credit cap has {} left this UTC week", "weekly cap"),
}


@dataclass(frozen=True, slots=True)
class HoldRefused(Refusal):
    """A refusal with the figures of the hold that did not fit (``available_uc``: what is left
    of the binding limit, the cap's in its month or the balance not held by requests in flight)."""

    #: The worst case as asked: input bound and ``max_tokens`` (and web searches) at full price.
    amount_uc: int
    #: The least that still lets the request run: input bound, searches and one output token.
    minimum_uc: int
    input_bound: int
    max_tokens: int
    web_searches: int = 0


def credits(micro: int) -> str:
    """µc as credits without trailing zeros (1 credit = 1,000,000 µc)."""
    text = f"{Decimal(micro) / 1_000_000:.6f}".rstrip("0").rstrip(".")
    return text or "0"


def _money(micro: int) -> str:
    return f"{micro:,} µc ({credits(micro)} credits)"


def refusal_message(refusal: Refusal) -> tuple[str, str]:
    """(message, code) of the 402 answering ``refusal``, in words for the client developer."""
    code = CODES[refusal.reason]
    if refusal.reason in _LEFT:
        what, cap = _LEFT[refusal.reason]
        left = "this key's (or its account's) " + what.format(_money(refusal.available_uc))
        operator = f"wait for the window to free credit, or ask an operator to raise the key's {cap} (or its account's)"
    else:
        left = f"the account's credit balance has {_money(refusal.available_uc)} free"
        operator = "or top up the account"
    if not isinstance(refusal, HoldRefused):
        return f"not enough credit for this request: {left}", code
    searches = f" and {refusal.web_searches} web searches" if refusal.web_searches else ""
    levers = "a shorter prompt (fewer or shorter messages, images, documents or tools)"
    if refusal.web_searches:
        levers += " or a lower max_uses on the web search tool"
    return (
        f"this request's worst-case cost is {_money(refusal.amount_uc)} (up to "
        f"{refusal.input_bound:,} input tokens, max_tokens {refusal.max_tokens:,}{searches}); even "
        f"with max_tokens lowered to 1 it needs {_money(refusal.minimum_uc)}, but {left}. "
        f"A smaller max_tokens alone does not help (the gateway already lowers it to what is "
        f"affordable when that is enough): send {levers}, {operator}",
        code,
    )


def refused(refusal: Refusal, metrics: Metrics) -> errors.BillingRefused:
    """The 402 answering ``refusal`` (never retried: ``x-should-retry: false``), counted."""
    message, code = refusal_message(refusal)
    metrics.billing_refused(code)
    return errors.BillingRefused(message, code=code, headers={"x-should-retry": "false"})
