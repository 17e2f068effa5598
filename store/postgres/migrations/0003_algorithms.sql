-- gatecount migration 3: the count of every algorithm in one statement.
--
-- gatecount_count_algorithms is gatecount_count for budgets of any
-- algorithm, mixed in one call: the rule of store.ApplyCount in SQL. Per
-- key, algs holds the algorithm (0 fixed window, 1 sliding window, 2 token
-- bucket), caps its capacity (a bucket's burst), windows_ms its window and
-- intervals_us a bucket's refill interval. Values are as store documents
-- them: a fixed window's count, a sliding window's ascending Unix
-- milliseconds as a JSON array, a bucket's {"tat":<Unix µs>}. It locks,
-- admits through the bound and answers as gatecount_count does, expires_ms
-- being when one more unit is admitted (0 for none).
CREATE FUNCTION gatecount_count_algorithms(keyhashes bytea[], fp text,
                                           algs integer[], caps bigint[],
                                           windows_ms bigint[], intervals_us bigint[],
                                           n bigint, max_entries bigint,
                                           exact_bound boolean, bound_lock bigint,
                                           async_commit boolean,
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
    now_us       bigint;
    v            text;
    e            timestamptz;
    c            numeric;
    isnew        boolean[] := array_fill(false, ARRAY[nkeys]);
    tats         bigint[] := array_fill(0::bigint, ARRAY[nkeys]);
    newest       bigint[] := array_fill(0::bigint, ARRAY[nkeys]);
    kept         text[] := array_fill(''::text, ARRAY[nkeys]);
    times        bigint[];
    live_times   bigint[];
    prev         bigint;
    tm           bigint;
    iv           bigint;
    at           bigint;
    exp_ms       bigint;
    val          text;
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
    now_us := now_ms * 1000;
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
        IF NOT FOUND THEN
            isnew[i] := true;
            added := added + 1;
        END IF;
        IF algs[i] = 1 THEN
            live_times := '{}';
            IF FOUND THEN
                IF length(v) > 4096 OR v !~ '^\[(0|[1-9][0-9]{0,15})(,(0|[1-9][0-9]{0,15}))*\]$' THEN
                    bad := i - 1;
                    EXIT;
                END IF;
                times := string_to_array(substr(v, 2, length(v) - 2), ',')::bigint[];
                prev := -1;
                FOREACH tm IN ARRAY times LOOP
                    IF tm < prev THEN
                        bad := i - 1;
                        EXIT;
                    END IF;
                    prev := tm;
                    IF tm > now_ms - windows_ms[i] THEN
                        live_times := live_times || tm;
                    END IF;
                END LOOP;
                IF bad >= 0 THEN
                    EXIT;
                END IF;
                newest[i] := prev;
            END IF;
            counts[i] := coalesce(cardinality(live_times), 0);
            kept[i] := array_to_string(live_times, ',');
            IF counts[i] > 0 THEN
                expires_ms[i] := live_times[1] + windows_ms[i];
            END IF;
        ELSIF algs[i] = 2 THEN
            tats[i] := now_us;
            IF FOUND THEN
                IF v !~ '^\{"tat":(0|[1-9][0-9]{0,15})\}$' THEN
                    bad := i - 1;
                    EXIT;
                END IF;
                tats[i] := greatest(substring(v FROM '[0-9]+')::bigint, now_us);
            END IF;
            iv := intervals_us[i];
            counts[i] := (tats[i] - now_us + iv - 1) / iv;
            IF counts[i] > 0 THEN
                expires_ms[i] := (tats[i] - (least(counts[i], caps[i]) - 1) * iv + 999) / 1000;
            END IF;
        ELSIF FOUND THEN
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
        END IF;
        IF limiting < 0 AND counts[i] > caps[i] - n THEN
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
        IF algs[i] = 1 THEN
            at := greatest(now_ms, newest[i]);
            val := kept[i];
            FOR j IN 1..n LOOP
                IF val <> '' THEN
                    val := val || ',';
                END IF;
                val := val || at::text;
            END LOOP;
            IF counts[i] = 0 THEN
                expires_ms[i] := at + windows_ms[i];
            END IF;
            counts[i] := counts[i] + n;
            val := '[' || val || ']';
            exp_ms := at + windows_ms[i];
        ELSIF algs[i] = 2 THEN
            iv := intervals_us[i];
            tats[i] := tats[i] + n * iv;
            counts[i] := counts[i] + n;
            expires_ms[i] := (tats[i] - (least(counts[i], caps[i]) - 1) * iv + 999) / 1000;
            val := '{"tat":' || tats[i]::text || '}';
            exp_ms := (tats[i] + 999) / 1000;
        ELSE
            counts[i] := counts[i] + n;
            IF isnew[i] THEN
                expires_ms[i] := now_ms + windows_ms[i];
            END IF;
            val := counts[i]::text;
            exp_ms := expires_ms[i];
        END IF;
        UPDATE gatecount_entries
           SET fingerprint = fp, value = val,
               expires_at = timestamptz 'epoch' + exp_ms * interval '1 millisecond'
         WHERE keyhash = keyhashes[i];
    END LOOP;
    allowed := true;
END
$$;
