-- Group commit for stored Responses answers (storage/postgres_saves.py): the answers an instance
-- keeps in one turn of its event loop go to the database as ONE call, one statement and one
-- commit (issue #16), with the rules of modelgate_save_response (0007) applied to each in turn:
--
-- - Locks first, in one order: the conversations appended to (by id), then the accounts'
--   state_usage rows (by account id); every other writer of a conversation takes the conversation
--   before its account's row, as 0007 does.
-- - Each answer is checked in order against the account's running total (under its row lock, so
--   the limit is never overshot across instances): it is kept when its conversation (if any) is
--   live and the bytes fit; one that does not fit changes nothing, and later ones still may.
-- - The kept answers are inserted together (objects, then items); each account's row is written
--   once, with the sum.
--
-- Per answer i (1-based), parallel arrays; items flattened with item_owner = i, in order (input
-- then output). Returns one BOOLEAN per answer, in order: kept or not.
CREATE FUNCTION modelgate_save_responses(
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
    live_conversations TEXT[];
    n INTEGER := COALESCE(array_length(ids, 1), 0);
    i INTEGER;
    ai INTEGER;
    ok BOOLEAN;
    start INTEGER;
BEGIN
    SELECT array_agg(o.id) INTO live_conversations FROM (
        SELECT s.id FROM stored_objects s
        WHERE s.id = ANY(conversations) AND s.kind = 'conversation'
        ORDER BY s.id FOR UPDATE
    ) o;
    INSERT INTO state_usage (account_id, bytes)
        SELECT DISTINCT a, 0 FROM unnest(accounts) AS a ON CONFLICT DO NOTHING;
    SELECT array_agg(u.account_id ORDER BY u.account_id), array_agg(u.bytes ORDER BY u.account_id)
        INTO acc, acc_bytes FROM (
            SELECT s.account_id, s.bytes FROM state_usage s
            WHERE s.account_id = ANY(accounts) ORDER BY s.account_id FOR UPDATE
        ) u;
    acc_delta := array_fill(0::BIGINT, ARRAY[COALESCE(array_length(acc, 1), 0)]);

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
    UPDATE state_usage s SET bytes = s.bytes + d.delta
        FROM unnest(acc, acc_delta) AS d(account_id, delta)
        WHERE s.account_id = d.account_id AND d.delta <> 0;
    RETURN kept;
END;
$$;
