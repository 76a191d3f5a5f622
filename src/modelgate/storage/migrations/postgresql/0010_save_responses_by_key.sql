-- modelgate_save_responses (0009) without its table scans (issue #16: what a stored
-- Responses answer costs in the PostgreSQL mode). Same signature, rules and results; the statements
-- that find rows by a list of keys now find them one key at a time:
--
-- - 0009 locked the conversations appended to with one `id = ANY(conversations)` query, run for
--   every batch. PL/pgSQL plans a statement five times for its arguments, then keeps a generic
--   plan for the connection's life when that looks no dearer. On a young table that plan is a
--   sequential scan, and it stays one while the table grows, until an ANALYZE of the table
--   replaces it: on a fresh database, from the sixth batch on every batch read the whole of
--   stored_objects (the bench's stored Responses load at 16 in flight: 7,000 rows per batch on
--   average over 11 seconds).
-- - Now a batch without a conversation (most of them) skips that lock altogether, and a batch
--   with conversations locks each by its primary key, one after another in id order (as before,
--   the order every writer of conversations takes them in).
-- - The accounts' state_usage rows had the same kind of statement (`account_id = ANY(accounts)`,
--   and an UPDATE joined to an unnest of them): with answers of several accounts in a batch it too
--   became a scan, of every account's row. Now each row is locked, created when missing, and
--   written by its primary key, in account order as before.
CREATE OR REPLACE FUNCTION modelgate_save_responses(
    ids TEXT[], accounts BIGINT[], keys TEXT[], previous TEXT[], conversations TEXT[], holders TEXT[],
    bodies BYTEA[], sizes BIGINT[], appended BIGINT[], created DOUBLE PRECISION[],
    expires DOUBLE PRECISION[], max_bytes BIGINT, item_owner INTEGER[], item_ids TEXT[],
    item_sections TEXT[], item_bodies BYTEA[]
) RETURNS BOOLEAN[] LANGUAGE plpgsql AS $$
DECLARE
    kept BOOLEAN[] := '{}';
    acc BIGINT[];
    acc_bytes BIGINT[];
    acc_delta BIGINT[];
    conversation TEXT;
    account BIGINT;
    counted BIGINT;
    n INTEGER := COALESCE(array_length(ids, 1), 0);
    i INTEGER;
    ai INTEGER;
    ok BOOLEAN;
    start INTEGER;
BEGIN
    IF cardinality(array_remove(conversations, NULL)) > 0 THEN
        FOR conversation IN
            SELECT DISTINCT c.id FROM unnest(conversations) AS c(id) WHERE c.id IS NOT NULL ORDER BY c.id
        LOOP
            PERFORM 1 FROM stored_objects s
                WHERE s.id = conversation AND s.kind = 'conversation' FOR UPDATE;
        END LOOP;
    END IF;
    acc := '{}';
    acc_bytes := '{}';
    FOR account IN SELECT DISTINCT a FROM unnest(accounts) AS a ORDER BY a LOOP
        SELECT s.bytes INTO counted FROM state_usage s WHERE s.account_id = account FOR UPDATE;
        IF NOT FOUND THEN  -- the account's first stored object
            INSERT INTO state_usage (account_id, bytes) VALUES (account, 0) ON CONFLICT DO NOTHING;
            SELECT s.bytes INTO counted FROM state_usage s WHERE s.account_id = account FOR UPDATE;
        END IF;
        acc := acc || account;
        acc_bytes := acc_bytes || counted;
    END LOOP;
    acc_delta := array_fill(0::BIGINT, ARRAY[cardinality(acc)]);

    FOR i IN 1 .. n LOOP
        ok := TRUE;
        IF conversations[i] IS NOT NULL THEN
            PERFORM 1 FROM stored_objects s
                WHERE s.id = conversations[i] AND s.account_id = accounts[i] AND s.kind = 'conversation'
                    AND s.expires_at > created[i];
            ok := FOUND;
        END IF;
        ai := array_position(acc, accounts[i]);
        IF ok AND acc_bytes[ai] + sizes[i] + appended[i] > max_bytes THEN
            ok := FALSE;
        END IF;
        IF ok THEN
            acc_bytes[ai] := acc_bytes[ai] + sizes[i] + appended[i];
            acc_delta[ai] := acc_delta[ai] + sizes[i] + appended[i];
            IF conversations[i] IS NOT NULL THEN
                SELECT COALESCE(MAX(position), -1) + 1 INTO start FROM stored_items
                    WHERE owner_id = conversations[i];
                INSERT INTO stored_items (owner_id, position, account_id, item_id, section, body)
                    SELECT conversations[i], start + row_number() OVER (ORDER BY t.n) - 1, accounts[i],
                        t.item_id, 'item', t.body
                    FROM unnest(item_owner, item_ids, item_bodies) WITH ORDINALITY AS t(owner, item_id, body, n)
                    WHERE t.owner = i;
                UPDATE stored_objects SET bytes = bytes + appended[i],
                    expires_at = GREATEST(expires_at, expires[i])
                    WHERE id = conversations[i];
            END IF;
        END IF;
        kept := kept || ok;
    END LOOP;

    INSERT INTO stored_objects (id, account_id, kind, key_id, previous_id, conversation_id, holder,
        body, bytes, created_at, expires_at)
        SELECT t.id, t.account_id, 'response', t.key_id, t.previous_id, t.conversation_id, t.holder,
            t.body, t.size, t.created_at, t.expires_at
        FROM unnest(ids, accounts, keys, previous, conversations, holders, bodies, sizes, created,
            expires, kept)
            AS t(id, account_id, key_id, previous_id, conversation_id, holder, body, size, created_at,
                expires_at, ok)
        WHERE t.ok;
    INSERT INTO stored_items (owner_id, position, account_id, item_id, section, body)
        SELECT ids[t.owner], row_number() OVER (PARTITION BY t.owner ORDER BY t.n) - 1,
            accounts[t.owner], t.item_id, t.section, t.body
        FROM unnest(item_owner, item_ids, item_sections, item_bodies) WITH ORDINALITY
            AS t(owner, item_id, section, body, n)
        WHERE kept[t.owner];
    FOR ai IN 1 .. cardinality(acc) LOOP
        IF acc_delta[ai] <> 0 THEN
            UPDATE state_usage s SET bytes = s.bytes + acc_delta[ai] WHERE s.account_id = acc[ai];
        END IF;
    END LOOP;
    RETURN kept;
END;
$$;
