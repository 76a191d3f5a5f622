"""The gateway's own response headers.

Money headers are integer micro-credits (µc; 1 credit = 1,000,000 µc), documented in the README:
- ``x-modelgate-credits-charged``: what this request cost (whole responses only; a stream's cost
  is not known before its body ends, see the usage API);
- ``x-modelgate-cap-remaining``: what the key may still spend this UTC month (absent: no cap);
- ``x-modelgate-balance-remaining``: the account balance not held by requests in flight.

``x-modelgate-dropped-tools`` lists (comma-separated, as the client spelled their types) the
hosted tools a translated request offered and its upstream cannot run, which were dropped.
"""

from __future__ import annotations

MAX_TOKENS_CLAMPED = "x-modelgate-max-tokens-clamped"
CHARGED = "x-modelgate-credits-charged"
CAP_REMAINING = "x-modelgate-cap-remaining"
BALANCE_REMAINING = "x-modelgate-balance-remaining"
DROPPED_TOOLS = "x-modelgate-dropped-tools"
#: On a refusal by one of a key's limits: which (rpm, tpm, concurrency, cap-month).
LIMIT = "x-modelgate-limit"


def money_headers(charged: int | None, cap_remaining: int | None, balance: int) -> dict[str, str]:
    out = {BALANCE_REMAINING: str(balance)}
    if charged is not None:
        out[CHARGED] = str(charged)
    if cap_remaining is not None:
        out[CAP_REMAINING] = str(cap_remaining)
    return out


#: The IETF draft RateLimit fields (``gateway.limit_tickets``).
RATELIMIT = "ratelimit"
RATELIMIT_POLICY = "ratelimit-policy"
