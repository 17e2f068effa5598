package store

import "time"

// The calls an [Observer] hears of, as [CallEvent] names them.
const (
	opUpdate = "update"
	opRead   = "read"
	opCount  = "count"
	opSweep  = "sweep"
)

// CallEvent describes one call through the guard.
type CallEvent struct {
	// Op names the call: "update", "read", "count" or "sweep".
	Op string
	// Prefix is the handle's prefix; "" for a Sweep.
	Prefix string
	// Duration is how long the caller waited for the answer.
	Duration time.Duration
	// Reason is why the store was unavailable, or 0 when it answered
	// (including with an error of the caller's making).
	Reason Reason
	// InFlight is the number of calls running in the backend as the call
	// was answered.
	InFlight int
}

// Observer hears of every call a Store answers, for metrics. It is called on
// the caller's goroutine after the call and must be fast and safe for
// concurrent use. It is never told a key.
type Observer interface {
	ObserveCall(CallEvent)
}

func (s *Store) observe(op string, prefix string, start time.Time, err error) {
	s.obs.ObserveCall(CallEvent{
		Op:       op,
		Prefix:   prefix,
		Duration: time.Since(start),
		Reason:   ReasonOf(err),
		InFlight: int(s.slots.inFlight()),
	})
}

// Sizer is implemented by backends that can tell how many live entries they
// hold, for Stats.
type Sizer interface {
	// Entries returns the live entries held, or an estimate of them.
	Entries() int
	// MaxEntries returns the bound on live entries.
	MaxEntries() int
}

// Stats is a Store's health at one moment.
type Stats struct {
	InFlight int
	// Queued is the number of calls waiting for a slot now, and Waited the
	// number that have waited for one since the store opened.
	Queued      int
	Waited      int64
	MaxInFlight int
	// MaxQueued is the bound on the calls of one handle waiting for a
	// slot.
	MaxQueued   int
	BreakerOpen bool
	// Entries and MaxEntries are the live entries against the bound, or -1
	// when the backend does not tell (see Sizer).
	Entries    int
	MaxEntries int
	// Members is how many instances share the store, as last counted
	// (see [Store.Members]).
	Members int
}

// Stats returns the store's health now.
func (s *Store) Stats() Stats {
	st := Stats{
		InFlight:    int(s.slots.inFlight()),
		Queued:      int(s.slots.queuedNow()),
		Waited:      s.slots.waitedTotal(),
		MaxInFlight: s.opts.MaxInFlight,
		MaxQueued:   s.opts.MaxQueued,
		BreakerOpen: s.BreakerOpen(),
		Entries:     -1,
		MaxEntries:  -1,
		Members:     s.Members(),
	}
	if sz, ok := s.b.(Sizer); ok {
		st.Entries, st.MaxEntries = sz.Entries(), sz.MaxEntries()
	}
	return st
}
