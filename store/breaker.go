package store

import (
	"errors"
	"sync/atomic"
	"time"
)

// Defaults of BreakerOptions.
const (
	DefaultBreakerFailures = 5
	DefaultBreakerCooldown = time.Second
)

// ErrBreakerOpen is the cause of the unavailable error answered, at once,
// while the breaker is open.
var ErrBreakerOpen = errors.New("breaker open after repeated failures")

// BreakerOptions configure the breaker of a Store over a backend that is not
// Inline. After Failures calls in a row fail (the store down, or past the
// deadline), the breaker opens: calls are answered unavailable at once, with
// no call to the backend, for Cooldown. Then one call goes through as a
// probe; its success closes the breaker, its failure opens it again for
// another Cooldown. Errors of the caller's own making (bad keys, apply's
// errors, a full store) neither open nor close it.
type BreakerOptions struct {
	// Failures in a row that open the breaker; 0 means
	// DefaultBreakerFailures, a negative value turns the breaker off.
	Failures int
	// Cooldown is how long the breaker stays open before a probe; 0 means
	// DefaultBreakerCooldown.
	Cooldown time.Duration
}

func (o BreakerOptions) withDefaults() BreakerOptions {
	if o.Failures == 0 {
		o.Failures = DefaultBreakerFailures
	}
	if o.Cooldown <= 0 {
		o.Cooldown = DefaultBreakerCooldown
	}
	return o
}

type breaker struct {
	opts      BreakerOptions
	failures  atomic.Int64
	openUntil atomic.Int64 // unix nanoseconds; 0 when closed
	probing   atomic.Bool
	now       func() time.Time
}

var errOpen = &UnavailableError{Reason: ReasonDown, Err: ErrBreakerOpen}

func (b *breaker) init(o BreakerOptions) {
	b.opts = o
	b.now = time.Now
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

// record notes the outcome of a call that went to the backend.
func (b *breaker) record(err error) {
	if b.opts.Failures < 0 {
		return
	}
	switch ReasonOf(err) {
	case ReasonDown, ReasonDeadline:
		if b.failures.Add(1) >= int64(b.opts.Failures) {
			b.openUntil.Store(b.now().Add(b.opts.Cooldown).UnixNano())
			b.probing.Store(false)
		}
	default:
		if b.failures.Load() != 0 || b.openUntil.Load() != 0 {
			b.failures.Store(0)
			b.openUntil.Store(0)
			b.probing.Store(false)
		}
	}
}

// Open reports whether the breaker is answering calls unavailable at once.
func (s *Store) BreakerOpen() bool { return s.breaker.openUntil.Load() != 0 }
