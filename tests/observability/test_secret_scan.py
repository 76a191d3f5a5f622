"""The suite-wide secret check (tests/secret_scan.py) catches what it is meant to catch."""

from __future__ import annotations

import logging

from modelgate.keys import new_admin_token, new_api_key
from modelgate.telemetry.record import RequestRecord
from tests.secret_scan import Scanner, ScanningHandler


def test_keys_tokens_and_registered_secrets_are_caught_in_any_rendering() -> None:
    scanner = Scanner()
    scanner.register("upstream-secret-0123456789", "short")  # too short to scan for: ignored
    logger = logging.getLogger("modelgate.test-secret-scan")
    logger.propagate = False
    logger.addHandler(ScanningHandler(scanner))
    try:
        logger.warning("nothing to see: send your key (sk-cs4-…) as x-api-key; short is fine")
        assert scanner.leaks == []
        key, token = new_api_key(), new_admin_token(operator=True)
        logger.warning("upstream said: %s", key)
        assert scanner.leaks == []  # the formatters scrub key-shaped text from the message
        logger.error("failed", extra={"fields": {"note": token}})
        try:
            raise RuntimeError("upstream-secret-0123456789")
        except RuntimeError:
            logger.exception("while calling the upstream")
    finally:
        logger.handlers.clear()
    assert len(scanner.leaks) == 2  # the fields and the registered secret in the traceback
    # A key-shaped string with a wrong checksum is not a key (no false alarm on hostile input).
    scanner.scan("sk-cs4-" + "A" * 38, "metrics")
    assert len(scanner.leaks) == 2
    scanner.scan(repr(RequestRecord(new_api_key(), "chat")), "span")
    assert len(scanner.leaks) == 3
