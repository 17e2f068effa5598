// Package postgres is a limit store in PostgreSQL, shared by every instance
// of an app that uses the same database.
//
// The store runs over the app's own *pgxpool.Pool and opens no connections
// of its own. Several stores (one per secret, say) share one pool, and a
// prefix can have one handle per pool:
//
//	if err := postgres.Migrate(ctx, pool); err != nil {
//		return err
//	}
//	s, err := postgres.New(ctx, pool, postgres.Options{Secret: secret})
//	if err != nil {
//		return err
//	}
//	defer s.Close() // stops the background sweep; the pool stays open
//	signIn, err := s.Handle("login:")
//
// Importing the package also lets package config open the store from
// DATABASE_URL=postgres://… (see storekit.RegisterURL).
//
// # Schema
//
// [Migrate] creates the table gatecount_entries, its index and two
// functions, from SQL embedded in this package. It records each migration
// in gatecount_migrations. `go run
// github.com/gatecount/gatecount/cmd/gatecount migrate` does the same. It
// is idempotent, and every instance may run it at once, directly or through
// a pooler. A migration waits at most [MigrationLockTimeout] for another,
// then gives up with an error matching [ErrMigrationLocked]. New refuses a
// database without the current schema with an error matching
// [ErrNotMigrated]; Version tells the schema a database has. Instances built
// for schema 1 must not run beside instances built for schema 2.
//
// # Keys and secrets
//
// No key is stored. A row is named by the HMAC-SHA-256 of the handle's
// prefix and the key under Options.Secret (see package keyhash). It records
// the secret's fingerprint. The secret is required ([ErrNoSecret],
// keyhash.ErrWeakSecret say how to make one) and must be the same on every
// instance. After it changes, instances under the new one neither read nor
// count the old rows, which go when they expire.
//
// # Time
//
// Expiry is judged on the database server's clock, to the millisecond, so
// instances whose clocks differ make the same decisions.
//
// # Transactions and commits
//
// Every call is a short transaction of its own on a pool connection, never
// inside a transaction the app has open. A count is not undone when the
// app's transaction rolls back. Calls on one key are serialised by its row;
// rows are locked in one order, so calls never deadlock. Single-key counts
// of concurrent calls share one statement, each key counted or refused on
// its own.
//
// Commits do not wait for the disk (synchronous_commit off, for the store's
// transactions alone). A crash of the database server can lose the counts
// of its last moments, never more, and the table stays consistent.
// Options.SyncCommit waits for the disk on every commit, which caps a hot
// key at a few hundred counts a second.
//
// # Behind a pooler
//
// The store follows the query exec mode of the pool's connections
// (default_query_exec_mode in the connection string). Behind a pooler in
// transaction mode (PgBouncer's pool_mode=transaction, most hosted
// poolers), set "postgres://…?default_query_exec_mode=exec", or any mode
// but cache_statement. [New] refuses cache_statement on such a pool with an
// error matching [ErrPoolSetting] that names the setting. Session mode, and
// a direct connection, work with any mode.
//
// # Bound, sweep and faults
//
// A store bounds the live entries of its secret by Options.MaxEntries
// (1,000,000 by default). Near the bound, every new key is admitted by an
// exact count, across instances. Farther below it, each instance admits
// new keys on its own estimate, taking every other instance to add as it
// does. Once a count finds the store full, new keys are refused at once
// for a second (see DESIGN.md).
// Expired rows are removed when
// the store starts and every Options.SweepInterval (5 minutes), in small
// batches that never wait for a count. The guard of package store answers
// every call within its deadline, and opens a handle's breaker after
// repeated failures. Nothing needs restarting when the database comes back.
// Errors wrap pgx's with what the store was doing; logs carry a stable
// "kind" attribute and never a key.
//
// DESIGN.md, beside this file, has the SQL of every path, with its locks
// and round trips. It tells how the bound is estimated, and how the
// benchmarks are run.
package postgres
