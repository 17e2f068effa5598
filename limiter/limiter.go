// Package limiter counts attempts against budgets kept in a limit store.
//
// A Limiter allows at most Limit attempts per key in each window of length
// Window, counted by its Budget's Algorithm. The default, [FixedWindow], is a
// fixed window that starts at a key's first counted attempt:
//
//   - The first attempt on a key with no live window opens one. The window
//     ends Window later, on the store's clock (its Reset). Attempts that
//     find no room do not open or extend a window.
//   - Within the window, attempts are admitted while the count is below
//     Limit. The rest are refused with a RetryAfter of the time left in the
//     window.
//   - At Reset the count is gone (the store's entry expires), and the next
//     attempt opens a new window. At the edge, a client may therefore have
//     Limit attempts admitted just before one window ends, and Limit just
//     after the next opens. That is at most 2×Limit in any span of length
//     Window, and never more than Limit in one window.
//
// [SlidingWindow] admits at most Limit in any span of length Window (Limit
// at most [store.MaxSlidingLimit]). [TokenBucket] refills Limit per Window
// evenly, up to Burst at once. For every algorithm a refused attempt's
// RetryAfter is when one more attempt is admitted, and Remaining what is
// admitted now.
//
// Admission is exact: the count is read and written in one atomic store
// update. N concurrent attempts against a budget B, on any number of
// instances sharing a store, admit exactly min(N, B).
//
// Attempt counts against several keys at once, all or nothing: if any key
// has no room, none is charged. The Decision tells which key limited.
//
// On a store that does I/O (every store but the memory store), a limiter
// keeps what the store last said of each key. It keeps it in bounded
// process memory. A key memory shows spent is refused without a store call
// until its window ends. When the store cannot answer, counting in memory
// goes on from those counts rather than from zero. Nothing is ever admitted
// from memory.
//
// What a store that cannot answer means is each limiter's choice (see
// [Policy]). It may refuse, allow, or count in process memory until the
// store recovers. Whatever the choice, an overloaded or full store never
// lets an attempt through uncounted. A full store still counts the keys it
// holds.
//
// A busy store is waited for. Under Local or Allow on a shared store, an
// attempt waits for its turn as long as its context lasts: its request's
// deadline, or its client. An attempt whose context ends first returns the
// context's error, counted nowhere. The wait needs a place in the store's
// bounded queue (store.Options.MaxQueued): one that finds it full is
// refused as counted alone, to be tried again in a second.
package limiter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/gatecount/gatecount/internal/overload"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
	"github.com/gatecount/gatecount/store/storekit"
	"github.com/gatecount/gatecount/store/value"
)

// Bounds of a Budget.
const (
	MinWindow = store.MinWindow
	MaxWindow = store.MaxWindow
	MaxLimit  = store.MaxLimit
)

// ErrInvalidBudget is matched by the error of a budget out of range.
var ErrInvalidBudget = store.ErrInvalidBudget

// ErrInvalidKeys is returned for an attempt with no keys, more than
// [MaxKeys], or keys the store refuses.
var ErrInvalidKeys = errors.New("limiter: invalid keys")

// ErrInvalidCost is returned for an attempt whose cost is below 1 or above
// the limit of one of its budgets, which could never admit it.
var ErrInvalidCost = errors.New("limiter: invalid cost")

// MaxKeys is the most keys one attempt may count against.
const MaxKeys = store.MaxCountKeys

// Budget is Limit attempts per Window: the one type for a budget, that
// limiters and stores share (Validate reports whether a limiter can use
// it).
type Budget = store.Budget

// Algorithm is how a Budget counts ([store.Algorithm]).
type Algorithm = store.Algorithm

// The algorithms a Budget may count by: see [store.Algorithm].
const (
	FixedWindow   = store.FixedWindow
	SlidingWindow = store.SlidingWindow
	TokenBucket   = store.TokenBucket
)

// Policy is what a limiter answers when its store cannot: the one type for
// that choice, in limiter.Options and in every middleware's Options. The zero
// value, [Unset], leaves it to the constructor: Deny for New and
// middleware.New, Local for the guards of package middleware. Package
// gatecount gives each kind of limiter its own, in a table in its doc.
type Policy int

const (
	// Unset, the zero value, is the constructor's choice (see Policy).
	Unset Policy = iota
	// Deny refuses the attempt: fail closed. Nothing can get through while
	// the store cannot answer, which also stops legitimate users. A full
	// store still counts the keys it holds; an attempt with a key it has no
	// room for is refused. A middleware answers it 503 with Retry-After,
	// never 429.
	Deny
	// Allow admits the attempt uncounted and logs it, but only while the
	// store is down (its calls fail or time out, or its breaker is open):
	// fail open. An overloaded store (a call that waited out its deadline
	// for a slot, or found its queue full) is not down, nor is a full
	// store. There the attempt is counted as under Local, since anyone able
	// to send a burst or a flood of new keys could otherwise reach them.
	Allow
	// Local counts in this process's memory while the store cannot answer,
	// starting from the last count this instance had of each key. It
	// returns to the store as soon as the store answers again. A key this
	// instance saw spent stays refused until its window ends. What it
	// bounds across instances is stated in RELIABILITY.md. A full store still counts
	// the keys it holds; only keys it has no room for are counted in
	// memory, and with memory full too the attempt is refused as counted
	// alone (a middleware answers 429), never as an outage.
	Local
)

// String names the policy.
func (p Policy) String() string {
	switch p {
	case Unset:
		return "unset"
	case Deny:
		return "deny"
	case Allow:
		return "allow"
	case Local:
		return "local"
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// Or returns p, or def when p is [Unset]. It is how a constructor applies
// its own choice.
func (p Policy) Or(def Policy) Policy {
	if p == Unset {
		return def
	}
	return p
}

// Options configure a Limiter.
type Options struct {
	// Name identifies the limiter in logs and in the handle's claim.
	// Required.
	Name string
	// Budget applies to every key of Attempt.
	Budget Budget
	// Unavailable is what an attempt answers when the store cannot; the
	// zero value, [Unset], is Deny.
	Unavailable Policy
	// Logger receives the limiter's logs; nil means slog.Default().
	Logger *slog.Logger
	// LocalMaxEntries bounds the limiter's process memory: the keys it
	// remembers of a shared store and counts when the store cannot answer.
	// 0 means the smaller of 100,000 and the store's own bound, when the
	// store tells it ([store.Sizer]). Each entry costs about 200 bytes.
	LocalMaxEntries int
	// Observer, when set, is told of every decision (see Observer).
	Observer Observer
	// Shadow runs the limiter in shadow: it counts exactly as it would,
	// and each decision says so (Decision.Shadow), for the caller to let
	// every attempt through. A would-be refusal is reported to the
	// Observer as [ShadowDenied] and logged once per key per window (kind
	// [KindShadowDenied]).
	Shadow bool
}

// Outcome is what a decision came to, for an Observer.
type Outcome uint8

// The outcomes of a decision.
const (
	// Allowed: counted and admitted.
	Allowed Outcome = iota + 1
	// Denied: over budget.
	Denied
	// AllowedUnavailable: the store could not answer and the policy
	// admitted the attempt uncounted.
	AllowedUnavailable
	// DeniedUnavailable: the store could not answer and the policy refused
	// the attempt.
	DeniedUnavailable
	// AllowedLocal and [DeniedLocal]: counted in process memory while the
	// store could not answer.
	AllowedLocal
	DeniedLocal
	// DeniedMemory: refused from process memory, without a store call,
	// since the store had shown a key of the attempt spent.
	DeniedMemory
	// ShadowDenied: over budget, and let through, since the limiter runs
	// in shadow.
	ShadowDenied
)

// String names the outcome as metrics label it.
func (o Outcome) String() string {
	switch o {
	case Allowed:
		return "allowed"
	case Denied:
		return "denied"
	case AllowedUnavailable:
		return "allowed_unavailable"
	case DeniedUnavailable:
		return "denied_unavailable"
	case AllowedLocal:
		return "allowed_local"
	case DeniedLocal:
		return "denied_local"
	case DeniedMemory:
		return "denied_memory"
	case ShadowDenied:
		return "shadow_denied"
	}
	return "unknown"
}

// OutcomeOf returns what d came to. In shadow, an attempt refused for
// want of a store is [AllowedUnavailable], and one over budget [ShadowDenied]:
// both went ahead.
func OutcomeOf(d *Decision) Outcome {
	switch {
	case d.Shadow && !d.Allowed && d.Unavailable && !d.Local:
		return AllowedUnavailable
	case d.Shadow && !d.Allowed:
		return ShadowDenied
	case d.Remembered:
		return DeniedMemory
	case d.Local && d.Allowed:
		return AllowedLocal
	case d.Local:
		return DeniedLocal
	case d.Unavailable && d.Allowed:
		return AllowedUnavailable
	case d.Unavailable:
		return DeniedUnavailable
	case d.Allowed:
		return Allowed
	}
	return Denied
}

// Observer hears of every decision of Attempt and AttemptEach, for metrics.
// It is called on the caller's goroutine, must be fast and safe for
// concurrent use, and is never told a key.
type Observer interface {
	ObserveDecision(limiter string, o Outcome)
}

// Limiter counts attempts in one store handle, which it claims. It is safe
// for concurrent use.
type Limiter struct {
	h      *store.Handle
	name   string
	budget Budget
	caps   [MaxKeys]store.Budget
	policy Policy
	log    *slog.Logger
	local  *store.Handle   // process memory, when the limiter has any
	localB *memory.Backend // local's backend
	room   int             // entries of local that attempts not vouched for may fill
	// adding counts the new entries that calls not vouched for are adding
	// to local now (see claimRoom).
	adding atomic.Int64
	memo   bool // local remembers the store's counts: it does I/O
	// patient is set when the limiter's attempts wait for its store
	// whatever the queue: a shared store, under Local or Allow.
	patient bool
	warn    rate.Sometimes
	full    rate.Sometimes
	obs     Observer

	memoFull rate.Sometimes
	forgot   forgotten // keys memory had no room to keep the counts of
	out      outbox
	shadow   *shadowLog // nil unless the limiter runs in shadow
}

// New returns a Limiter counting in h, which it claims: a handle already
// claimed by another limiter is refused with an error matching
// [store.ErrStoreReuse].
func New(h *store.Handle, o Options) (*Limiter, error) {
	if h == nil {
		return nil, errors.New("limiter: nil store handle")
	}
	if o.Name == "" {
		return nil, errors.New("limiter: Options.Name is required")
	}
	if err := o.Budget.Validate(); err != nil {
		return nil, fmt.Errorf("limiter %q: %w", o.Name, err)
	}
	o.Unavailable = o.Unavailable.Or(Deny)
	if o.Unavailable < Deny || o.Unavailable > Local {
		return nil, fmt.Errorf("limiter %q: unknown Unavailable policy %d", o.Name, int(o.Unavailable))
	}
	if err := h.Claim(o.Name); err != nil {
		return nil, fmt.Errorf("limiter %q: %w", o.Name, err)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	l := &Limiter{
		h:       h,
		name:    o.Name,
		budget:  o.Budget,
		policy:  o.Unavailable,
		log:     o.Logger.With("limiter", o.Name, "prefix", h.Prefix()),
		warn:    rate.Sometimes{Interval: time.Second},
		full:    rate.Sometimes{Interval: time.Minute},
		obs:     o.Observer,
		memo:    !h.Store().Inline(),
		patient: o.Unavailable != Deny && h.Store().Shared(),

		memoFull: rate.Sometimes{Interval: time.Minute},
	}
	for i := range l.caps {
		l.caps[i] = o.Budget
	}
	if o.Shadow {
		l.shadow = newShadowLog()
	}
	if l.memo || o.Unavailable != Deny {
		max := o.LocalMaxEntries
		if max <= 0 {
			max = storekit.DefaultMaxEntriesMemory
			if sz, ok := h.Store().Backend().(store.Sizer); ok && sz.MaxEntries() > 0 {
				max = min(max, sz.MaxEntries())
			}
		}
		all := max + reserveOf(max)
		var now func() time.Time // a memory store's keys counted alone run on its clock
		if mb, ok := h.Store().Backend().(*memory.Backend); ok {
			now = mb.Now
		}
		local, b, err := newLocal(h.Prefix(), all, store.Options{Logger: o.Logger}, now)
		if err != nil {
			return nil, fmt.Errorf("limiter %q: process memory: %w", o.Name, err)
		}
		l.local, l.localB, l.room = local, b, max
		l.forgot.size = all
	}
	if o.Unavailable != Deny {
		h.Store().Join() // to know its share when it counts alone
	}
	return l, nil
}

// Name returns the limiter's name.
func (l *Limiter) Name() string { return l.name }

// Budget returns the limiter's budget.
func (l *Limiter) Budget() Budget { return l.budget }

// Handle returns the store handle the limiter counts in.
func (l *Limiter) Handle() *store.Handle { return l.h }

// Close releases what the limiter holds of its own: its process memory. The
// store handle it counts in is the caller's to close.
func (l *Limiter) Close() error {
	l.out.close(l)
	if l.local != nil {
		return l.local.Store().Close()
	}
	return nil
}

// Decision is the outcome of an attempt.
type Decision struct {
	// Allowed reports whether the attempt may go ahead. In shadow it says
	// what the limiter would answer, and the attempt goes ahead anyway.
	Allowed bool
	// Shadow reports that the limiter runs in shadow (Options.Shadow):
	// the caller lets the attempt through whatever Allowed says.
	Shadow bool
	// Unavailable reports that the store could not answer, so the limiter's
	// Policy decided; Cause says why.
	Unavailable bool
	Cause       error
	// Local reports that the attempt was counted in process memory, in
	// whole or in part (a full store counts the keys it holds), while the
	// store could not answer.
	Local bool
	// Remembered reports that the attempt was refused from process memory,
	// without a store call: the store had shown one of its keys spent in a
	// window that has not ended. Now and Reset are then on this process's
	// clock.
	Remembered bool
	// Limit is the budget of the key that decided: the one that limited, or
	// when allowed the one with the least room left.
	Limit int
	// Remaining is how many more attempts that key admits in its window.
	Remaining int
	// Reset is when that key's window ends, on the store's clock; zero when
	// unknown.
	Reset time.Time
	// RetryAfter is how long to wait before an attempt can succeed: the
	// time left in the limiting window when refused, zero when allowed.
	RetryAfter time.Duration
	// Now is the store's time of the decision.
	Now time.Time
	// Limiting is the index, among the attempt's keys, of the key that
	// limited, or -1.
	Limiting int
	// Window is the budget window of the key that decided.
	Window time.Duration
	// KeyIndex is the index, among the attempt's keys, of the key that
	// decided: Limiting when refused, the key with the least room left when
	// allowed. Keys()[KeyIndex] is that key.
	KeyIndex int
	// Cost is what the attempt counted, or would have, on each of its
	// keys: 1 but for AttemptCost. A Refund gives back as much.
	Cost int

	keys      [MaxKeys]string
	expires   [MaxKeys]int64 // unix milliseconds, as the store keeps them; 0 for no window
	remaining [MaxKeys]int32 // at most MaxLimit
	n         uint8          // keys in use
	inMemory  uint8          // bit i: key i was counted in process memory
	// budgets are the keys' budgets, for a Refund, when one is not a fixed
	// window or the limiter's own budget is not. They are nil when they are
	// the limiter's own (Attempt), or all fixed windows as the limiter's
	// is.
	budgets *[MaxKeys]store.Budget
}

// fixedOnly reports whether every budget of caps is a fixed window.
func fixedOnly(caps []store.Budget) bool {
	for _, c := range caps {
		if c.Algorithm != store.FixedWindow {
			return false
		}
	}
	return true
}

// Keys returns the keys the attempt counted against.
func (d *Decision) Keys() []string { return d.keys[:d.n] }

// RemainingOf returns how many more attempts key i of the attempt admits in
// its window.
func (d *Decision) RemainingOf(i int) int {
	if i < 0 || i >= int(d.n) {
		return 0
	}
	return int(d.remaining[i])
}

// Attempt counts one attempt against each of keys, with the limiter's
// budget, in one atomic store update, all or nothing. It returns an error
// only for invalid keys, or when ctx ends before the store answers. A store
// that cannot answer is reported in the Decision, decided by the limiter's
// [Policy].
func (l *Limiter) Attempt(ctx context.Context, keys ...string) (d Decision, err error) {
	// Small enough to be inlined, so that the Decision is copied once, into
	// the caller's variable, not also through a result slot.
	err = l.attempt(ctx, keys, &d)
	return
}

// attempt is Attempt, into d.
func (l *Limiter) attempt(ctx context.Context, keys []string, d *Decision) error {
	if len(keys) == 0 || len(keys) > MaxKeys {
		return errKeyCount(len(keys))
	}
	return l.count(ctx, keys, l.caps[:len(keys)], 1, d)
}

// errKeyCount is the error of an attempt on n keys, out of 1 to MaxKeys.
func errKeyCount(n int) error {
	return fmt.Errorf("%w: %d keys, want 1 to %d", ErrInvalidKeys, n, MaxKeys)
}

// Charge is one key of AttemptEach with a budget of its own.
type Charge struct {
	Key    string
	Budget Budget
}

// AttemptEach counts one attempt against each charge's key, each with its own
// budget, in one atomic store update, all or nothing, as Attempt does.
func (l *Limiter) AttemptEach(ctx context.Context, charges ...Charge) (Decision, error) {
	return l.AttemptCost(ctx, 1, charges...)
}

// AttemptCost counts cost attempts against each charge's key, each with its
// own budget, in one atomic store update. It is all or nothing: a key with
// less than cost left refuses the whole of it. It is exact as Attempt is. A
// cost below 1 or above a charge's limit is an error matching
// [ErrInvalidCost].
func (l *Limiter) AttemptCost(ctx context.Context, cost int, charges ...Charge) (Decision, error) {
	if len(charges) == 0 || len(charges) > MaxKeys {
		return Decision{}, errKeyCount(len(charges))
	}
	var keys [MaxKeys]string
	var caps [MaxKeys]store.Budget
	for i, c := range charges {
		if err := c.Budget.Validate(); err != nil {
			return Decision{}, fmt.Errorf("limiter %q: key %d: %w", l.name, i, err)
		}
		if cost < 1 || int64(cost) > c.Budget.Capacity() {
			return Decision{}, fmt.Errorf("%w: limiter %q: cost %d, want 1 to %d, the limit of key %d", ErrInvalidCost, l.name, cost, c.Budget.Capacity(), i)
		}
		keys[i], caps[i] = c.Key, c.Budget
	}
	n := len(charges)
	var d Decision
	err := l.count(ctx, keys[:n:n], caps[:n:n], int64(cost), &d)
	if !fixedOnly(caps[:n]) || l.budget.Algorithm != store.FixedWindow {
		// A Refund of a key not counted by fixed windows needs its budget,
		// and one of a fixed window on a limiter whose own budget is not
		// one needs to know it is.
		b := caps
		d.budgets = &b
	}
	return d, err
}

// count decides an attempt of cost n into d, which the caller holds, so
// that the decision is not copied on its way out.
func (l *Limiter) count(ctx context.Context, keys []string, caps []store.Budget, n int64, d *Decision) error {
	err := l.decide(ctx, keys, caps, n, d)
	if err != nil {
		return err
	}
	d.Cost = int(n)
	if l.shadow != nil {
		d.Shadow = true
		if !d.Allowed && (!d.Unavailable || d.Local) {
			l.shadow.refused(l, d)
		}
	}
	if l.obs != nil {
		l.obs.ObserveDecision(l.name, OutcomeOf(d))
	}
	return nil
}

func (l *Limiter) decide(ctx context.Context, keys []string, caps []store.Budget, n int64, d *Decision) error {
	var err error
	var m *memoCall // what memory said, when the store is to be asked
	unheld := false // memory holds none of the keys, and serves only to refuse
	if l.memo {
		var refused bool
		if unheld = l.unheld(keys); unheld {
			m = l.owe(nil, keys, caps, n)
		} else {
			refused, m = l.recall(ctx, keys, caps, n, d)
		}
		switch {
		case refused:
			return nil
		case m != nil && m.sending: // attempts admitted alone go to the store with this one
			if err = l.countSending(ctx, m, d); err == nil {
				return nil
			}
			return l.failed(ctx, keys, caps, n, err, d)
		}
	}
	if l.patient && !overload.IsPatient(ctx) {
		// Waiting for a shared store is the only exact answer when it is
		// busy (see degraded): the attempt keeps its place in the queue
		// rather than being turned away at a full one and queued again.
		ctx = overload.Patient(ctx)
	}
	if len(keys) == 1 && !l.memo { // the store's one-key Count, with no Tally
		// In process: a credit lands at once, none is kept to be owed.
		var k store.KeyTally
		if k, err = l.h.CountKey(ctx, keys[0], caps[0], n); err == nil {
			decideKey(k, keys[0], caps[0], d)
			return nil
		}
	} else {
		var t store.Tally
		landings := l.out.landings.Load()
		err = l.h.CountInto(ctx, keys, caps, n, &t)
		if err == nil && !t.Allowed && t.Limiting >= 0 && l.landOwed(ctx, keys[t.Limiting], landings) {
			// The store refused by a key that credits kept for the
			// outbox owed: they have landed, so it is asked again.
			err = l.h.CountInto(ctx, keys, caps, n, &t)
		}
		if err == nil {
			decide(&t, keys, caps, false, d)
			if l.memo && !(unheld && roomLeft(&t, caps, n)) {
				l.remember(ctx, keys, caps, n, &t, m)
			}
			return nil
		}
	}
	l.landed(ctx, m)
	return l.failed(ctx, keys, caps, n, err, d)
}

// failed decides an attempt of cost n whose count in the store failed with
// err.
func (l *Limiter) failed(ctx context.Context, keys []string, caps []store.Budget, n int64, err error, d *Decision) error {
	if ctx.Err() != nil { // the attempt's context ended: nobody waits for an answer
		return fmt.Errorf("limiter %q: %w", l.name, errors.Join(ctx.Err(), err))
	}
	if !errors.Is(err, store.ErrUnavailable) {
		return fmt.Errorf("%w: limiter %q: %w", ErrInvalidKeys, l.name, err)
	}
	return l.degraded(ctx, keys, caps, n, err, d)
}

// degraded decides an attempt of cost n the store could not count, by the
// policy and the reason.
func (l *Limiter) degraded(ctx context.Context, keys []string, caps []store.Budget, n int64, cause error, d *Decision) error {
	reason := store.ReasonOf(cause)
	switch {
	case reason == store.ReasonFull:
		return l.countHeld(ctx, keys, caps, n, cause, d)
	case overload.IsPatient(ctx) && errors.Is(cause, overload.ErrQueueFull):
		l.refuseBusy(keys, caps, cause, d)
	case l.policy == Deny:
		l.refuse(cause, caps, d)
	case l.policy == Allow && down(cause):
		l.warn.Do(func() {
			l.log.Warn("store unavailable: attempt allowed uncounted", "kind", KindFailOpen, "err", cause)
		})
		*d = l.unavailable(true, cause, caps)
	default:
		if wait := l.h.Store().AloneAfter(); wait > 0 {
			if !down(cause) {
				// Busy or slow, not down: this instance reached the
				// store lately, and the others go on counting in it. What
				// it admitted alone would race their admissions, unseen
				// by either: the attempt waits for the store, as long as
				// its request lasts, or until the store has been out of
				// reach long enough to count alone.
				return l.decide(overload.Patient(ctx), keys, caps, n, d)
			}
			// Down. Counted alone now, the attempt could race the other
			// instances' admissions through the store, made before they
			// keep room for this one's share. It waits until they do,
			// and asks the store once more.
			l.h.Store().WantAlone()
			t := time.NewTimer(wait)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return fmt.Errorf("limiter %q: %w", l.name, ctx.Err())
			}
			return l.decide(ctx, keys, caps, n, d)
		}
		err := l.countLocal(ctx, keys, caps, n, cause, d)
		switch {
		case err == nil:
		case reason == store.ReasonOverloaded && !overload.IsPatient(ctx),
			!down(cause) && store.ReasonOf(err) == store.ReasonFull:
			// No room to count alone: wait for the store, however many
			// calls already wait, rather than refuse. A busy store with
			// memory full is waited for again, patient or not: it is
			// busy, not down.
			return l.decide(overload.Patient(ctx), keys, caps, n, d)
		case outOfRoom(err):
			l.refuseNoRoom(keys, caps, cause, err, d)
		default:
			l.refuse(errors.Join(cause, err), caps, d)
		}
	}
	return nil
}

// down reports whether a store that could not answer with cause is down,
// rather than busy or full. A call left unanswered at its deadline is not:
// the store may only be saturated. Once such answers open the breaker, its
// answers are down.
func down(cause error) bool {
	r := store.ReasonOf(cause)
	return r == store.ReasonDown || r == store.ReasonClosed
}

// busyRetry is the Retry-After of an attempt refused by refuseBusy.
const busyRetry = time.Second

// refuseBusy decides an attempt that would wait for the store but found its
// handle's queue full (cause). Nothing counted it, so nothing admits it:
// counted alone, it would race the attempts the store counts. As one that
// nothing has room for (refuseNoRoom), it is refused as counted alone (a
// middleware answers 429, never 503), to be tried again in a second.
func (l *Limiter) refuseBusy(keys []string, caps []store.Budget, cause error, d *Decision) {
	l.warn.Do(func() {
		l.log.Warn("store busy: attempt refused, its queue full", "kind", KindDenied, "err", cause)
	})
	now := time.Now()
	t := store.Tally{Now: now, Limiting: 0}
	for i := range caps {
		t.ExpiresAt[i] = now.Add(busyRetry)
	}
	decide(&t, keys, caps, true, d)
	d.Unavailable, d.Cause = true, cause
}

// refuse decides an attempt refused because the store could not answer.
func (l *Limiter) refuse(cause error, caps []store.Budget, d *Decision) {
	l.warn.Do(func() {
		l.log.Warn("store unavailable: attempt refused", "kind", KindDenied, "err", cause)
	})
	*d = l.unavailable(false, cause, caps)
}

// countLocal counts the attempt, of cost n, in process memory, from what
// this instance last knew of its keys. It returns the memory's error,
// having decided nothing, when memory could not count it.
func (l *Limiter) countLocal(ctx context.Context, keys []string, caps []store.Budget, n int64, cause error, d *Decision) error {
	t, err := l.countAlone(ctx, keys, caps, n)
	if err != nil {
		return err
	}
	l.warn.Do(func() {
		l.log.Warn("store unavailable: counting in process memory", "kind", KindLocal, "err", cause)
	})
	decide(&t, keys, caps, true, d)
	d.inMemory = 1<<len(keys) - 1
	d.Unavailable, d.Cause = true, cause
	return nil
}

// unavailable is the decision of a store that could not answer, under the
// Allow or Deny policy.
func (l *Limiter) unavailable(allowed bool, cause error, caps []store.Budget) Decision {
	return Decision{
		Allowed:     allowed,
		Unavailable: true,
		Cause:       cause,
		Limit:       int(int64(caps[0].Limit)),
		Window:      caps[0].Window,
		Limiting:    -1,
	}
}

// Block refuses every attempt on key for d, from the store's now: a
// lock-out longer than the key's window, for a progressive back-off. Its
// count is set past any budget, and expires at the end of the block unless
// an existing window ends later.
func (l *Limiter) Block(ctx context.Context, key string, d time.Duration) error {
	if d < time.Millisecond || d > MaxWindow {
		return fmt.Errorf("%w: block of %v, want 1ms to %v", ErrInvalidBudget, d, MaxWindow)
	}
	var win int64 // the block's window end, on the store's clock
	err := l.h.Update(ctx, []string{key}, func(now time.Time, es []store.Entry) error {
		e := &es[0]
		if err := l.budget.SpendUntil(now, e, now.Add(d)); err != nil {
			return err
		}
		win = e.ExpiresAt.UnixMilli()
		return nil
	})
	if err != nil {
		return fmt.Errorf("limiter %q: block: %w", l.name, err)
	}
	if l.memo {
		// Remembered, so that the block is answered without a store call.
		l.local.Update(ctx, []string{key}, func(now time.Time, es []store.Entry) error {
			setKnown(&es[0], now, MaxLimit, win, true, 0, now.Add(d))
			return nil
		})
	}
	return nil
}

// Keep keeps the count of key, a fixed window's, until at least d from the
// store's now; a key with no live count holds 0 until then. It is Block's
// counterpart: it spends nothing, and a kept count goes on counting in its
// longer window. A sign-in guard keeps the count of an account that signed
// in, so that strangers' counts alone expire soon. Keep never waits for a
// busy store: it then fails, and is not tried again.
func (l *Limiter) Keep(ctx context.Context, key string, d time.Duration) error {
	if d < time.Millisecond || d > MaxWindow {
		return fmt.Errorf("%w: keep of %v, want 1ms to %v", ErrInvalidBudget, d, MaxWindow)
	}
	err := l.h.Update(overload.NoWait(ctx), []string{key}, func(now time.Time, es []store.Entry) error {
		e, until := &es[0], now.Add(d)
		if !e.Live() {
			e.Value = value.AppendCount(e.Value[:0], 0)
			e.ExpiresAt = until
			return nil
		}
		if _, err := store.ParseCount(e.Value); err != nil {
			return err
		}
		if e.ExpiresAt.Before(until) {
			e.ExpiresAt = until
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("limiter %q: keep: %w", l.name, err)
	}
	return nil
}

// decide fills d, which holds the zero Decision, from the tally of a count
// on keys, field by field. A Decision built whole on the stack and copied
// in stalls store forwarding.
func decide(t *store.Tally, keys []string, caps []store.Budget, local bool, d *Decision) {
	d.Allowed, d.Local, d.Now, d.Limiting, d.n = t.Allowed, local, t.Now, t.Limiting, uint8(len(keys))
	for i := range keys {
		d.keys[i] = keys[i]
		if !t.ExpiresAt[i].IsZero() { // 0 when the key has no window
			d.expires[i] = t.ExpiresAt[i].UnixMilli()
		}
		d.remaining[i] = remainingOf(caps[i], t.Counts[i])
	}
	at := t.Limiting
	if at < 0 { // the key with the least room left decides
		at = 0
		for i := range keys {
			if d.remaining[i] < d.remaining[at] {
				at = i
			}
		}
	}
	d.settle(at, caps[at], t.Counts[at], t.ExpiresAt[at])
}

// decideKey fills d, which holds the zero Decision, from the outcome of a
// one-key count.
func decideKey(k store.KeyTally, key string, c store.Budget, d *Decision) {
	d.Allowed, d.Now, d.Limiting, d.n = k.Allowed, time.UnixMilli(k.Now), -1, 1
	if !k.Allowed {
		d.Limiting = 0
	}
	d.keys[0], d.expires[0], d.remaining[0] = key, k.ExpiresAt, remainingOf(c, k.Count)
	var reset time.Time
	if k.ExpiresAt != 0 {
		reset = time.UnixMilli(k.ExpiresAt)
	}
	d.settle(0, c, k.Count, reset)
}

// remainingOf is how many more attempts a key at count admits under c.
func remainingOf(c store.Budget, count int64) int32 {
	return int32(min(max(c.Capacity()-count, 0), MaxLimit))
}

// settle sets what d says of the key that decided, key at, of budget c, at
// count and with its window ending at reset, once Allowed and Now are set.
func (d *Decision) settle(at int, c store.Budget, count int64, reset time.Time) {
	d.KeyIndex, d.Limit, d.Window = at, c.Limit, c.Window
	d.Remaining = int(max(c.Capacity()-count, 0))
	d.Reset = reset
	if !d.Allowed {
		d.Remaining = 0
		d.RetryAfter = max(reset.Sub(d.Now), 0)
	}
}

// Peek reports what an attempt on keys would be answered now, with the
// limiter's budget, without counting it.
func (l *Limiter) Peek(ctx context.Context, keys ...string) (Decision, error) {
	if len(keys) == 0 || len(keys) > MaxKeys {
		return Decision{}, errKeyCount(len(keys))
	}
	return l.peek(ctx, keys, l.caps[:len(keys)])
}

// PeekEach reports what an attempt on the charges would be answered now,
// each key with its own budget, without counting it: what AttemptEach
// would answer. RemainingOf and ResetOf tell each key's state.
func (l *Limiter) PeekEach(ctx context.Context, charges ...Charge) (Decision, error) {
	if len(charges) == 0 || len(charges) > MaxKeys {
		return Decision{}, errKeyCount(len(charges))
	}
	keys := make([]string, len(charges))
	caps := make([]store.Budget, len(charges))
	for i, c := range charges {
		if err := c.Budget.Validate(); err != nil {
			return Decision{}, fmt.Errorf("limiter %q: key %d: %w", l.name, i, err)
		}
		keys[i], caps[i] = c.Key, c.Budget
	}
	return l.peek(ctx, keys, caps)
}

// peek is Peek with a budget per key. A store that cannot answer is
// reported in the Decision (Unavailable, Cause), as by Attempt.
func (l *Limiter) peek(ctx context.Context, keys []string, caps []store.Budget) (Decision, error) {
	var t store.Tally
	err := l.h.Update(ctx, keys, func(now time.Time, es []store.Entry) error {
		_, err := readCounts(now, es, caps, 1, &t)
		return err
	})
	if err != nil {
		if errors.Is(err, store.ErrUnavailable) {
			return l.unavailable(l.policy != Deny, err, caps), nil
		}
		return Decision{}, fmt.Errorf("limiter %q: peek: %w", l.name, err)
	}
	var d Decision
	decide(&t, keys, caps, false, &d)
	return d, nil
}

// ErrNotRefundable is returned by Refund for a decision that counted
// nothing: refused, or allowed uncounted while the store was unavailable.
var ErrNotRefundable = errors.New("limiter: decision counted nothing to refund")

// Refund gives back the attempt d counted (its Cost), on each of its keys whose window
// is still the one d counted in. A window that has since reset is left
// alone: the refund would otherwise be credited to a later window. The
// limiter's memory of the keys is lowered too, so that its next attempt on
// them asks the store. It is Credit of every key of d: a refund the store
// cannot take now is tried again until it lands.
func (l *Limiter) Refund(ctx context.Context, d Decision) error {
	var all [MaxKeys]int
	for i := range all {
		all[i] = i
	}
	return l.Credit(ctx, d, all[:d.n])
}

// Reset forgets the counts of keys: the next attempt on each opens a new
// window. Keys are cleared in one store update per [store.MaxKeys] of them,
// or one a key on a spread handle ([store.Handle.Spread]).
// This instance forgets them at once. Every other instance on the store
// asks the store again about a key it remembers spent within about
// [AskAgain]. A Reset so reaches the whole fleet in about a second.
func (l *Limiter) Reset(ctx context.Context, keys ...string) error {
	if len(keys) == 0 {
		return errKeyCount(0)
	}
	keys = slices.Clone(keys)
	slices.Sort(keys)
	keys = slices.Compact(keys) // a key named twice is cleared once
	clear := func(_ time.Time, es []store.Entry) error {
		for i := range es {
			es[i].Value = nil
		}
		return nil
	}
	for len(keys) > 0 {
		batch := keys[:min(len(keys), store.MaxKeys)]
		keys = keys[len(batch):]
		err := l.h.Update(ctx, batch, clear)
		if errors.Is(err, store.ErrInvalidKey) && len(batch) > 1 {
			// A spread handle takes the keys of one part a call
			// (store.Handle.Spread): clear them one by one.
			for _, k := range batch {
				if err = l.h.Update(ctx, []string{k}, clear); err != nil {
					break
				}
			}
		}
		if err == nil && l.local != nil {
			err = l.local.Update(ctx, batch, clear)
		}
		if err != nil {
			return fmt.Errorf("limiter %q: reset: %w", l.name, err)
		}
	}
	return nil
}
