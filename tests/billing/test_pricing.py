"""Prices per token kind, the rounding rule, and the worst-case bound the ledger reserves."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from modelgate.billing.pricing import (
    affordable_output_tokens,
    bound_uc,
    cost_uc,
    input_tokens_bound,
    worst_input_rate,
)
from modelgate.catalogue import Price, build_catalogue
from modelgate.ir import Usage

# aria-sonnet-4.6: 3 / 15 / 3.75 / 0.3 credits per million tokens, in µc per million tokens.
SONNET = Price(input=3_000_000, output=15_000_000, cache_write=3_750_000, cache_read=300_000)
prices = st.builds(
    Price,
    input=st.integers(0, 50_000_000),
    output=st.integers(0, 200_000_000),
    cache_write=st.integers(0, 60_000_000),
    cache_read=st.integers(0, 10_000_000),
)


def test_catalogue_prices_are_integer_micro_credits_per_million_tokens() -> None:
    catalogue = build_catalogue()
    assert catalogue.models["aria-sonnet-4.6"].price == SONNET
    assert catalogue.models["nova-5.5"].price == Price(1_250_000, 10_000_000, 1_250_000, 125_000)


def test_each_token_kind_is_priced_and_the_sum_is_rounded_up_once() -> None:
    usage = Usage(
        input_tokens=1000, output_tokens=200, cache_creation_input_tokens=400, cache_read_input_tokens=5000
    )
    # 1000×3 + 200×15 + 400×3.75 + 5000×0.3 = 3000 + 3000 + 1500 + 1500 µc, exactly.
    assert cost_uc(usage, SONNET) == 9000
    # One input token of sonnet is 3 µc; one cache-read token is 0.3 µc: rounded UP to 1.
    assert cost_uc(Usage(cache_read_input_tokens=1), SONNET) == 1
    # Rounded once per request, not per kind: 3 × 0.3 = 0.9 -> 1, not 3 × 1.
    assert cost_uc(Usage(cache_read_input_tokens=3), SONNET) == 1
    assert cost_uc(Usage(cache_read_input_tokens=4), SONNET) == 2  # 1.2 -> 2
    assert cost_uc(Usage(), SONNET) == 0


@given(
    prices,
    st.integers(0, 10**6),
    st.integers(0, 10**5),
    st.integers(0, 10**6),
    st.integers(0, 10**6),
)
def test_cost_is_the_exact_sum_rounded_up_to_one_micro_credit(
    price: Price, inp: int, out: int, cw: int, cr: int
) -> None:
    exact = inp * price.input + out * price.output + cw * price.cache_write + cr * price.cache_read
    cost = cost_uc(Usage(inp, out, cw, cr), price)
    assert cost * 1_000_000 >= exact > (cost - 1) * 1_000_000 or (exact == 0 and cost == 0)


@given(prices, st.integers(0, 10**6), st.integers(0, 10**5), st.data())
def test_the_bound_covers_every_usage_within_it(
    price: Price, in_bound: int, max_tokens: int, data: st.DataObject
) -> None:
    """Any split of at most ``in_bound`` input tokens over input/cache kinds, and any output up to
    ``max_tokens``, costs no more than the reserved bound: overshoot is exactly zero."""
    cw = data.draw(st.integers(0, in_bound))
    cr = data.draw(st.integers(0, in_bound - cw))
    inp = data.draw(st.integers(0, in_bound - cw - cr))
    out = data.draw(st.integers(0, max_tokens))
    assert cost_uc(Usage(inp, out, cw, cr), price) <= bound_uc(in_bound, max_tokens, price)


@given(prices.filter(lambda p: p.output > 0), st.integers(0, 10**5), st.integers(0, 10**7))
def test_affordable_output_is_the_largest_that_fits(price: Price, in_bound: int, granted: int) -> None:
    n = affordable_output_tokens(granted, in_bound, price)
    if in_bound * worst_input_rate(price) > granted * 1_000_000:
        assert n == 0
        return
    assert bound_uc(in_bound, n, price) <= granted
    # Maximal: one more output token's exact worst case no longer fits in the grant.
    assert in_bound * worst_input_rate(price) + (n + 1) * price.output > granted * 1_000_000


def test_input_bound_counts_body_bytes_overhead_and_image_urls() -> None:
    assert input_tokens_bound(1000, 0, 1024, 1600) == 2024
    assert input_tokens_bound(1000, 2, 1024, 1600) == 5224
