"""Cost of tokens in micro-credits, and the worst-case bound reserved before a request runs.

Rounding rule (documented in the README): per request, the exact sum
``Σ tokens_kind × price_kind`` (µc per million tokens) is divided by one million and rounded UP to
a whole micro-credit, once. A request therefore never costs less than its tokens, and costs at most
one micro-credit more.
"""

from __future__ import annotations

from modelgate.catalogue import Price
from modelgate.ir import Usage

PER_MILLION = 1_000_000


def _ceil_div(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


def cost_uc(usage: Usage, price: Price) -> int:
    total = (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_creation_input_tokens * price.cache_write
        + usage.cache_read_input_tokens * price.cache_read
    )
    return _ceil_div(total, PER_MILLION)


def worst_input_rate(price: Price) -> int:
    """Any input token may turn out to be a cache write, the dearest kind."""
    return max(price.input, price.cache_write, price.cache_read)


def bound_uc(input_tokens_bound: int, max_tokens: int, price: Price) -> int:
    """Upper bound of the cost of a request with at most these tokens."""
    return _ceil_div(input_tokens_bound * worst_input_rate(price) + max_tokens * price.output, PER_MILLION)


def affordable_output_tokens(granted_uc: int, input_tokens_bound: int, price: Price) -> int:
    """The largest ``max_tokens`` whose bound fits in ``granted_uc``."""
    room = granted_uc * PER_MILLION - input_tokens_bound * worst_input_rate(price)
    if room < 0:
        return 0
    if price.output == 0:
        return 1 << 31
    return room // price.output


def input_tokens_bound(body_bytes: int, image_urls: int, overhead: int, tokens_per_image_url: int) -> int:
    """Upper bound on input tokens: a BPE token is at least one byte of the JSON body's text, plus
    a fixed overhead (tool prompts, message framing) and a per-image allowance for images the body
    only references by URL."""
    return body_bytes + overhead + image_urls * tokens_per_image_url
