-- The audit log (append-only: the triggers refuse any UPDATE or DELETE), the ledger's kind and
-- actor on top-ups, a per-account low-balance threshold for alerts, and the claims that send each
-- alert once across processes and instances (docs/people.md).
CREATE TABLE audit_log (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    at         REAL NOT NULL,
    actor      TEXT NOT NULL,
    action     TEXT NOT NULL,
    target     TEXT NOT NULL,
    account_id INTEGER,
    before     TEXT,
    after      TEXT,
    request_id TEXT NOT NULL DEFAULT '',
    client     TEXT NOT NULL DEFAULT ''
);
CREATE INDEX audit_log_account ON audit_log(account_id, id);
CREATE INDEX audit_log_at ON audit_log(at);
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
ALTER TABLE topups ADD COLUMN kind TEXT NOT NULL DEFAULT 'topup';
ALTER TABLE topups ADD COLUMN actor TEXT NOT NULL DEFAULT '';
CREATE INDEX topups_account_time ON topups(account_id, created_at);
ALTER TABLE accounts ADD COLUMN low_balance_uc INTEGER;
CREATE TABLE alert_claims (
    event   TEXT NOT NULL,
    subject TEXT NOT NULL,
    period  TEXT NOT NULL,
    at      REAL NOT NULL,
    PRIMARY KEY (event, subject, period)
);
