-- Issue #31: spend caps per window beside the month's, on keys and on accounts (an account's cap
-- applies to all its keys together); storage/spend_windows.py says what each window is. NULL: no
-- cap in that window.
ALTER TABLE api_keys ADD COLUMN cap_5h_uc BIGINT;
ALTER TABLE api_keys ADD COLUMN cap_day_uc BIGINT;
ALTER TABLE api_keys ADD COLUMN cap_week_uc BIGINT;
ALTER TABLE accounts ADD COLUMN cap_5h_uc BIGINT;
ALTER TABLE accounts ADD COLUMN cap_day_uc BIGINT;
ALTER TABLE accounts ADD COLUMN cap_week_uc BIGINT;
ALTER TABLE accounts ADD COLUMN monthly_cap_uc BIGINT;

-- Spent and held per subject ('k:<key id>' or 'a:<account id>'), window (win: 5h, day, week,
-- month) and period start (epoch seconds: the UTC day, the ISO week's Monday, the month's first
-- day, or a 5-minute bucket of the rolling 5 hours). Written only for subjects with a cap in that
-- window.
CREATE TABLE spend_windows (
    subject     TEXT NOT NULL,
    win         TEXT NOT NULL,
    start       BIGINT NOT NULL,
    spent_uc    BIGINT NOT NULL DEFAULT 0,
    reserved_uc BIGINT NOT NULL DEFAULT 0 CHECK (reserved_uc >= 0),
    PRIMARY KEY (subject, win, start)
);

-- The rows a hold was counted in (JSON: [[subject, window, start], ...]), so its settle or release
-- moves exactly those; NULL for a hold under no window cap.
ALTER TABLE reservations ADD COLUMN windows TEXT;

-- The start of the period a hold made at `at` counts in (storage.spend_windows.period_start).
CREATE FUNCTION modelgate_window_start(p_win TEXT, p_at DOUBLE PRECISION) RETURNS BIGINT
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_win
        WHEN '5h' THEN floor(p_at)::BIGINT - floor(p_at)::BIGINT % 300
        WHEN 'day' THEN floor(p_at)::BIGINT - floor(p_at)::BIGINT % 86400
        WHEN 'week' THEN (floor(p_at)::BIGINT - floor(p_at)::BIGINT % 86400)
            - ((floor(p_at)::BIGINT / 86400 + 3) % 7) * 86400
        ELSE extract(epoch FROM date_trunc('month', to_timestamp(floor(p_at)) AT TIME ZONE 'UTC'))::BIGINT
    END
$$;

-- The earliest row start counted at `at` (storage.spend_windows.first_counted): for the rolling
-- window the bucket holding `at` - 5 h, so every hold of the five hours before is seen.
CREATE FUNCTION modelgate_window_first(p_win TEXT, p_at DOUBLE PRECISION) RETURNS BIGINT
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_win WHEN '5h' THEN modelgate_window_start('5h', p_at - 18000)
        ELSE modelgate_window_start(p_win, p_at) END
$$;

-- The window caps in force for a hold of `key` (account `acct`) made at `at`, decided together:
-- the least left of any (free_uc), the first such cap's refusal reason in checking order (key 5h,
-- day, week, then account 5h, day, week, month), and the rows a hold counts in (JSON, as
-- reservations.windows). No row when no cap is set. Runs under the batch's account lock, which
-- every ledger write of the key's and the account's holds takes.
CREATE FUNCTION modelgate_window_caps(p_key TEXT, p_acct BIGINT, p_at DOUBLE PRECISION)
RETURNS TABLE (free_uc BIGINT, reason TEXT, counted_rows TEXT) LANGUAGE plpgsql AS $$
DECLARE
    c RECORD;
    used BIGINT;
    left_uc BIGINT;
    found_rows JSONB := '[]';
BEGIN
    FOR c IN
        SELECT t.subject, t.win, t.cap, t.ord FROM (
            SELECT 'k:' || p_key AS subject, '5h' AS win, k.cap_5h_uc AS cap, 1 AS ord
                FROM api_keys k WHERE k.id = p_key
            UNION ALL SELECT 'k:' || p_key, 'day', k.cap_day_uc, 2 FROM api_keys k WHERE k.id = p_key
            UNION ALL SELECT 'k:' || p_key, 'week', k.cap_week_uc, 3 FROM api_keys k WHERE k.id = p_key
            UNION ALL SELECT 'a:' || p_acct, '5h', a.cap_5h_uc, 4 FROM accounts a WHERE a.id = p_acct
            UNION ALL SELECT 'a:' || p_acct, 'day', a.cap_day_uc, 5 FROM accounts a WHERE a.id = p_acct
            UNION ALL SELECT 'a:' || p_acct, 'week', a.cap_week_uc, 6 FROM accounts a WHERE a.id = p_acct
            UNION ALL SELECT 'a:' || p_acct, 'month', a.monthly_cap_uc, 7 FROM accounts a WHERE a.id = p_acct
        ) t WHERE t.cap IS NOT NULL ORDER BY t.ord
    LOOP
        SELECT COALESCE(SUM(s.spent_uc + s.reserved_uc), 0) INTO used FROM spend_windows s
            WHERE s.subject = c.subject AND s.win = c.win
            AND s.start BETWEEN modelgate_window_first(c.win, p_at) AND modelgate_window_start(c.win, p_at);
        left_uc := GREATEST(0, c.cap - used);
        IF free_uc IS NULL OR left_uc < free_uc THEN
            free_uc := left_uc;
            reason := CASE c.win WHEN '5h' THEN 'cap_5h' WHEN 'day' THEN 'cap_day'
                WHEN 'week' THEN 'cap_week' ELSE 'monthly_cap' END;
        END IF;
        found_rows := found_rows || jsonb_build_array(jsonb_build_array(c.subject, c.win,
            modelgate_window_start(c.win, p_at)));
    END LOOP;
    IF free_uc IS NOT NULL THEN
        counted_rows := found_rows::TEXT;
        RETURN NEXT;
    END IF;
END;
$$;

-- Moves a hold in the rows it counts in: held by `dres` more, spent by `dspent` more (a reserve
-- adds its grant; a settle or release takes its hold back and adds what it charged).
CREATE FUNCTION modelgate_window_move(p_counted TEXT, dres BIGINT, dspent BIGINT) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
    IF dres < 0 THEN  -- a settle or release: its rows exist (its reserve wrote them)
        UPDATE spend_windows s SET reserved_uc = s.reserved_uc + dres, spent_uc = s.spent_uc + dspent
            FROM jsonb_array_elements(p_counted::JSONB) r
            WHERE s.subject = r ->> 0 AND s.win = r ->> 1 AND s.start = (r ->> 2)::BIGINT;
        RETURN;
    END IF;
    INSERT INTO spend_windows AS s (subject, win, start, reserved_uc, spent_uc)
        SELECT r ->> 0, r ->> 1, (r ->> 2)::BIGINT, dres, dspent
        FROM jsonb_array_elements(p_counted::JSONB) r
        ON CONFLICT (subject, win, start)
        DO UPDATE SET reserved_uc = s.reserved_uc + dres, spent_uc = s.spent_uc + dspent;
    IF dres > 0 THEN  -- a reserve: buckets past the rolling window that no hold still counts in
        DELETE FROM spend_windows s USING jsonb_array_elements(p_counted::JSONB) r
            WHERE r ->> 1 = '5h' AND s.subject = r ->> 0 AND s.win = '5h'
            AND s.start < (r ->> 2)::BIGINT - 18000 AND s.reserved_uc = 0;
    END IF;
END;
$$;

-- The ledger batch of 0011 with the window caps: a reserve decides them in the same step as the
-- balance and the key's month (nothing changes for a key and account without window caps: no
-- further statement), records the rows it counted in, and its settle or release moves exactly
-- those. Beyond the hold nothing is charged under a window cap (the rest is the shortfall).
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
    -- Whether the key or account has a cap in a window other than the key's month (cached like
    -- the rows above); only then are spend_windows read or written.
    a_win BOOLEAN[] := '{}';
    k_win BOOLEAN[] := '{}';
    has_win BOOLEAN;
    w_free BIGINT;
    w_reason TEXT;
    w_rows TEXT;
    counted TEXT;
BEGIN
    -- Every lock the batch needs, first and in the order given (the caller sorts it).
    PERFORM pg_advisory_xact_lock(t.c, t.k) FROM jsonb_to_recordset(locks) AS t(c INT, k INT);

    FOR op IN SELECT * FROM jsonb_to_recordset(ops) AS x(
        kind TEXT, request_id TEXT, key_id TEXT, account_id BIGINT, month TEXT, amount BIGINT,
        minimum BIGINT, at DOUBLE PRECISION, expires DOUBLE PRECISION, endpoint TEXT, model TEXT,
        status TEXT, input_tokens BIGINT, output_tokens BIGINT, cache_creation_tokens BIGINT,
        cache_read_tokens BIGINT, cache_write_1h_tokens BIGINT, web_search_requests BIGINT)
    LOOP
        counted := NULL;
        outcome := NULL; amount_uc := 0; shortfall_uc := 0; balance_free_uc := 0; cap_free_uc := NULL;
        month := NULL; key_id := NULL; account_id := NULL; endpoint := NULL; model := NULL;
        created_at := NULL;
        finishes := FALSE;
        IF op.kind <> 'r' THEN
            DELETE FROM reservations r WHERE r.request_id = op.request_id
                RETURNING r.amount_uc, r.month, r.key_id, r.account_id, r.endpoint, r.model, r.created_at,
                    r.windows
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
            SELECT a.balance_uc - a.reserved_uc, (a.cap_5h_uc IS NOT NULL OR a.cap_day_uc IS NOT NULL
                    OR a.cap_week_uc IS NOT NULL OR a.monthly_cap_uc IS NOT NULL)
                INTO free, has_win FROM accounts a WHERE a.id = a_id;
            a_ids := a_ids || a_id;
            a_found := a_found || FOUND;
            a_win := a_win || COALESCE(has_win, FALSE);
            a_free := a_free || free;
            a_dres := a_dres || 0::BIGINT;
            a_dbal := a_dbal || 0::BIGINT;
            ai := array_length(a_ids, 1);
        END IF;
        ki := array_position(k_names, k_key || '/' || k_month);
        IF ki IS NULL THEN
            SELECT k.monthly_cap_uc, (k.cap_5h_uc IS NOT NULL OR k.cap_day_uc IS NOT NULL
                    OR k.cap_week_uc IS NOT NULL)
                INTO cap, has_win FROM api_keys k WHERE k.id = k_key;
            k_found := k_found || FOUND;
            k_win := k_win || COALESCE(has_win, FALSE);
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
                -- The tightest cap (storage.records.decide_hold): the windows' in checking
                -- order, then the key's month only when it has strictly less left.
                w_free := NULL; w_reason := NULL; w_rows := NULL;
                IF a_win[ai] OR k_win[ki] THEN
                    SELECT c.free_uc, c.reason, c.counted_rows INTO w_free, w_reason, w_rows
                        FROM modelgate_window_caps(op.key_id, op.account_id, op.at) c;
                END IF;
                IF w_reason IS NOT NULL AND (cap_free IS NULL OR w_free <= cap_free) THEN
                    affordable := LEAST(free, w_free);
                    IF affordable < op.minimum THEN
                        outcome := CASE WHEN w_free <= free THEN w_reason ELSE 'balance' END;
                    END IF;
                ELSE
                    affordable := CASE WHEN cap_free IS NULL THEN free ELSE LEAST(free, cap_free) END;
                    IF affordable < op.minimum THEN
                        outcome := CASE WHEN cap_free IS NOT NULL AND cap_free <= free
                            THEN 'monthly_cap' ELSE 'balance' END;
                    END IF;
                END IF;
                IF outcome IS NOT NULL THEN
                    amount_uc := GREATEST(0, affordable);
                ELSE
                    granted := LEAST(op.amount, affordable);
                    IF w_rows IS NOT NULL THEN
                        counted := w_rows;
                        PERFORM modelgate_window_move(counted, granted, 0);
                    END IF;
                    -- A request id already held fails the statement (unique key): the caller
                    -- then runs each operation alone, so only that one is refused.
                    INSERT INTO reservations (request_id, key_id, account_id, month, amount_uc,
                        created_at, expires_at, endpoint, model, windows)
                        VALUES (op.request_id, op.key_id, op.account_id, op.month, granted, op.at,
                            op.expires, op.endpoint, op.model, counted);
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
                    IF held.windows IS NOT NULL THEN
                        room := 0;  -- under a window cap nothing beyond the hold
                    ELSIF cap IS NOT NULL THEN
                        room := LEAST(room, GREATEST(0, cap - used));
                    END IF;
                    charged := held.amount_uc + LEAST(cost - held.amount_uc, room);
                    shortfall_uc := cost - charged;
                END IF;
            END IF;
            IF held.windows IS NOT NULL THEN
                -- Settled in the periods the hold was counted in.
                PERFORM modelgate_window_move(held.windows, -held.amount_uc, charged);
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
