-- usage_records gains shortfall_uc: what an upstream reported beyond the request's hold and
-- could not be charged (docs/billing.md). Money columns are BIGINT already; a balance above the
-- documented maximum (2^53 - 1 µc) is refused by the database as well as by the gateway.
ALTER TABLE usage_records ADD COLUMN shortfall_uc BIGINT NOT NULL DEFAULT 0;
ALTER TABLE accounts ADD CONSTRAINT accounts_balance_max CHECK (balance_uc <= 9007199254740991)
