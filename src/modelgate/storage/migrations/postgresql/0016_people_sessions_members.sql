-- People who sign in with OpenID Connect (docs/people.md), keyed by (issuer, subject): an email
-- address can change hands at a provider, the subject never does.
CREATE TABLE people (
    id TEXT PRIMARY KEY,
    issuer TEXT NOT NULL,
    subject TEXT NOT NULL,
    email TEXT NOT NULL DEFAULT '',
    name TEXT NOT NULL DEFAULT '',
    created_at DOUBLE PRECISION NOT NULL,
    last_login_at DOUBLE PRECISION NOT NULL,
    UNIQUE (issuer, subject)
);
-- Sign-ins under way: the state's HMAC digest, the PKCE verifier and nonce, and the digest of the
-- browser cookie the sign-in was started from, and of the invitation it carries, if any. Taken
-- (deleted) exactly once by the callback.
CREATE TABLE sso_logins (
    state_digest BYTEA PRIMARY KEY,
    browser_digest BYTEA NOT NULL,
    verifier TEXT NOT NULL,
    nonce TEXT NOT NULL,
    invite_digest BYTEA,
    created_at DOUBLE PRECISION NOT NULL
);
-- Dashboard sessions: only the HMAC digest of the cookie's value is stored.
CREATE TABLE admin_sessions (
    digest BYTEA PRIMARY KEY,
    person_id TEXT NOT NULL REFERENCES people(id) ON DELETE CASCADE,
    account_id BIGINT,
    role TEXT NOT NULL,
    csrf TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    last_seen_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX admin_sessions_person ON admin_sessions(person_id);
-- Members of an account and their role (owner or member).
CREATE TABLE account_members (
    account_id BIGINT NOT NULL REFERENCES accounts(id),
    person_id TEXT NOT NULL REFERENCES people(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (account_id, person_id)
);
CREATE INDEX account_members_person ON account_members(person_id);
-- One-time invitations to an account: only the token's HMAC digest is stored.
CREATE TABLE account_invites (
    id TEXT PRIMARY KEY,
    digest BYTEA NOT NULL UNIQUE,
    account_id BIGINT NOT NULL REFERENCES accounts(id),
    role TEXT NOT NULL,
    email TEXT NOT NULL DEFAULT '',
    created_by TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    used_at DOUBLE PRECISION,
    used_by TEXT
);
CREATE INDEX account_invites_account ON account_invites(account_id);
-- The person who created a key, for members who manage only their own keys.
CREATE TABLE key_owners (
    key_id TEXT PRIMARY KEY,
    person_id TEXT NOT NULL,
    account_id BIGINT NOT NULL
);
CREATE INDEX key_owners_person ON key_owners(person_id);
