package store

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// Defaults of [BreakerOptions].
const (
	defaultBreakerFailures = 5
	defaultBreakerCooldown = time.Second
)

// ErrBreakerOpen is the cause of the unavailable error answered, at once,
// while the breaker is open.
var ErrBreakerOpen = errors.New("breaker open after repeated failures")

// BreakerOptions configure the breakers of a Store over a backend that is
// not Inline. Each handle has a breaker of its own. A store that fails for
// the keys of one handle (a Redis Cluster node that serves its slot) then
// refuses only that handle's calls. The breaker opens after Failures calls
// of a handle in a row fail (the store down, or past the deadline). For
// Cooldown, calls are then answered unavailable at once, with no call to
// the backend. Then one call goes through as a probe; its success closes
// the breaker, its failure opens it again for another Cooldown. Errors of
// the caller's own making (bad keys, apply's errors, a full store) neither
// open nor close it.
type BreakerOptions struct {
	// Failures in a row that open the breaker; 0 means 5, a negative value
	// turns the breaker off.
	Failures int
	// Cooldown is how long the breaker stays open before a probe; 0 means
	// 1 s.
	Cooldown time.Duration
}

func (o BreakerOptions) withDefaults() BreakerOptions {
	if o.Failures == 0 {
		o.Failures = defaultBreakerFailures
	}
	if o.Cooldown <= 0 {
		o.Cooldown = defaultBreakerCooldown
	}
	return o
}

type breaker struct {
	opts      BreakerOptions
	failures  atomic.Int64
	openUntil atomic.Int64 // unix nanoseconds; 0 when closed
	probing   atomic.Bool
	now       func() time.Time
	log       *slog.Logger
	prefix    string // the handle's, or "" for the store's own calls
}

var errOpen = &UnavailableError{Reason: ReasonDown, Err: ErrBreakerOpen}

func (b *breaker) init(o BreakerOptions, now func() time.Time, log *slog.Logger, prefix string) {
	b.opts = o
	b.now = now
	b.log = log
	b.prefix = prefix
}

// allow answers nil when a call may go to the backend.
func (b *breaker) allow() error {
	if b.opts.Failures < 0 {
		return nil
	}
	until := b.openUntil.Load()
	if until == 0 {
		return nil
	}
	if b.now().UnixNano() < until {
		return errOpen
	}
	if b.probing.CompareAndSwap(false, true) {
		return nil // this call is the probe
	}
	return errOpen
}

// record notes the outcome of a call that went to the backend. A call that
// waited (for its slot, or for a connection of the backend's pool) and then
// ran out of time says nothing of the store's health. It is counted neither
// as a failure nor as a success.
func (b *breaker) record(err error, waited bool) {
	if b.opts.Failures < 0 {
		return
	}
	switch r := ReasonOf(err); {
	case r == ReasonDeadline && waited, r == ReasonOverloaded:
		b.probing.Store(false) // a probe that told nothing: the next call probes
	case r == ReasonDown || r == ReasonDeadline:
		if b.failures.Add(1) >= int64(b.opts.Failures) {
			was := b.openUntil.Swap(b.now().Add(b.opts.Cooldown).UnixNano())
			b.probing.Store(false)
			if was == 0 {
				b.log.Error("limit store failing: calls answered unavailable until a probe succeeds",
					"kind", kindDown, "prefix", b.prefix, "failures", b.failures.Load(), "err", err)
			}
		}
	default:
		if b.failures.Load() != 0 || b.openUntil.Load() != 0 {
			b.failures.Store(0)
			was := b.openUntil.Swap(0)
			b.probing.Store(false)
			if was != 0 {
				b.log.Info("limit store recovered: calls reach the store again",
					"kind", kindRecovered, "prefix", b.prefix)
			}
		}
	}
}

func (b *breaker) open() bool { return b.openUntil.Load() != 0 }

// BreakerOpen reports whether the breaker of any handle of the store, or of
// its own calls (Sweep), is answering calls unavailable at once.
func (s *Store) BreakerOpen() bool {
	if s.sweeps.breaker.open() {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.handles {
		if h.BreakerOpen() {
			return true
		}
	}
	return false
}

// BreakerOpen reports whether the handle's breaker, or that of any of its
// parts once spread, is answering calls unavailable at once.
func (h *Handle) BreakerOpen() bool {
	if h.lane.breaker.open() {
		return true
	}
	if parts := h.parts.Load(); parts != nil {
		for i := range *parts {
			if (*parts)[i].open() {
				return true
			}
		}
	}
	return false
}

// Spread places each key of the handle by the key itself, on a store whose
// keys lie in parts that fail apart (the masters of a Redis Cluster). The
// handle's keys then spread over every part, and each part has a breaker of
// its own: a part down refuses only its keys. A call must then name keys of
// one part, one key as a limiter of one key per attempt does; keys of
// several parts are refused with [ErrInvalidKey]. Call it before the
// handle's first call: calls before it find keys where a handle that is not
// spread keeps them. It returns how many parts the keys spread over: 1 on
// other stores, where it changes nothing.
func (h *Handle) Spread() int {
	sp, ok := h.s.b.(Spreader)
	if !ok {
		return 1
	}
	n := sp.Spread(h.prefix)
	if n <= 1 {
		return 1
	}
	parts := make([]breaker, n)
	for i := range parts {
		parts[i].init(h.s.opts.Breaker, h.s.now, h.s.opts.Logger.With("part", i), h.prefix)
	}
	h.parts.Store(&parts)
	return n
}

// breakerOf returns the breaker of a call of keys: the handle's, or that of
// the keys' part once the handle is spread.
func (h *Handle) breakerOf(keys []string) (*breaker, error) {
	parts := h.parts.Load()
	if parts == nil {
		return &h.lane.breaker, nil
	}
	p, ok := h.s.b.(Spreader).Part(h.prefix, keys)
	if !ok || p < 0 || p >= len(*parts) {
		return nil, fmt.Errorf("%w: keys of several parts of a spread handle in one call", ErrInvalidKey)
	}
	return &(*parts)[p], nil
}
