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

# aria-sonnet-4.6: 3 / 15 / 3.75 / 0.3 credits per million tokens, 1-hour cache writes at 6, in µc
# per million tokens; web searches at 10 credits per 1,000, in µc per million requests.
SONNET = Price(
    input=3_000_000,
    output=15_000_000,
    cache_write=3_750_000,
    cache_read=300_000,
    cache_write_1h=6_000_000,
    web_search_request=10_000_000_000,
)
prices = st.builds(
    Price,
    input=st.integers(0, 50_000_000),
    output=st.integers(0, 200_000_000),
    cache_write=st.integers(0, 60_000_000),
    cache_read=st.integers(0, 10_000_000),
    cache_write_1h=st.integers(0, 100_000_000),
    web_search_request=st.integers(0, 50_000_000_000),
)


def test_catalogue_prices_are_integer_micro_credits_per_million_tokens() -> None:
    catalogue = build_catalogue()
    assert catalogue.models["aria-sonnet-4.6"].price == SONNET
    assert catalogue.models["nova-5.5"].price == Price(
        1_250_000, 10_000_000, 1_250_000, 125_000, 2_500_000, 10_000_000_000
    )


def test_new_price_fields_default_and_override() -> None:
    """``cache_write_1h`` defaults to twice the input price; ``web_search_request`` (credits per
    1,000 requests) to 10; both may be set, to six decimals of a credit."""
    catalogue = build_catalogue(
        {
            "models": {
                "aria-custom-1": {"price": {"input": 0.25, "output": 1}},
                "aria-custom-2": {
                    "price": {"input": 1, "output": 2, "cache_write_1h": 1.5, "web_search_request": 0.000001}
                },
            }
        }
    )
    custom = catalogue.models["aria-custom-1"].price
    assert (custom.cache_write_1h, custom.web_search_request) == (500_000, 10_000_000_000)
    custom = catalogue.models["aria-custom-2"].price
    # 0.000001 credits per 1,000 requests = 1 µc per 1,000 = 1,000 µc per million requests.
    assert (custom.cache_write_1h, custom.web_search_request) == (1_500_000, 1_000)


def test_web_searches_one_hour_writes_and_iterations_share_one_rounding() -> None:
    usage = Usage(
        input_tokens=100,
        output_tokens=10,
        cache_creation_input_tokens=1000,
        cache_write_1h_input_tokens=600,
        web_search_requests=3,
    )
    # 100×3 + 10×15 + 400×3.75 + 600×6 µc + 3 searches × 10,000 µc (10 credits per 1,000).
    assert cost_uc(usage, SONNET) == 300 + 150 + 1500 + 3600 + 30_000
    # A price with a fraction of a µc per search: 1 search at 0.0015 credits per 1,000 is 1.5 µc,
    # plus one sonnet cache-read token (0.3 µc): 1.8 µc, rounded up once to 2.
    cheap = Price(3_000_000, 15_000_000, 3_750_000, 300_000, 6_000_000, 1_500_000)
    assert cost_uc(Usage(cache_read_input_tokens=1, web_search_requests=1), cheap) == 2
    # 1-hour writes beyond all writes cannot be billed twice: they are a part of the writes.
    assert cost_uc(Usage(cache_creation_input_tokens=10, cache_write_1h_input_tokens=50), SONNET) == 60


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


@given(prices, st.integers(0, 10**6), st.integers(0, 10**5), st.integers(0, 10**6), st.data())
def test_cost_is_the_exact_sum_rounded_up_to_one_micro_credit(
    price: Price, inp: int, out: int, cw: int, data: st.DataObject
) -> None:
    cr = data.draw(st.integers(0, 10**6))
    cw_1h = data.draw(st.integers(0, cw))
    searches = data.draw(st.integers(0, 1000))
    exact = (
        inp * price.input
        + out * price.output
        + (cw - cw_1h) * price.cache_write
        + cw_1h * price.cache_write_1h
        + cr * price.cache_read
        + searches * price.web_search_request
    )
    cost = cost_uc(Usage(inp, out, cw, cr, 0, cw_1h, searches), price)
    assert cost * 1_000_000 >= exact > (cost - 1) * 1_000_000 or (exact == 0 and cost == 0)


@given(prices, st.integers(0, 10**6), st.integers(0, 10**5), st.integers(0, 100), st.data())
def test_the_bound_covers_every_usage_within_it(
    price: Price, in_bound: int, max_tokens: int, max_searches: int, data: st.DataObject
) -> None:
    """Any split of at most ``in_bound`` input tokens over input/cache kinds (1-hour writes
    included), any output up to ``max_tokens`` and up to ``max_searches`` web searches cost no
    more than the reserved bound: overshoot is exactly zero."""
    cw = data.draw(st.integers(0, in_bound))
    cw_1h = data.draw(st.integers(0, cw))
    cr = data.draw(st.integers(0, in_bound - cw))
    inp = data.draw(st.integers(0, in_bound - cw - cr))
    out = data.draw(st.integers(0, max_tokens))
    searches = data.draw(st.integers(0, max_searches))
    usage = Usage(inp, out, cw, cr, 0, cw_1h, searches)
    assert cost_uc(usage, price) <= bound_uc(in_bound, max_tokens, price, max_searches)


@given(
    prices.filter(lambda p: p.output > 0),
    st.integers(0, 10**5),
    st.integers(0, 10**7),
    st.integers(0, 20),
)
def test_affordable_output_is_the_largest_that_fits(
    price: Price, in_bound: int, granted: int, searches: int
) -> None:
    n = affordable_output_tokens(granted, in_bound, price, searches)
    fixed = in_bound * worst_input_rate(price) + searches * price.web_search_request
    if fixed > granted * 1_000_000:
        assert n == 0
        return
    assert bound_uc(in_bound, n, price, searches) <= granted
    # Maximal: one more output token's exact worst case no longer fits in the grant.
    assert fixed + (n + 1) * price.output > granted * 1_000_000


def test_one_hour_cache_writes_are_the_dearest_input_kind() -> None:
    assert worst_input_rate(SONNET) == SONNET.cache_write_1h == 6_000_000


def test_input_bound_counts_body_bytes_overhead_and_image_urls() -> None:
    assert input_tokens_bound(1000, 0, 1024, 1600) == 2024
    assert input_tokens_bound(1000, 2, 1024, 1600) == 5224
