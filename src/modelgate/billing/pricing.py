"""Cost of tokens in micro-credits, and the worst-case bound reserved before a request runs.

Rounding rule (documented in the README): per request, the exact sum
``Σ tokens_kind × price_kind`` (µc per million tokens) is divided by one million and rounded UP to
a whole micro-credit, once. A request therefore never costs less than its tokens, and costs at most
one micro-credit more.

Kinds: uncached input, output, 5-minute cache writes, 1-hour cache writes, cache reads, and server
web searches. A web search is priced per request, held as µc per MILLION requests (the catalogue's
credits per 1,000 times 1,000), so its product joins the same exact sum and the same one division.
"""

from __future__ import annotations

from modelgate.catalogue import Price
from modelgate.ir import Usage

PER_MILLION = 1_000_000


def _ceil_div(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


def cost_uc(usage: Usage, price: Price) -> int:
    # The 1-hour writes are a part of cache_creation_input_tokens; the rest are 5-minute writes.
    one_hour = min(usage.cache_write_1h_input_tokens, usage.cache_creation_input_tokens)
    total = (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + (usage.cache_creation_input_tokens - one_hour) * price.cache_write
        + one_hour * price.cache_write_1h
        + usage.cache_read_input_tokens * price.cache_read
        + usage.web_search_requests * price.web_search_request
    )
    return _ceil_div(total, PER_MILLION)


def worst_input_rate(price: Price) -> int:
    """Any input token may turn out to be a cache write, the dearest kind (a 1-hour one)."""
    return max(price.input, price.cache_write, price.cache_write_1h, price.cache_read)


def _fixed(input_tokens_bound: int, web_searches: int, price: Price) -> int:
    """The bound's numerator without output: every input token at the dearest input rate, and
    the most web searches the request may run."""
    return input_tokens_bound * worst_input_rate(price) + web_searches * price.web_search_request


def bound_uc(input_tokens_bound: int, max_tokens: int, price: Price, web_searches: int = 0) -> int:
    """Upper bound of the cost of a request with at most these tokens and web searches."""
    return _ceil_div(_fixed(input_tokens_bound, web_searches, price) + max_tokens * price.output, PER_MILLION)


def affordable_output_tokens(
    granted_uc: int, input_tokens_bound: int, price: Price, web_searches: int = 0
) -> int:
    """The largest ``max_tokens`` whose bound fits in ``granted_uc``."""
    room = granted_uc * PER_MILLION - _fixed(input_tokens_bound, web_searches, price)
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
