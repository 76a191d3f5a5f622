"""Responses ids the gateway mints (its own answers, input items, conversations) have the shape of
OpenAI's: a prefix, then 48 hex digits whose first 8 are the Unix time, so ids minted later sort
after earlier ones (the stored responses' indexes grow at their end)."""

from __future__ import annotations

import re
import time

from modelgate.formats import ids
from modelgate.formats.responses.state import mint_item_id, new_conversation_id


def test_minted_ids_are_hex_led_by_the_time_they_were_minted() -> None:
    before = int(time.time())
    minted = [
        ids.new_response_id(),
        ids.new_output_message_id(),
        ids.new_function_call_item_id(),
        mint_item_id("message"),
        mint_item_id("function_call_output"),
        new_conversation_id(),
    ]
    after = int(time.time())
    for ident in minted:
        found = re.fullmatch(r"(resp|msg|fc|fco|conv)_([0-9a-f]{8})([0-9a-f]{40})", ident)
        assert found is not None, ident
        assert before <= int(found.group(2), 16) <= after
    assert len(set(minted)) == len(minted)
    earlier = mint_item_id("message")
    time.sleep(1.05)
    assert mint_item_id("message")[4:] > earlier[4:]
