-- Issue #34 (the request path's cost): the usage rollups of 0013 are kept once per ledger batch
-- (storage/rollup_fold.py: the group commit sums its records per rollup row and upserts each
-- distinct row once, in the batch's own transaction) instead of by this trigger's three upserts per
-- record. Records written by anything but the ledger (a restore, a bulk load) are summed by
-- `modelgate usage rebuild-rollups`.
DROP TRIGGER IF EXISTS usage_records_rollup
