-- gatecount migration 2: every path locks a key through its row.
--
-- Schema 1 serialised the updates of a key with a transaction-scoped
-- advisory lock. From schema 2 on, every path locks the key's row instead,
-- so that the single-key count can be one plain INSERT ... ON CONFLICT DO
-- UPDATE, serialised by the primary key alone. A key without a row gets a
-- placeholder first: a row of its secret that expired at the epoch, which
-- nothing reads as live, which the bound does not count, and which the sweep
-- removes if it is ever left behind. Paths that lock several keys lock them
-- in ascending keyhash order, so they never deadlock.
--
-- Instances built for schema 1 must not run beside instances built for
-- schema 2: their Update would not see the new paths' locks. Its
-- gatecount_count is dropped, so their multi-key counts fail rather than
-- count wrongly.
-- One index serves both the sweep (expired rows of every secret, by
-- expires_at) and the bound (live rows of one secret, index-only), so that a
-- new row costs two index entries, not three.
DROP INDEX gatecount_entries_expires_at;
DROP INDEX gatecount_entries_fingerprint_expires_at;
CREATE INDEX gatecount_entries_expires_at_fingerprint
    ON gatecount_entries (expires_at, fingerprint);

DROP FUNCTION gatecount_count(bytea[], bigint[], text, bigint[], bigint[],
                              bigint, bigint, boolean, bigint, boolean);

-- gatecount_count is the fixed-window counter of store.Counter in one
-- statement: it locks the keys' rows (inserting placeholders for keys
-- without one, in keyhash order), reads their live counters on the server's
-- clock and, when every key has room for n more, counts them all; otherwise
-- it changes nothing and removes the placeholders it inserted. keyhashes,
-- maxes and windows_ms are in the caller's key order. Near the bound
-- (exact_bound) new keys are admitted through the bound's lock with an exact
-- count. With async_commit the transaction commits without waiting for its
-- WAL flush.
--
-- Results: now_ms, the server's time in Unix milliseconds; allowed;
-- limiting, the 0-based index of the first key without room or -1;
-- counts and expires_ms per key (0 for no counter); added, the new live
-- rows written; bad, the 0-based index of a live value that is not a count
-- or -1; is_full, when the bound refused new keys (nothing written); live,
-- the exact count of live rows when one was made, or -1.
CREATE FUNCTION gatecount_count(keyhashes bytea[], fp text,
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
    nkeys        integer := cardinality(keyhashes);
    placeholders bytea[];
    now_ts       timestamptz;
    v            text;
    e            timestamptz;
    c            numeric;
    isnew        boolean[] := array_fill(false, ARRAY[nkeys]);
BEGIN
    IF async_commit THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    WITH locked AS (
        INSERT INTO gatecount_entries AS g (keyhash, fingerprint, value, expires_at)
        SELECT k, fp, '', timestamptz 'epoch' FROM unnest(keyhashes) AS u(k) ORDER BY k
        ON CONFLICT (keyhash) DO UPDATE SET value = g.value WHERE false
        RETURNING g.keyhash
    )
    SELECT coalesce(array_agg(keyhash), '{}') INTO placeholders FROM locked;
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
            -- A count is written as store.AppendCount writes it.
            IF v !~ '^(0|[1-9][0-9]{0,18})$' THEN
                bad := i - 1;
                EXIT;
            END IF;
            c := v::numeric;
            IF c > 9223372036854775807 THEN
                bad := i - 1;
                EXIT;
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

    IF bad < 0 AND limiting < 0 AND added > 0 AND exact_bound THEN
        PERFORM pg_advisory_xact_lock(bound_lock);
        SELECT count(*) INTO live
          FROM gatecount_entries
         WHERE fingerprint = fp AND expires_at > now_ts;
        IF live + added > max_entries THEN
            is_full := true;
        END IF;
    END IF;
    IF bad >= 0 OR limiting >= 0 OR is_full THEN
        added := 0;
        DELETE FROM gatecount_entries WHERE keyhash = ANY(placeholders);
        RETURN;
    END IF;

    FOR i IN 1..nkeys LOOP
        counts[i] := counts[i] + n;
        IF isnew[i] THEN
            expires_ms[i] := now_ms + windows_ms[i];
            UPDATE gatecount_entries
               SET fingerprint = fp, value = counts[i]::text,
                   expires_at = timestamptz 'epoch' + expires_ms[i] * interval '1 millisecond'
             WHERE keyhash = keyhashes[i];
        ELSE
            UPDATE gatecount_entries SET value = counts[i]::text
             WHERE keyhash = keyhashes[i];
        END IF;
    END LOOP;
    allowed := true;
END
$$;
