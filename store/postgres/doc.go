// Package postgres is a limit store in PostgreSQL, shared by every instance
// of an app that uses the same database.
//
// The store runs over the app's own *pgxpool.Pool and opens no connections
// of its own; several stores (one per secret, say) share one pool, and a
// prefix can have one handle per pool:
//
//	if err := postgres.Migrate(ctx, pool); err != nil { ... } // or: go run ./cmd/gatecount migrate
//	s, err := postgres.New(ctx, pool, postgres.Options{Secret: secret})
//	if err != nil { ... }
//	defer s.Close() // stops the background sweep; the pool stays open
//	signIn, err := s.Handle("signin:")
//
// # Schema
//
// Migrate creates the table gatecount_entries, its index and two
// functions, from SQL embedded in this package, and records each migration
// it applied in gatecount_migrations. It is idempotent, and instances that
// start at once can all run it, directly or through a pooler: each
// migration is a transaction that first takes a transaction-scoped
// advisory lock, which ends with it, on its own server connection. A
// migration waits at most MigrationLockTimeout for a lock (lock_timeout, for
// its transaction alone), then gives up with an error matching
// ErrMigrationLocked. New refuses a database that lacks the current schema
// with an error matching ErrNotMigrated.
//
//	gatecount_entries(keyhash bytea PRIMARY KEY, fingerprint text,
//	                  value text, expires_at timestamptz)
//	INDEX (expires_at, fingerprint)  -- the sweep, and the bound's count
//
// Instances built for schema 1 must not run beside instances built for
// schema 2 (see migrations/0002_row_locks.sql): they lock keys differently.
//
// # Keys and secrets
//
// No key is stored. A row is named by keyhash, the HMAC-SHA-256 of the
// handle's prefix and the key under the secret (Options.Secret; see package
// keyhash), and records the secret's fingerprint. After the secret changes,
// instances under the new one neither read the rows of the old one nor count
// them against their bound; those rows go when they expire, not sooner, so
// instances still on the old secret during a rolling deployment keep
// counting with them.
//
// The secret is required: New returns an error matching ErrNoSecret when it
// is empty, and one matching keyhash.ErrWeakSecret when it is shorter than
// keyhash.MinSecretLen, each saying how to make one. The store reads no
// environment variable; the app passes its secret in (package config reads
// GATECOUNT_SECRET).
//
// # Time
//
// Expiry is judged on the database server's clock, never the process's, to
// the millisecond, so instances whose clocks differ make the same
// decisions. Update and gatecount_count take clock_timestamp() after their
// keys are locked; that is the time apply is given and the time entries are
// judged live against. The one-statement Count judges at the start of its
// statement, now(), which can be before it gets the key's row: a count that
// waited for a window's end is still counted in that window.
//
// # Locks
//
// Every path serialises the calls on a key through the key's row: the
// primary key serialises first inserts, and a row lock the rest. A key
// without a row that must be locked gets a placeholder, a row of the
// store's secret with an empty value that expired at the epoch: nothing
// reads it as live, the bound does not count it, and it is removed by the
// call that made it unless that call writes the key (the sweep removes one
// left behind). Paths that lock several rows lock them in ascending keyhash
// order, so that they never deadlock.
//
// # Update
//
// Update runs in one short transaction of its own, on a connection it takes
// from the pool, in two round trips. It never joins a transaction the
// caller has open: a pgx.Tx is not a pool, so the store cannot be handed
// one, and a count committed here is not undone when the caller's
// transaction rolls back.
//
// Updates of one key from the same instance first take turns in the
// process, first come first served, and only then take a connection: the
// row lock serialises them anyway, but waiters on a row lock each hold a
// connection, and race for the row's next version each time it is
// released, so that an unlucky call could lose many times in a row. The
// wait ends with the call's context. Keys share 1,024 queues by keyhash,
// taken in ascending order.
//
// The two round trips are one transaction on one connection (see
// "Statements" for how each mode sends them). In the extended protocol it
// is the implicit transaction of a pgconn pipeline, which lasts up to the
// pipeline's Sync, with no BEGIN or COMMIT statement; in the simple
// protocol, round trip 1 starts with BEGIN and round trip 2 ends with
// COMMIT. A call that ends before its transaction does closes the
// connection, which rolls the transaction back. Round
// trip 1 locks and reads the keys' rows, then the clock (an aggregate is
// computed after it has consumed, and so locked, every row), and flushes:
//
//	SELECT date_trunc('milliseconds', clock_timestamp()),
//	       set_config('synchronous_commit', 'off', true),  -- unless Options.SyncCommit
//	       array_agg(keyhash), array_agg(fingerprint), array_agg(value), array_agg(expires_at)
//	  FROM (SELECT ... FROM gatecount_entries WHERE keyhash = ANY($keyhashes)
//	         ORDER BY keyhash FOR UPDATE) AS l;
//
// apply then runs in the process, and round trip 2 writes only what it
// changed (rows it holds by UPDATE, a key without a row by INSERT) and
// sends Sync, which commits:
//
//	SELECT gatecount_admit($fp, $added, $max, $now, $boundlock); -- only near the bound, see below
//	UPDATE gatecount_entries SET ... FROM unnest($keyhashes, $values, $expiries) ...;
//	INSERT INTO gatecount_entries ... ON CONFLICT (keyhash) DO NOTHING;
//	DELETE FROM gatecount_entries WHERE keyhash = ANY($deleted);
//	-- Sync
//
// With one key, every statement names it by a scalar, keyhash = $1,
// instead of an array: PostgreSQL plans a prepared statement afresh on every
// call while its generic plan, made for an array of unknown length, looks
// dearer than a plan for the array at hand, and planning would cost more
// than running the statement. The one-key read returns scalars, in one row
// whether the key has a row or not: the clock and, left-joined to it, the
// key's locked row (the join's output, and so the clock, is computed once
// the row is locked), which costs the server less than aggregates would.
//
// Inserting a key this way is optimistic. When the INSERT finds that
// another transaction inserted the key meanwhile (it is then the
// transaction's only write, so the transaction commits empty), or when
// apply writes a key without a row while the transaction holds other rows
// or writes several keys without rows, Update starts again, apply
// included, with placeholders: round trip 1 then first locks every key's
// row, inserting placeholders in keyhash order,
//
//	INSERT INTO gatecount_entries AS g (keyhash, fingerprint, value, expires_at)
//	SELECT k, $fp, '', timestamptz 'epoch' FROM unnest($keyhashes) AS u(k) ORDER BY k
//	ON CONFLICT (keyhash) DO UPDATE SET value = g.value WHERE false -- locks, changes nothing
//	RETURNING g.keyhash;
//
// and round trip 2 deletes the placeholders apply left empty.
//
// A statement that fails rolls the transaction back at the Sync. When apply
// fails, round trip 2 only deletes the placeholders the call inserted, so
// that the transaction commits having changed nothing. When the call's
// deadline passes mid-round-trip, the connection is closed, which rolls
// back too (see "Deadlines" below).
//
// # Statements
//
// The store talks to PostgreSQL through pgx's public API alone: a pgconn
// pipeline in the extended protocol, or pgx batches in the simple protocol,
// with arguments encoded and results decoded by the connection's pgtype
// map. It follows the query exec mode of the pool's connections
// (pool.Config().ConnConfig.DefaultQueryExecMode, default_query_exec_mode
// in a connection string), which New reads:
//
//   - cache_statement (pgx's default): the statements are prepared by name
//     on each connection the first time it runs one, and kept, as pgx's
//     statement cache keeps its own; a call then sends only their
//     arguments. That needs a direct connection, or a pooler that keeps
//     prepared statements (session mode; PgBouncer 1.21 or later with
//     max_prepared_statements in transaction mode). A statement that a
//     connection lost (to DEALLOCATE or DISCARD) fails one call and is
//     prepared again on the next.
//   - exec, cache_describe, describe_exec: no statement is prepared by
//     name. Each is sent as an unnamed statement, parsed, bound and run in
//     one round trip, with the parameter types the store declares (so
//     describe_exec's describing round trip is not needed).
//   - simple_protocol: statements go in the simple query protocol, their
//     arguments written into them by pgx; an Update's transaction is
//     opened by BEGIN and ended by COMMIT (ROLLBACK when a statement
//     failed).
//
// Every mode runs the same statements, with the same transactions and
// round trips. New returns an error matching ErrPoolSetting, naming it, for
// a setting with which pgx runs no query (statement_cache_capacity=0 with
// cache_statement, description_cache_capacity=0 with cache_describe), and
// for cache_statement on a pool whose connections lose prepared statements
// between transactions: with cache_statement New prepares a statement on one
// connection, has a second hold a transaction open (a pooler in
// transaction mode hands it the server connection the first just
// released), and runs the statement on the first, which behind such a
// pooler fails.
//
// With statements prepared by name, PostgreSQL settles on one plan for each
// after its first few runs and keeps it until the table's statistics
// change. A one-key lookup planned on a nearly empty table is a sequential
// scan, and on a server whose autovacuum does not analyze the table it
// would stay one as the table grows. So a connection prepares the
// statements again whenever the estimate of live entries (see "The bound")
// has grown past four times its value at the last preparation plus 1,024:
// on a table of more than a few pages the lookups use the primary key. The
// sweep and the count of live entries are never prepared by name: they are
// planned afresh each time they run.
//
// # Behind a pooler
//
// In transaction mode (PgBouncer's pool_mode=transaction, and most hosted
// poolers) a client's statements run on whichever server connection the
// pooler picks for each transaction, so nothing may outlive a transaction
// on the server: no statement prepared by name (set exec, or any mode but
// cache_statement: "postgres://…?default_query_exec_mode=exec"), no
// session setting, no session lock. The store needs none: a count is one
// statement, an Update one transaction (which the pooler keeps on one
// server connection until it ends), synchronous_commit is set for the
// transaction alone, and Migrate's lock is transaction-scoped. Session mode
// works with any mode. The package's tests run through a real PgBouncer in
// both modes (see the README).
//
// # Deadlines
//
// A call takes its connection from the pool under its context, and pgx
// watches that context during the call's round trips (with
// context.AfterFunc). When the context ends mid-round-trip, pgx interrupts
// the I/O and closes the connection, and the call fails with an error
// matching the context's (context.DeadlineExceeded at the guard's deadline,
// 2 s by default): the transaction rolls back, unless the server had
// committed it just before, in which case a call answered unavailable was
// counted all the same. A call whose context is done before it starts does
// not start. A batch of single-key counts runs under the deadline of the
// call that leads it but not its cancellation, so that a call cancelled
// does not fail the others of its batch.
//
// # Count
//
// The store implements store.Counter: Handle.Count, and so a limiter's
// Attempt, is one statement and one round trip. A single key far from the
// bound is counted by one plain statement, with no advisory lock and no
// transaction block:
//
//	INSERT INTO gatecount_entries AS g (keyhash, fingerprint, value, expires_at)
//	SELECT $1, $fp, $n, date_trunc('milliseconds', now()) + $window
//	  FROM (SELECT set_config('synchronous_commit', 'off', true)) AS c(s) WHERE c.s = 'off'
//	ON CONFLICT (keyhash) DO UPDATE SET
//	  value = CASE WHEN <expired> THEN EXCLUDED.value ELSE (g.value::bigint + $n)::text END,
//	  expires_at = CASE WHEN <expired> THEN EXCLUDED.expires_at ELSE g.expires_at END
//	WHERE <expired> OR <g.value is a count of at most $max - $n>
//	RETURNING g.value::bigint, g.expires_at, date_trunc('milliseconds', now());
//
// where <expired> is g.expires_at <= date_trunc('milliseconds', now()) or
// a row of another secret. Concurrent first counts of a key are serialised
// by the primary key, and the conflict path locks the row and decides on
// its newest version. When it returns no row there was no room, and a
// second round trip reads the key to tell its count; if that read finds
// room after all (the key changed meanwhile), the count goes to the
// function below, which decides under lock.
//
// Single-key counts of concurrent calls share statements. An eighth of the
// pool's connections (at least one) run such statements at a time; a call
// that arrives while they all run waits in a queue, and when one ends the
// first call of the queue counts, in one statement, itself and up to 63
// calls queued behind it:
//
//	INSERT INTO gatecount_entries AS g (keyhash, fingerprint, value, expires_at)
//	SELECT u.k, $fp, u.n::text, date_trunc('milliseconds', now()) + u.w * interval '1 millisecond'
//	  FROM unnest($keyhashes, $ns, $windows) AS u(k, n, w), (SELECT set_config(...)) AS c(s)
//	 WHERE c.s = 'off'
//	 ORDER BY u.k
//	ON CONFLICT (keyhash) DO UPDATE SET ... -- as above, with each key's own n, cap and window
//	RETURNING g.keyhash, g.value::bigint, g.expires_at, date_trunc('milliseconds', now());
//
// Each key is counted or refused on its own, exactly as by the statement
// above; the keys are inserted, and so locked, in ascending keyhash order,
// so such statements never deadlock with each other or with Update. A
// statement costs the database little more for several keys than for one,
// so under load this counts more keys a second than a statement per call.
// A call whose key is queued or counted already does not wait for it: it
// runs its own statement, which the key's row serialises with the other.
// The call that leads a statement runs it on its own goroutine, under its
// deadline; the others wait for its answer, or for their own context,
// whichever comes first. A failed statement fails every call it counted.
//
// Several keys, or any key near the bound, go to SELECT ... FROM
// gatecount_count(...), a PL/pgSQL function that locks the keys' rows in
// ascending order (with placeholders), reads their counters on the
// server's clock, and counts them all or none. Both give exactly the
// results of the generic Count over Update; the contract suite checks it,
// and TestMixedPaths runs the three paths on one key at once.
//
// # Commit
//
// By default each transaction commits with synchronous_commit off, for
// that transaction alone: it answers, and releases its locks, before its
// WAL reaches the disk. A disk flush takes milliseconds and would otherwise
// cap one hot key at a few hundred counts a second. A crash of the
// database server can lose the counts of its last moments (at most three
// times wal_writer_delay); the table stays consistent. The setting is made
// by set_config(..., true) inside a statement the call sends anyway, so it
// costs no statement of its own and never outlives the transaction on the
// pool's connection. Options.SyncCommit leaves it out, and every commit
// waits for the disk.
//
// # The bound
//
// A store holds at most Options.MaxEntries live entries of its secret
// (store.DefaultMaxEntriesDatabase by default). Counting a million rows on
// every new key would be too slow, so the store keeps an estimate: an exact
// count (an index-only scan of (expires_at, fingerprint)) made when the
// store starts, after each sweep and every Options.CountInterval, plus the
// keys this instance added since. While the estimate is more than a
// twentieth of the bound (at least 1,000 entries, so small bounds are
// always exact) below it, new keys are admitted without counting. Nearer
// the bound, or when the estimate is older than two intervals, every new
// key is admitted by gatecount_admit: under one transaction lock per
// secret it counts the live rows exactly and refuses the transaction when
// it would exceed the bound, so near the bound admission is exact across
// instances, at the cost of a count per new key. The estimate misses what
// other instances added since the last count: if together they add more
// than the margin within one CountInterval while the store is below the
// margin, the bound can be overshot by the excess until the next count.
//
// # Sweep
//
// Expired rows, of every secret, are deleted when the store starts and
// every Options.SweepInterval (5 minutes) after, in the background, in
// statements of at most SweepBatch rows each, so that no sweep holds many
// row locks for long:
//
//	DELETE FROM gatecount_entries
//	 WHERE keyhash IN (SELECT keyhash FROM gatecount_entries
//	                    WHERE expires_at <= now() LIMIT 1000 FOR UPDATE SKIP LOCKED)
//	   AND expires_at <= now();
//
// It skips rows that calls hold, so it never waits for a count nor makes
// one wait.
//
// Store.Sweep does the same on demand and says how many rows went.
//
// # Faults
//
// The guard of package store answers every call within its deadline (2 s
// by default), runs at most 64 calls at once (the rest wait their turn),
// and opens a handle's breaker after repeated failures; a database that is
// down, slow or unreachable is answered as unavailable. Nothing here needs restarting when the database
// comes back: broken connections are dropped by the pool, and the next call
// opens a new one.
//
// Errors wrap pgx's with what the store was doing. Logs carry a stable
// "kind" attribute and never a key.
//
// # Benchmarks
//
// The package's benchmarks (bench_test.go) set each store's Update, Count
// and the limiter's Attempt beside two floors in one run: SELECT 1 (a
// round trip) and a single-statement upsert counter on a table of its own
// (the best a special-purpose store could do). Floors and stores run under
// the same conditions:
//
//   - Plain TCP. The benchmark pools add sslmode=disable to the test URL
//     (unless it, or PGSSLMODE, names a mode). pgx's default, prefer, uses
//     TLS whenever the server offers it, as distribution packages of
//     PostgreSQL do on loopback too, while the reference figures of the
//     store's issue are for a stock server over TCP loopback, without TLS.
//     Over TLS on this machine the floor lost little but Count and Attempt
//     lost about a quarter, so TLS figures understate the store against
//     its goal. This is a benchmark setting only: an app whose database is
//     across a network should keep TLS (sslmode=verify-full), and the
//     store and the tests take the mode from the URL they are given.
//   - Warm-up. Pools connect before the timer starts, and each benchmark
//     function's stores start in a fresh schema, as the upsert floor starts
//     on a fresh table. Longer fixed counts (-benchtime 30000x) gave the
//     same store/floor ratios as the default 1s within the machine's noise,
//     so the default is kept.
//
// Compare a store with its floor in the same run, not across runs.
package postgres
