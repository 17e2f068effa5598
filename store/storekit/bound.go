package storekit

import (
	"log/slog"
	"time"

	"github.com/gatecount/gatecount/store"
	"golang.org/x/time/rate"
)

// Default bounds on live entries.
const (
	DefaultMaxEntriesMemory   = 100_000
	DefaultMaxEntriesDatabase = 1_000_000
)

// Bound is the limit on a store's live entries, and the logs that go with
// it. Stores call Admit before they add a new key. A Bound is safe for
// concurrent use.
type Bound struct {
	max     int
	warnAt  int
	log     *slog.Logger
	filling rate.Sometimes
	full    rate.Sometimes
}

// NewBound returns a Bound of max live entries that logs to log. At 80% of
// max it logs a warning of kind [KindFilling]; when a new key finds no room it
// logs an error of kind [KindFull]. Each is logged at most once a minute.
func NewBound(max int, log *slog.Logger) *Bound {
	if log == nil {
		log = slog.Default()
	}
	return &Bound{
		max:     max,
		warnAt:  max - max/5,
		log:     log,
		filling: rate.Sometimes{Interval: time.Minute},
		full:    rate.Sometimes{Interval: time.Minute},
	}
}

// Max returns the most live entries the store may hold.
func (b *Bound) Max() int { return b.max }

// Full reports whether a store holding live entries has no room for one
// more. It logs nothing: a store that finds itself full removes expired
// entries, then calls Admit.
func (b *Bound) Full(live int) bool { return live >= b.max }

// Admit answers whether a store holding live entries may add one more for a
// key under prefix: nil, or [store.ErrFull]. It logs a warning when the store is 80%
// full and an error when it is full.
func (b *Bound) Admit(live int, prefix string) error {
	if live >= b.max {
		b.full.Do(func() {
			b.log.Error("limit store full: new keys are answered unavailable until entries expire",
				"kind", KindFull, "prefix", prefix, "entries", live, "max_entries", b.max)
		})
		return store.ErrFull
	}
	if live+1 >= b.warnAt {
		b.filling.Do(func() {
			b.log.Warn("limit store filling: new keys will be refused when it is full",
				"kind", KindFilling, "prefix", prefix, "entries", live+1, "max_entries", b.max)
		})
	}
	return nil
}
