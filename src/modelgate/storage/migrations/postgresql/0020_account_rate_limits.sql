-- An account's rate limits, shared by all its keys together (NULL: no such limit): requests and
-- tokens (input + output) per rolling minute, requests in flight.
ALTER TABLE accounts ADD COLUMN rpm INTEGER CHECK (rpm IS NULL OR rpm >= 1);
ALTER TABLE accounts ADD COLUMN tpm INTEGER CHECK (tpm IS NULL OR tpm >= 1);
ALTER TABLE accounts ADD COLUMN max_concurrency INTEGER CHECK (max_concurrency IS NULL OR max_concurrency >= 1);
