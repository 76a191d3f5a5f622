-- Issue #34 (the request path's cost): the usage rollups of 0018 are kept once per ledger batch
-- (storage/rollup_fold.py: the batch's one statement calls modelgate_ledger and upserts each
-- distinct rollup row of the settlements it applied once, in the same transaction) instead of by
-- this trigger's three upserts per record. An instance still running the previous release writes
-- records without their sums after this migration: upgrade every instance together (or run
-- `modelgate usage rebuild-rollups` once they all run this release). Records written by anything
-- but the ledger (a restore, a bulk load) are summed by `modelgate usage rebuild-rollups`.
DROP TRIGGER IF EXISTS usage_records_rollup ON usage_records;
DROP FUNCTION IF EXISTS modelgate_usage_rollup();
