// Package store is where limits keep their counts. It holds the contract
// every limit store honours, and the guard, bound and handles every store
// gets for free.
//
// A store author implements Backend. [New] wraps a Backend in the guard.
// Every call is answered within a deadline (2 s by default). At most 64
// calls run at once, and calls past that wait their turn. Each handle's
// breaker stops calling a store that keeps failing for it. Every failure is
// answered as an error matching [ErrUnavailable]. A limiter never talks to
// a Backend directly. It claims a [Handle], a prefixed view of one [Store]
// with a key space of its own.
//
//	s := memory.New(memory.Options{})
//	defer s.Close()
//	signIn, err := s.Handle("signin:")
//
// # Entries and time
//
// A store keeps an [Entry] for each key. That is a JSON value of at most
// [MaxValueSize] bytes, and the time it expires, to the millisecond, on the
// store's own clock. An entry whose ExpiresAt is not after the store's
// current time is not live. It is neither read nor given to apply, and
// Sweep removes it. Judging expiry on the store's clock (a database
// server's, say) lets instances whose clocks differ agree on when a window
// ends.
//
// # The bound
//
// A store holds a bounded number of live entries (each store's MaxEntries
// option). It never
// removes a live entry to make room. Anyone able to send new keys could
// then free the count of an attacker they cover for. When full it removes
// expired entries. If there is still no room, a new key is answered with
// [ErrFull], while keys it already holds keep counting.
package store

import (
	"context"
	"time"
)

// Limits on what one call may carry.
const (
	// MaxValueSize is the largest value, in bytes, an entry may hold.
	MaxValueSize = 4096
	// MaxKeyLen is the longest key, in bytes.
	MaxKeyLen = 512
	// MaxKeys is the most keys one Update or Read may name.
	MaxKeys = 16
	// MaxPrefixLen is the longest handle prefix, in bytes.
	MaxPrefixLen = 64
)

// Entry is what a store keeps under a key.
type Entry struct {
	// Value is JSON of at most [MaxValueSize] bytes. A nil Value means the key
	// has no live entry; leaving it nil in apply deletes the key.
	Value []byte
	// ExpiresAt is when the entry stops being live, on the store's clock,
	// to the millisecond.
	ExpiresAt time.Time
}

// Live reports whether the entry holds a value.
func (e Entry) Live() bool { return e.Value != nil }

// ApplyFunc is the read-modify-write step of an Update. It is called with the
// store's current time and, in entries[i], the live entry for keys[i] (the
// zero Entry when there is none). It changes entries in place: what it leaves
// in entries[i] is written for keys[i], a nil Value deleting the key. The
// value bytes it is given are its own to change or replace.
//
// apply is synchronous and must not retain entries. It may run more than
// once for one Update when a store retries; only the run whose result is
// written counts. If it returns an error, nothing is written and Update
// returns that error.
type ApplyFunc func(now time.Time, entries []Entry) error

// Backend is the contract a limit store implements. Keys arrive with the
// prefix of the handle that names them, apart; a backend keeps each
// (prefix, key) pair apart from every other.
//
// A Backend is called through the guard of the Store that wraps it, which
// checks keys, enforces the value limits, deadline and calls in flight, and
// turns failures into [ErrUnavailable]. Backends return [ErrFull] when the bound
// refuses a new key, the error of apply unchanged, and any other error for a
// failure of their own.
type Backend interface {
	// Shared reports whether every instance of the app sees the same
	// entries.
	Shared() bool
	// Update atomically reads the live entries for keys, calls apply with
	// them and the store's clock, and writes what it leaves, with no other
	// update to these keys in between.
	Update(ctx context.Context, prefix string, keys []string, apply ApplyFunc) error
	// Read returns the live entries for keys, in order, judged on the
	// store's clock; a key with none has the zero Entry. The values are the
	// caller's to keep.
	Read(ctx context.Context, prefix string, keys []string) ([]Entry, error)
	// Sweep removes expired entries and returns how many went.
	Sweep(ctx context.Context) (int, error)
	// Close releases what the backend holds and stops its goroutines.
	Close() error
}

// Spreader is a Backend that can keep the keys of a handle in parts that
// fail apart: the masters of a Redis Cluster, say. [Handle.Spread] asks for
// it, and the guard then keeps a breaker per part of the handle.
type Spreader interface {
	// Spread places each key under prefix by the key itself, from the
	// backend's next call under prefix on. It returns how many parts the
	// keys spread over: 1 when they stay together.
	Spread(prefix string) int
	// Part returns the part of keys under a prefix Spread spread, and
	// false when the keys lie in several parts.
	Part(prefix string, keys []string) (part int, ok bool)
}

// Inline is implemented by backends in process memory, whose calls never
// block on I/O or on anything but short critical sections. It is the guard's
// path for them: calls run on the caller's goroutine, with no deadline
// timer, outside the in-flight bound and the breaker. UpdateInline is
// Update, except that the backend runs check on the entries right after
// apply, within the same atomic step, and writes nothing when either fails.
// It passes apply a time truncated to the millisecond. It returns apply's or
// check's error unchanged with ofCaller true, and an error of its own (such
// as [ErrFull]) with ofCaller false. Close does not wait for an inline
// backend's calls: a call that began before Close may still be running as
// the backend's Close runs, and must come to no harm.
//
// CountInline is Count for the backend: the counting rule ([Tally.Charge])
// applied to the held counters of the first len(caps) keys, as the
// generic Count would. It takes the keys and returns the Tally by value, so
// that nothing of the caller's escapes to the heap. A backend with no
// faster way runs [ApplyCount] through its UpdateInline. Unless the backend
// offers [AlgorithmCounter], the guard calls it and CountOne only with
// budgets of fixed windows, and runs ApplyCount through UpdateInline for
// the rest.
//
// CountOne is CountInline for one key ([KeyTally.Charge] is the rule for
// one), the guard's path for a one-key Count. Its arguments and results fit
// in registers, where CountInline's arrays are copied through the stack. A
// backend with no faster way returns the Key of its CountInline's Tally.
//
// The inline path saves a deadline timer and a slot of the in-flight bound
// per call; the figures are in the package's DESIGN.md.
type Inline interface {
	Backend
	UpdateInline(prefix string, keys []string, apply, check ApplyFunc) (ofCaller bool, err error)
	CountInline(prefix string, keys [MaxCountKeys]string, caps []Budget, n int64) (Tally, error)
	CountOne(prefix, key string, b Budget, n int64) (KeyTally, error)
}

// Prompt is implemented by backends whose calls return promptly once their
// context's deadline passes, and soon after it is cancelled. A backend may
// finish the round trips of a call under way, which end by the deadline.
// pgx's and go-redis's calls behave so when set to. The guard runs a prompt
// backend's calls on the caller's goroutine under a deadline context. That
// saves a goroutine and a channel handoff per call (figures in the
// package's DESIGN.md). A backend that answers true but keeps running past
// its context delays its callers past the deadline. One that answers false
// has its calls answered at the deadline, however long they run.
type Prompt interface {
	Prompt() bool
}

// Backing is implemented by backends that share something, such as a
// connection pool, with other Backend values. Backing returns a comparable
// identity of it; two handles with one prefix on one backing are refused
// with [ErrDuplicatePrefix] even when they come from different Stores.
type Backing interface {
	Backing() any
}
