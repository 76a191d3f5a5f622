"""Gateway request ids lead with the time, so ids minted later sort after earlier ones."""

from __future__ import annotations

import re
import time

from hypothesis import given
from hypothesis import strategies as st

from modelgate.formats import ids

LAST_SECOND = 62**6 - 1


@given(st.integers(0, LAST_SECOND), st.integers(0, LAST_SECOND))
def test_seconds_in_base62_sort_as_the_numbers_do(a: int, b: int) -> None:
    first, second = ids.seconds62(a), ids.seconds62(b)
    assert len(first) == len(second) == 6
    assert (first < second) == (a < b) and (first == second) == (a == b)


def test_a_request_id_is_the_time_then_random_digits() -> None:
    before = int(time.time())
    minted = [ids.new_request_id() for _ in range(200)]
    after = int(time.time())
    assert all(re.fullmatch(r"req_[0-9A-Za-z]{24}", rid) for rid in minted)
    assert len(set(minted)) == len(minted)
    assert {rid[4:10] for rid in minted} <= {ids.seconds62(s) for s in range(before, after + 1)}
    assert ids.seconds62(before) <= min(minted)[4:10]
    # An id of an earlier second sorts before every one minted now.
    assert "req_" + ids.seconds62(before - 1) + "z" * 18 < min(minted)
