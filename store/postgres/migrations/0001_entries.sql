-- gatecount migration 1: the entries table and the functions the store calls.
--
-- One row per (prefix, key): keyhash is HMAC-SHA-256 of the prefix and key
-- under the app's secret, fingerprint names that secret, value is the
-- entry's JSON as written, expires_at is when it stops being live on the
-- database server's clock. Keys are never stored.
CREATE TABLE gatecount_entries (
    keyhash     bytea       PRIMARY KEY,
    fingerprint text        NOT NULL,
    value       text        NOT NULL,
    expires_at  timestamptz NOT NULL
) WITH (fillfactor = 80);

-- The sweep finds expired rows of every secret by expires_at.
CREATE INDEX gatecount_entries_expires_at ON gatecount_entries (expires_at);

-- The bound counts live rows of one secret with an index-only scan.
CREATE INDEX gatecount_entries_fingerprint_expires_at
    ON gatecount_entries (fingerprint, expires_at);

-- gatecount_admit counts the live rows of secret fp at now_ts, after taking
-- the bound's transaction lock so that admissions of new keys near the bound
-- are counted one at a time. It raises SQLSTATE GCF01 when added more rows
-- would exceed max_entries; the caller's transaction is then rolled back.
CREATE FUNCTION gatecount_admit(fp text, added integer, max_entries bigint,
                                now_ts timestamptz, bound_lock bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    live bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(bound_lock);
    SELECT count(*) INTO live
      FROM gatecount_entries
     WHERE fingerprint = fp AND expires_at > now_ts;
    IF live + added > max_entries THEN
        RAISE EXCEPTION USING ERRCODE = 'GCF01',
            MESSAGE = 'gatecount: limit store full',
            DETAIL = live::text;
    END IF;
    RETURN live;
END
$$;

-- gatecount_count is the fixed-window counter of store.Counter in one
-- statement: it locks the keys (locks, ascending), reads their live
-- counters on the server's clock and, when every key has room for n more,
-- counts them all; otherwise it changes nothing. keyhashes, maxes and
-- windows_ms are in the caller's key order. Near the bound (exact_bound) new
-- keys are admitted through the bound's lock with an exact count. With
-- async_commit the transaction commits without waiting for its WAL flush.
--
-- Results: now_ms, the server's time in Unix milliseconds; allowed;
-- limiting, the 0-based index of the first key without room or -1;
-- counts and expires_ms per key (0 for no counter); added, the new rows
-- written; bad, the 0-based index of a live value that is not a count or -1;
-- is_full, when the bound refused new keys (nothing written); live, the exact
-- count of live rows when one was made, or -1.
CREATE FUNCTION gatecount_count(keyhashes bytea[], locks bigint[], fp text,
                                maxes bigint[], windows_ms bigint[], n bigint,
                                max_entries bigint, exact_bound boolean,
                                bound_lock bigint, async_commit boolean,
                                OUT now_ms bigint, OUT allowed boolean,
                                OUT limiting integer, OUT counts bigint[],
                                OUT expires_ms bigint[], OUT added integer,
                                OUT bad integer, OUT is_full boolean,
                                OUT live bigint)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    nkeys  integer := cardinality(keyhashes);
    lk     bigint;
    now_ts timestamptz;
    v      text;
    e      timestamptz;
    c      numeric;
    isnew  boolean[] := array_fill(false, ARRAY[nkeys]);
BEGIN
    IF async_commit THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    FOREACH lk IN ARRAY locks LOOP
        PERFORM pg_advisory_xact_lock(lk);
    END LOOP;
    now_ts := date_trunc('milliseconds', clock_timestamp());
    now_ms := floor(extract(epoch FROM now_ts) * 1000)::bigint;
    allowed := false;
    limiting := -1;
    added := 0;
    bad := -1;
    is_full := false;
    live := -1;
    counts := array_fill(0::bigint, ARRAY[nkeys]);
    expires_ms := array_fill(0::bigint, ARRAY[nkeys]);

    FOR i IN 1..nkeys LOOP
        SELECT g.value, g.expires_at INTO v, e
          FROM gatecount_entries g
         WHERE g.keyhash = keyhashes[i] AND g.fingerprint = fp
           AND g.expires_at > now_ts;
        IF FOUND THEN
            IF v !~ '^-?[0-9]{1,19}$' THEN
                bad := i - 1;
                RETURN;
            END IF;
            c := v::numeric;
            IF c < 0 OR c > 9223372036854775807 THEN
                bad := i - 1;
                RETURN;
            END IF;
            counts[i] := c::bigint;
            expires_ms[i] := floor(extract(epoch FROM e) * 1000)::bigint;
        ELSE
            isnew[i] := true;
            added := added + 1;
        END IF;
        IF limiting < 0 AND counts[i] > maxes[i] - n THEN
            limiting := i - 1;
        END IF;
    END LOOP;
    IF limiting >= 0 THEN
        added := 0;
        RETURN;
    END IF;

    IF added > 0 AND exact_bound THEN
        PERFORM pg_advisory_xact_lock(bound_lock);
        SELECT count(*) INTO live
          FROM gatecount_entries
         WHERE fingerprint = fp AND expires_at > now_ts;
        IF live + added > max_entries THEN
            is_full := true;
            RETURN;
        END IF;
    END IF;

    FOR i IN 1..nkeys LOOP
        counts[i] := counts[i] + n;
        IF isnew[i] THEN
            expires_ms[i] := now_ms + windows_ms[i];
            INSERT INTO gatecount_entries AS g (keyhash, fingerprint, value, expires_at)
            VALUES (keyhashes[i], fp, counts[i]::text,
                    timestamptz 'epoch' + expires_ms[i] * interval '1 millisecond')
            ON CONFLICT (keyhash) DO UPDATE
               SET fingerprint = EXCLUDED.fingerprint,
                   value = EXCLUDED.value,
                   expires_at = EXCLUDED.expires_at;
        ELSE
            UPDATE gatecount_entries SET value = counts[i]::text
             WHERE keyhash = keyhashes[i];
        END IF;
    END LOOP;
    allowed := true;
END
$$;
