-- Issue #27 (billing what the provider bills): a usage record also says how many of its cache
-- writes went to the 1-hour cache (priced at cache_write_1h; a part of cache_creation_tokens) and
-- how many server web searches the provider ran (priced per request), so a record alone
-- recomputes what it was charged. Records written before this migration read 0 for both.
ALTER TABLE usage_records ADD COLUMN cache_write_1h_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_records ADD COLUMN web_search_requests INTEGER NOT NULL DEFAULT 0;
