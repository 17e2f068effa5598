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
// Migrate creates the table gatecount_entries, its indexes and two
// functions, from SQL embedded in this package, and records each migration
// it applied in gatecount_migrations. It is idempotent and takes a session
// advisory lock, so instances that start at once can all run it. New
// refuses a database that lacks the current schema with an error matching
// ErrNotMigrated.
//
//	gatecount_entries(keyhash bytea PRIMARY KEY, fingerprint text,
//	                  value text, expires_at timestamptz)
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
// Expiry is judged on the database server's clock, never the process's:
// each call takes clock_timestamp(), to the millisecond, inside its own
// transaction after its keys are locked, and that is the time apply is
// given and the time entries are judged live against. Instances whose
// clocks differ make the same decisions.
//
// # Update
//
// Update runs in one short transaction of its own, on a connection it takes
// from the pool, in two round trips. It never joins a transaction the
// caller has open: a pgx.Tx is not a pool, so the store cannot be handed
// one, and a count committed here is not undone when the caller's
// transaction rolls back. Round trip 1 is one pipelined batch:
//
//	BEGIN;
//	SET LOCAL synchronous_commit = off;                 -- unless Options.SyncCommit
//	SELECT count(pg_advisory_xact_lock(l)) FROM unnest($locks) AS l;
//	SELECT c.now, g.keyhash, g.value, g.expires_at
//	  FROM (SELECT date_trunc('milliseconds', clock_timestamp()) AS now) c
//	  LEFT JOIN gatecount_entries g
//	    ON g.keyhash = ANY($keyhashes) AND g.fingerprint = $fp AND g.expires_at > c.now;
//
// The locks are transaction-scoped advisory locks on the first 8 bytes of
// each keyhash, taken in ascending order, so that multi-key updates never
// deadlock and a key's first update is serialised like every other (a row
// lock could not cover a row that does not exist yet). apply then runs in
// the process, and round trip 2 writes only what it changed:
//
//	SELECT gatecount_admit($fp, $added, $max, $now, $boundlock); -- only near the bound, see below
//	INSERT INTO gatecount_entries (keyhash, fingerprint, value, expires_at)
//	  SELECT k, $fp, v, e FROM unnest($keyhashes, $values, $expiries) AS u(k, v, e)
//	  ON CONFLICT (keyhash) DO UPDATE SET fingerprint = EXCLUDED.fingerprint,
//	    value = EXCLUDED.value, expires_at = EXCLUDED.expires_at;
//	DELETE FROM gatecount_entries WHERE keyhash = ANY($deleted);
//	COMMIT;
//
// A failure after BEGIN rolls back, or, when the call's context is done,
// leaves the connection to be destroyed by the pool.
//
// # Count
//
// The store implements store.Counter: Handle.Count, and so a limiter's
// Attempt, is one statement and one round trip. A single key far from the
// bound is counted by one plain statement: it takes the key's advisory lock
// (the same as Update's, so the two never interleave), reads the clock, and
// counts with INSERT ... ON CONFLICT (keyhash) DO UPDATE ... WHERE <room
// left> RETURNING, which decides on the row's newest version; when there is
// no room it writes nothing, and a SELECT ... FOR UPDATE of the row in the
// same statement tells the count as it is. Several keys, or any key near the
// bound, go to SELECT ... FROM gatecount_count(...), a PL/pgSQL function
// that takes the keys' advisory locks in ascending order, reads their
// counters on the server's clock, and counts them all or none. Both give
// exactly the results of the generic Count over Update; the contract suite
// checks it.
//
// # Commit
//
// By default each transaction commits with synchronous_commit off, for
// that transaction alone: it answers, and releases its locks, before its
// WAL reaches the disk. A disk flush takes milliseconds and would otherwise
// cap one hot key at a few hundred counts a second. A crash of the
// database server can lose the counts of its last moments (at most three
// times wal_writer_delay); the table stays consistent. Options.SyncCommit
// restores synchronous commits.
//
// # The bound
//
// A store holds at most Options.MaxEntries live entries of its secret
// (store.DefaultMaxEntriesDatabase by default). Counting a million rows on
// every new key would be too slow, so the store keeps an estimate: an exact
// count (an index-only scan of (fingerprint, expires_at)) made when the
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
//	                    WHERE expires_at <= now() LIMIT 1000)
//	   AND expires_at <= now();
//
// Store.Sweep does the same on demand and says how many rows went.
//
// # Faults
//
// The guard of package store answers every call within its deadline (2 s
// by default), keeps at most 64 calls in flight, and opens its breaker
// after repeated failures; a database that is down, slow or unreachable is
// answered as unavailable. Nothing here needs restarting when the database
// comes back: broken connections are dropped by the pool, and the next call
// opens a new one.
//
// Errors wrap pgx's with what the store was doing. Logs carry a stable
// "kind" attribute and never a key.
package postgres
