-- A key may expire (refused with 401 from expires_at on) and be bound to address ranges
-- (allowed_ips: a JSON list of CIDRs; NULL: from anywhere). An account may hide its balance from
-- its keys' holders (GET /v1/key).
ALTER TABLE api_keys ADD COLUMN expires_at REAL;
ALTER TABLE api_keys ADD COLUMN allowed_ips TEXT;
ALTER TABLE accounts ADD COLUMN hide_balance INTEGER NOT NULL DEFAULT 0 CHECK (hide_balance IN (0, 1));
