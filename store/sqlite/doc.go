// Package sqlite is a limit store in an SQLite file, shared by every process
// on one host that opens the file.
//
// It runs over database/sql with the pure-Go driver of modernc.org/sqlite
// (driver name "sqlite"; no cgo). Open opens a file; New uses a *sql.DB the
// app already has. Either way the tables must exist: run Migrate once (for
// instance from the app's migrate command, [MigrateFile]), or set
// Options.AutoMigrate.
//
// # Sharing
//
// Every process on the host that opens the file counts in the same rows:
// Shared reports true. Do not share the file across hosts: SQLite's locks
// do not work over network file systems. Several hosts need PostgreSQL or
// Redis.
//
// # Other writers
//
// Every count waits for any write transaction open on the file, by any
// process. An app that holds a long write transaction on the same file
// holds up its limits for that long. A count that cannot start within the
// guard's deadline is answered unavailable ([store.ReasonDeadline]). It
// never deadlocks, and counting resumes once the other transaction ends.
//
// # Durability
//
// A process that crashes or is killed loses nothing it committed. A power
// loss or an operating-system crash may lose the last few transactions,
// never more, and never corrupts the file. Options.FullSync loses nothing
// even then, at the cost of a disk sync for every commit.
//
// # Keys and secrets
//
// No key is stored in clear: each row is named by the HMAC-SHA-256 of its
// handle's prefix and key under Options.Secret (see package keyhash). Rows
// written under another secret are never read, nor counted against this
// store's bound; they are removed once they expire.
//
// # Bound and sweep
//
// A store holds at most Options.MaxEntries rows under its secret
// (storekit.DefaultMaxEntriesDatabase by default). A new key that finds no
// room first removes a batch of expired rows. If there is still none, it is
// answered [store.ErrFull], while keys already held keep counting. Expired
// rows are removed when the store opens and every SweepInterval.
//
// Expiry is judged on the host's clock, which every process sharing the
// file reads. DESIGN.md says how the store works.
package sqlite
