-- Issue #31: spend caps per window beside the month's (storage.spend_windows), on keys and on
-- accounts (an account's cap applies to all its keys together). NULL: no cap in that window.
ALTER TABLE api_keys ADD COLUMN cap_5h_uc INTEGER;
ALTER TABLE api_keys ADD COLUMN cap_day_uc INTEGER;
ALTER TABLE api_keys ADD COLUMN cap_week_uc INTEGER;
ALTER TABLE accounts ADD COLUMN cap_5h_uc INTEGER;
ALTER TABLE accounts ADD COLUMN cap_day_uc INTEGER;
ALTER TABLE accounts ADD COLUMN cap_week_uc INTEGER;
ALTER TABLE accounts ADD COLUMN monthly_cap_uc INTEGER;

-- Spent and held per subject ('k:<key id>' or 'a:<account id>'), window (win: 5h, day, week,
-- month) and period start (epoch seconds: the UTC day, the ISO week's Monday, the month's first
-- day, or a 5-minute bucket of the rolling 5 hours). Written only for subjects with a cap in that
-- window.
CREATE TABLE spend_windows (
    subject     TEXT NOT NULL,
    win         TEXT NOT NULL,
    start       INTEGER NOT NULL,
    spent_uc    INTEGER NOT NULL DEFAULT 0,
    reserved_uc INTEGER NOT NULL DEFAULT 0 CHECK (reserved_uc >= 0),
    PRIMARY KEY (subject, win, start)
) WITHOUT ROWID;

-- The rows a hold was counted in (JSON, storage.spend_windows.encode_rows), so its settle or
-- release moves exactly those; NULL for a hold under no window cap.
ALTER TABLE reservations ADD COLUMN windows TEXT;
