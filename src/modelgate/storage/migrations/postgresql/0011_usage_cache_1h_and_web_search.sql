-- Issue #27 (billing what the provider bills): a usage record also says how many of its cache
-- writes went to the 1-hour cache (priced at cache_write_1h; a part of cache_creation_tokens) and
-- how many server web searches the provider ran (priced per request), so a record alone
-- recomputes what it was charged. Records written before this migration read 0 for both.
ALTER TABLE usage_records ADD COLUMN cache_write_1h_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_records ADD COLUMN web_search_requests BIGINT NOT NULL DEFAULT 0;

-- The ledger batch of 0008 writes both into the usage record; nothing else changed (same
-- signature, locks, rules and results).
CREATE OR REPLACE FUNCTION modelgate_ledger(ops JSONB, locks JSONB) RETURNS TABLE (
    outcome TEXT,
    amount_uc BIGINT,
    shortfall_uc BIGINT,
    balance_free_uc BIGINT,
    cap_free_uc BIGINT,
    month TEXT,
    key_id TEXT,
    account_id BIGINT,
    endpoint TEXT,
    model TEXT,
    created_at DOUBLE PRECISION
) LANGUAGE plpgsql AS $$
DECLARE
    op RECORD;
    held RECORD;
    finishes BOOLEAN;
    -- Accounts touched: id, whether it exists, free balance now, reserved and balance deltas.
    a_ids BIGINT[] := '{}';
    a_found BOOLEAN[] := '{}';
    a_free BIGINT[] := '{}';
    a_dres BIGINT[] := '{}';
    a_dbal BIGINT[] := '{}';
    -- Key-months touched ('key/month'): the key exists, its cap, whether the spend row exists (or
    -- a reserve of this batch creates it), spent + reserved now, reserved and spent deltas.
    k_names TEXT[] := '{}';
    k_ids TEXT[] := '{}';
    k_months TEXT[] := '{}';
    k_found BOOLEAN[] := '{}';
    k_cap BIGINT[] := '{}';
    k_row BOOLEAN[] := '{}';
    k_existed BOOLEAN[] := '{}';
    k_used BIGINT[] := '{}';
    k_dres BIGINT[] := '{}';
    k_dspent BIGINT[] := '{}';
    ai INTEGER;
    ki INTEGER;
    a_id BIGINT;
    k_key TEXT;
    k_month TEXT;
    free BIGINT;
    cap BIGINT;
    used BIGINT;
    has_row BOOLEAN;
    cap_free BIGINT;
    affordable BIGINT;
    granted BIGINT;
    cost BIGINT;
    charged BIGINT;
    room BIGINT;
BEGIN
    -- Every lock the batch needs, first and in the order given (the caller sorts it).
    PERFORM pg_advisory_xact_lock(t.c, t.k) FROM jsonb_to_recordset(locks) AS t(c INT, k INT);

    FOR op IN SELECT * FROM jsonb_to_recordset(ops) AS x(
        kind TEXT, request_id TEXT, key_id TEXT, account_id BIGINT, month TEXT, amount BIGINT,
        minimum BIGINT, at DOUBLE PRECISION, expires DOUBLE PRECISION, endpoint TEXT, model TEXT,
        status TEXT, input_tokens BIGINT, output_tokens BIGINT, cache_creation_tokens BIGINT,
        cache_read_tokens BIGINT, cache_write_1h_tokens BIGINT, web_search_requests BIGINT)
    LOOP
        outcome := NULL; amount_uc := 0; shortfall_uc := 0; balance_free_uc := 0; cap_free_uc := NULL;
        month := NULL; key_id := NULL; account_id := NULL; endpoint := NULL; model := NULL;
        created_at := NULL;
        finishes := FALSE;
        IF op.kind <> 'r' THEN
            DELETE FROM reservations r WHERE r.request_id = op.request_id
                RETURNING r.amount_uc, r.month, r.key_id, r.account_id, r.endpoint, r.model, r.created_at
                INTO held;
            finishes := FOUND;
        END IF;
        -- The account and key-month this operation concerns (a reservation is the authority).
        IF finishes THEN
            a_id := held.account_id; k_key := held.key_id; k_month := held.month;
        ELSE
            a_id := op.account_id; k_key := op.key_id; k_month := op.month;
        END IF;
        ai := array_position(a_ids, a_id);
        IF ai IS NULL THEN
            SELECT a.balance_uc - a.reserved_uc INTO free FROM accounts a WHERE a.id = a_id;
            a_ids := a_ids || a_id;
            a_found := a_found || FOUND;
            a_free := a_free || free;
            a_dres := a_dres || 0::BIGINT;
            a_dbal := a_dbal || 0::BIGINT;
            ai := array_length(a_ids, 1);
        END IF;
        ki := array_position(k_names, k_key || '/' || k_month);
        IF ki IS NULL THEN
            SELECT k.monthly_cap_uc INTO cap FROM api_keys k WHERE k.id = k_key;
            k_found := k_found || FOUND;
            SELECT s.spent_uc + s.reserved_uc INTO used FROM key_month_spend s
                WHERE s.key_id = k_key AND s.month = k_month;
            has_row := FOUND;
            k_names := k_names || (k_key || '/' || k_month);
            k_ids := k_ids || k_key;
            k_months := k_months || k_month;
            k_cap := k_cap || cap;
            k_row := k_row || has_row;
            k_existed := k_existed || has_row;
            k_used := k_used || COALESCE(used, 0);
            k_dres := k_dres || 0::BIGINT;
            k_dspent := k_dspent || 0::BIGINT;
            ki := array_length(k_names, 1);
        END IF;
        free := a_free[ai]; cap := k_cap[ki]; used := k_used[ki];

        IF op.kind = 'r' THEN
            IF NOT a_found[ai] OR NOT k_found[ki] THEN
                outcome := 'balance';
            ELSE
                cap_free := CASE WHEN cap IS NULL THEN NULL ELSE GREATEST(0, cap - used) END;
                affordable := CASE WHEN cap_free IS NULL THEN free ELSE LEAST(free, cap_free) END;
                IF affordable < op.minimum THEN
                    outcome := CASE WHEN cap_free IS NOT NULL AND cap_free <= free
                        THEN 'monthly_cap' ELSE 'balance' END;
                    amount_uc := GREATEST(0, affordable);
                ELSE
                    granted := LEAST(op.amount, affordable);
                    -- A request id already held fails the statement (unique key): the caller
                    -- then runs each operation alone, so only that one is refused.
                    INSERT INTO reservations (request_id, key_id, account_id, month, amount_uc,
                        created_at, expires_at, endpoint, model)
                        VALUES (op.request_id, op.key_id, op.account_id, op.month, granted, op.at,
                            op.expires, op.endpoint, op.model);
                    a_free[ai] := free - granted;
                    a_dres[ai] := a_dres[ai] + granted;
                    k_used[ki] := used + granted;
                    k_dres[ki] := k_dres[ki] + granted;
                    k_row[ki] := TRUE;
                    outcome := 'granted';
                    amount_uc := granted;
                    balance_free_uc := free - granted;
                    cap_free_uc := cap_free - granted;
                END IF;
            END IF;
        ELSIF NOT finishes THEN
            -- Finished before (or never reserved): nothing changes; report what is free.
            outcome := 'not_applied';
            balance_free_uc := COALESCE(free, 0);
            cap_free_uc := CASE WHEN cap IS NULL THEN NULL ELSE GREATEST(0, cap - used) END;
        ELSE
            charged := 0;
            IF op.kind = 's' THEN
                cost := GREATEST(op.amount, 0);
                charged := cost;
                IF cost > held.amount_uc THEN
                    -- Beyond the hold only what is free is charged; the rest is the shortfall.
                    room := GREATEST(0, COALESCE(free, 0));
                    IF cap IS NOT NULL THEN
                        room := LEAST(room, GREATEST(0, cap - used));
                    END IF;
                    charged := held.amount_uc + LEAST(cost - held.amount_uc, room);
                    shortfall_uc := cost - charged;
                END IF;
            END IF;
            -- A request id already recorded fails the statement (unique key), as above.
            -- An instance not yet upgraded sends no 1-hour or web search figures: they read 0.
            INSERT INTO usage_records (request_id, key_id, account_id, endpoint, model, month, status,
                created_at, finished_at, input_tokens, output_tokens, cache_creation_tokens,
                cache_read_tokens, charged_uc, shortfall_uc, cache_write_1h_tokens, web_search_requests)
                VALUES (op.request_id, held.key_id, held.account_id, held.endpoint, held.model,
                    held.month, op.status, held.created_at, op.at, op.input_tokens, op.output_tokens,
                    op.cache_creation_tokens, op.cache_read_tokens, charged, shortfall_uc,
                    COALESCE(op.cache_write_1h_tokens, 0), COALESCE(op.web_search_requests, 0));
            IF a_found[ai] THEN
                a_free[ai] := free + held.amount_uc - charged;
                a_dres[ai] := a_dres[ai] - held.amount_uc;
                a_dbal[ai] := a_dbal[ai] - charged;
            END IF;
            IF k_row[ki] THEN
                k_used[ki] := used + charged - held.amount_uc;
                k_dres[ki] := k_dres[ki] - held.amount_uc;
                k_dspent[ki] := k_dspent[ki] + charged;
            END IF;
            outcome := 'applied';
            amount_uc := charged;
            balance_free_uc := COALESCE(a_free[ai], 0);
            cap_free_uc := CASE WHEN cap IS NULL THEN NULL ELSE GREATEST(0, cap - k_used[ki]) END;
            month := held.month; key_id := held.key_id; account_id := held.account_id;
            endpoint := held.endpoint; model := held.model; created_at := held.created_at;
        END IF;
        RETURN NEXT;
    END LOOP;

    -- The batch's sums, one write per account and key-month (deltas: top-ups are never lost).
    FOR ai IN 1 .. COALESCE(array_length(a_ids, 1), 0) LOOP
        IF a_found[ai] AND (a_dres[ai] <> 0 OR a_dbal[ai] <> 0) THEN
            UPDATE accounts a SET reserved_uc = a.reserved_uc + a_dres[ai], balance_uc = a.balance_uc + a_dbal[ai]
                WHERE a.id = a_ids[ai];
        END IF;
    END LOOP;
    FOR ki IN 1 .. COALESCE(array_length(k_names, 1), 0) LOOP
        IF k_existed[ki] AND (k_dres[ki] <> 0 OR k_dspent[ki] <> 0) THEN
            UPDATE key_month_spend s SET reserved_uc = s.reserved_uc + k_dres[ki], spent_uc = s.spent_uc + k_dspent[ki]
                WHERE s.key_id = k_ids[ki] AND s.month = k_months[ki];
        ELSIF k_row[ki] AND NOT k_existed[ki] THEN
            -- Created by this batch's reserves (its only changes: a settle needs a reservation,
            -- and a reservation's key-month row exists).
            INSERT INTO key_month_spend AS s (key_id, month, reserved_uc, spent_uc)
                VALUES (k_ids[ki], k_months[ki], k_dres[ki], k_dspent[ki])
                ON CONFLICT ON CONSTRAINT key_month_spend_pkey
                DO UPDATE SET reserved_uc = s.reserved_uc + k_dres[ki], spent_uc = s.spent_uc + k_dspent[ki];
        END IF;
    END LOOP;
END;
$$;
