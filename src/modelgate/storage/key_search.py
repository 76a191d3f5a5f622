"""The keys search's index (``GET /admin/api/keys?q=``): trigram indexes over each key's name, id and
display prefix (migrations sqlite 0019 / postgresql 0024), so a search that matches a few keys
reads those keys, not the whole key list.

What matches never changes with the index: ``storage.key_pages`` decides it with the same
case-blind ``LIKE`` (``%`` and ``_`` literal) on every engine; an index only finds candidates.

- SQLite: the FTS5 table ``api_keys_search`` (``trigram`` tokenizer, case folded), kept by
  triggers on ``api_keys`` in the writing transaction. A search of three characters or more
  first counts its candidates (at most ``INDEXED_MATCHES`` + 1 are read): when there are at most
  ``INDEXED_MATCHES``, the page reads them by id and sorts them (a few milliseconds); when there
  are more, matching keys are usually dense in key order: the page looks among the next
  ``SCAN_WINDOW`` keys first, and reads and sorts every candidate only when those do not fill it.
  A search of one or two characters has no trigram: it scans the key list in keyset order with
  the ``LIKE`` and stops at the page size (fast when matches are common, the whole list when
  none match).
- PostgreSQL: GIN ``pg_trgm`` indexes on ``LOWER(name)``, ``LOWER(id)`` and ``LOWER(prefix)``;
  the planner chooses between them and the keyset scan from the indexes' statistics, so the
  query is planned for its own pattern every time (``CUSTOM_PLANS``), never a generic plan.
"""

from __future__ import annotations

from modelgate.storage.reports import Params

#: At most this many candidates are read through the index and sorted; a search matching more
#: keys scans in keyset order instead (about 1 in 100 keys match at 1,000,000 keys, so a page of
#: 100 reads some 10,000 keys either way).
INDEXED_MATCHES = 10_000
#: A search matching more than ``INDEXED_MATCHES`` keys looks for its page among this many keys in
#: key order first (about 30 ms of ``LIKE`` on a small machine); only when they do not fill it (the
#: matches sit further on) are all its candidates read and sorted (about 2 µs each).
SCAN_WINDOW = 10_000
#: The trigram indexes hold three-character substrings: a shorter search cannot use them.
TRIGRAM = 3
#: Set in the search's transaction on PostgreSQL: a prepared statement's generic plan would not
#: know whether the pattern matches ten keys or a million.
CUSTOM_PLANS = "SET LOCAL plan_cache_mode = force_custom_plan"


def indexed(search: str) -> bool:
    """Whether a trigram index can find ``search``'s candidates."""
    return len(search.lower()) >= TRIGRAM


def fts_phrase(search: str) -> str:
    """``search`` as one FTS5 phrase: with the trigram tokenizer, the rows containing it as a
    substring of one column (case folded; every character, quotes included, taken literally)."""
    return '"' + search.lower().replace('"', '""') + '"'


def sqlite_count_sql() -> str:
    """Candidates of a phrase, counted up to a limit (parameters: the phrase, the limit)."""
    return "SELECT count(*) FROM (SELECT 1 FROM api_keys_search WHERE api_keys_search MATCH ? LIMIT ?)"


def sqlite_hits(search: str, p: Params) -> str:
    """The candidates' ids (``key_pages.key_page_sql``'s ``hits``)."""
    return f"SELECT DISTINCT id AS hit_id FROM api_keys_search WHERE api_keys_search MATCH {p(fts_phrase(search))}"
