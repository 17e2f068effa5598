// Package memory is the default limit store: entries in this process's
// memory, on this process's clock.
//
// The store is not shared: on several instances of an app, each keeps its
// own counts, so every budget is multiplied by the number of instances. Use
// a shared store (PostgreSQL, SQLite on one host, Redis) when that matters.
//
// Expired entries are removed when their key is next touched, and by a
// background sweep every SweepInterval. They are removed at once when a new
// key finds the store full. Close stops the sweep. DESIGN.md says how the
// store works.
package memory
