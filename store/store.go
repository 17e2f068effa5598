package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatecount/gatecount/internal/option"
	"github.com/gatecount/gatecount/internal/overload"
	"github.com/google/uuid"
)

// Defaults of Options.
const (
	defaultDeadline    = 2 * time.Second
	defaultMaxInFlight = 64
)

// Options configure the guard of a Store. The zero value gives the defaults.
type Options struct {
	// Logger receives the store's logs; nil means slog.Default(). Every
	// record carries a stable "kind" attribute and the store's instance ID,
	// never a key.
	Logger *slog.Logger
	// Deadline bounds every call in the backend, and its wait for a slot
	// apart; 0 means 2 s. A call past it is answered as unavailable even if
	// it still runs in the backend.
	Deadline time.Duration
	// MaxInFlight bounds the calls running in the backend at once, including
	// those answered past their deadline that have not yet returned; 0 means
	// 64. A call past it waits for a slot, on its own goroutine, up to its
	// deadline (see MaxQueued). Calls to an [Inline] backend (the memory
	// store) are not bounded: they never wait on I/O, so they cannot pile
	// up behind a slow store.
	MaxInFlight int
	// MaxQueued bounds the calls of one handle that may wait for a slot at
	// once; 0 means 16384. Slots go to the handles with calls waiting in
	// turn, and within a handle first come first served. A call is answered
	// unavailable ([ReasonOverloaded]) only when its handle's queue is full
	// or its deadline passes while it waits. Each waiting call costs about
	// 200 bytes. The bound holds for every call, one that waits as long as
	// its context lasts too.
	MaxQueued int
	// Breaker configures the breaker; the zero value gives its defaults.
	Breaker BreakerOptions
	// InstanceID names this process's store in logs; the zero UUID means a
	// new random one.
	InstanceID uuid.UUID
	// Observer, when set, is told of every call (see Observer).
	Observer Observer
	// Announce is how often this instance announces itself in a shared
	// store, so that every instance knows how many share it (see
	// [Store.Share]); 0 means 1 s. A member is counted for thirty
	// intervals after its last announcement.
	Announce time.Duration
}

// WithDefaults returns o with every zero field given its default, including
// a new InstanceID. A backend's constructor calls it to log with the same
// logger and instance ID as the Store that will wrap it.
func (o Options) WithDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	option.Default(&o.Deadline, defaultDeadline)
	option.Default(&o.MaxInFlight, defaultMaxInFlight)
	option.Default(&o.MaxQueued, defaultMaxQueued)
	option.Default(&o.Announce, defaultAnnounce)
	if o.InstanceID == (uuid.UUID{}) {
		o.InstanceID = uuid.New()
		o.Logger = o.Logger.With("instance", o.InstanceID.String())
	}
	o.Breaker = o.Breaker.withDefaults()
	return o
}

// Store is a Backend behind the guard. Limiters use it through the handles it
// hands out. It is safe for concurrent use.
type Store struct {
	b       Backend
	inline  Inline  // when b is in process memory
	counter Counter // b's own, or updateCounter
	// algorithms: counter follows every Algorithm (AlgorithmCounter).
	algorithms bool
	opts       Options
	backing    any
	slots      slots
	sweeps     lane // the lane of Sweep, which no handle makes
	fleet      fleet
	closed     atomic.Bool
	running    atomic.Int64 // goroutines running backend calls
	prompt     bool
	obs        Observer
	now        func() time.Time // the breakers' clock

	mu       sync.Mutex
	prefixes []string
	handles  []*Handle
	names    map[string]string // limiter name → prefix of the handle it claimed
}

// New wraps b in the guard. opts should be the ones b was built with, after
// WithDefaults, so that both log under one instance ID.
func New(b Backend, opts Options) *Store {
	opts = opts.WithDefaults()
	s := &Store{b: b, opts: opts, backing: any(b), obs: opts.Observer}
	s.inline, _ = b.(Inline)
	s.counter, _ = b.(Counter)
	if s.counter == nil {
		s.counter = updateCounter{b}
	}
	_, s.algorithms = s.counter.(AlgorithmCounter)
	if bk, ok := b.(Backing); ok {
		s.backing = bk.Backing()
	}
	if p, ok := b.(Prompt); ok && p.Prompt() {
		s.prompt = true
	}
	s.slots.max = int64(opts.MaxInFlight)
	s.now = time.Now
	s.sweeps.breaker.init(opts.Breaker, s.now, opts.Logger, "")
	return s
}

// InstanceID returns the ID this store logs under.
func (s *Store) InstanceID() uuid.UUID { return s.opts.InstanceID }

// Shared reports whether every instance of the app sees the same entries.
func (s *Store) Shared() bool { return s.b.Shared() }

// InFlight returns the number of backend calls running now, those under the
// in-flight bound; an Inline backend's calls are not counted.
func (s *Store) InFlight() int { return int(s.slots.inFlight()) }

// Queued returns the number of calls waiting for a slot under the in-flight
// bound.
func (s *Store) Queued() int { return int(s.slots.queuedNow()) }

// Inline reports whether the backend's calls run inline (see Inline): in
// process memory, with no I/O.
func (s *Store) Inline() bool { return s.inline != nil }

// Backend returns the backend the store guards.
func (s *Store) Backend() Backend { return s.b }

var backings = struct {
	sync.Mutex
	m map[backingPrefix]struct{}
}{m: map[backingPrefix]struct{}{}}

type backingPrefix struct {
	backing any
	prefix  string
}

// Handle returns a new handle whose keys live under prefix. A prefix can have
// one handle on a backing at a time: a second is refused with
// [ErrDuplicatePrefix] until the store holding the first is closed.
func (s *Store) Handle(prefix string) (*Handle, error) {
	if prefix == "" || len(prefix) > MaxPrefixLen {
		return nil, fmt.Errorf("%w: the prefix %q must be 1 to %d bytes", ErrInvalidKey, prefix, MaxPrefixLen)
	}
	if s.closed.Load() {
		return nil, errClosed
	}
	bp := backingPrefix{s.backing, prefix}
	backings.Lock()
	defer backings.Unlock()
	if _, dup := backings.m[bp]; dup {
		return nil, fmt.Errorf("%w: %q", ErrDuplicatePrefix, prefix)
	}
	backings.m[bp] = struct{}{}
	h := &Handle{s: s, prefix: prefix}
	h.lane.breaker.init(s.opts.Breaker, s.now, s.opts.Logger, prefix)
	s.mu.Lock()
	s.prefixes = append(s.prefixes, prefix)
	s.handles = append(s.handles, h)
	s.mu.Unlock()
	return h, nil
}

// Sweep removes expired entries from the whole store and returns how many
// went.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	var n int
	start := time.Now()
	err := s.call(ctx, &s.sweeps, &s.sweeps.breaker, func(ctx context.Context) error {
		var err error
		n, err = s.b.Sweep(ctx)
		return err
	})
	if s.obs != nil {
		s.observe(opSweep, "", start, err)
	}
	return n, err
}

// Close stops new calls, waits for calls still running in a backend that is
// not Inline, and closes the backend. Its handles' prefixes become free
// again. Close is idempotent.
func (s *Store) Close() error {
	if s.closed.Load() {
		return nil
	}
	s.stopFleet()
	if s.closed.Swap(true) {
		return nil
	}
	// Every call admitted before closed was set holds a slot (acquire
	// takes it first, then looks at closed), so none is missed here; a call
	// still waiting gets its slot, sees closed and gives it back.
	for s.slots.inFlight() > 0 || s.running.Load() > 0 {
		time.Sleep(time.Millisecond)
	}
	err := s.b.Close()
	backings.Lock()
	s.mu.Lock()
	for _, p := range s.prefixes {
		delete(backings.m, backingPrefix{s.backing, p})
	}
	s.mu.Unlock()
	backings.Unlock()
	return err
}

// enter admits a call to an inline backend, or answers why not.
func (s *Store) enter() error {
	if s.closed.Load() {
		return errClosed
	}
	return nil
}

// acquire admits a call of lane l to a backend that is not inline. It takes
// a slot under the in-flight bound, waiting for one until ctx ends, then
// asks breaker br. The caller gives the slot back (s.slots.release) when
// the backend returns.
func (s *Store) acquire(ctx context.Context, l *lane, br *breaker) (waited bool, err error) {
	if s.closed.Load() {
		return false, errClosed
	}
	if waited, err = s.slots.acquire(ctx, l, s.opts.MaxQueued); err != nil {
		return waited, err
	}
	return waited, s.admit(br)
}

// admit admits a call that holds a slot and that breaker br guards, or
// gives the slot back and answers why not.
func (s *Store) admit(br *breaker) error {
	if s.closed.Load() { // Close began meanwhile, and may not wait for us
		s.slots.release()
		return errClosed
	}
	if err := br.allow(); err != nil {
		s.slots.release()
		return err
	}
	return nil
}

// call runs f, a call of lane l, under the deadline, the in-flight bound
// and breaker br (l's own, or that of the part of a spread handle). It
// runs on the caller's goroutine for an inline backend (no deadline) or a
// prompt one (under a deadline context). Otherwise it runs on a goroutine
// of its own. A call waits for a slot up to the deadline (a patient call as
// long as ctx lasts), with a place in its handle's queue. Then it has the
// whole deadline in the backend (or ctx's, when sooner), even if ctx is
// cancelled: one that reached the backend with its time nearly spent would
// waste the work done for it.
func (s *Store) call(ctx context.Context, l *lane, br *breaker, f func(ctx context.Context) error) error {
	if s.inline != nil {
		if err := s.enter(); err != nil {
			return err
		}
		return s.classify(ctx, f(ctx))
	}
	if err := ctx.Err(); err != nil { // nobody waits for it: it never starts
		return err
	}
	var waited bool
	var err error
	if !s.closed.Load() && s.slots.tryAcquire() {
		// A free slot: no wait, so no context to bound it.
		err = s.admit(br)
	} else {
		wctx, wcancel := ctx, context.CancelFunc(func() {})
		if !overload.IsPatient(ctx) {
			wctx, wcancel = context.WithTimeout(ctx, s.opts.Deadline)
		}
		waited, err = s.acquire(wctx, l, br)
		wcancel()
	}
	if err != nil {
		if errors.Is(err, overload.ErrWaitedOut) && ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	// In the backend the call has the store's deadline, or the caller's
	// when sooner, but a caller that hangs up does not cut it short: a
	// query cut mid-way costs the driver its connection, and a flood of
	// clients that hang up would so churn them all. The wait for a slot,
	// above, is what ends as soon as ctx does.
	deadline := time.Now().Add(s.opts.Deadline)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	dctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	if s.prompt {
		err := f(dctx)
		s.slots.release()
		var own callerError
		if err != nil && dctx.Err() != nil && ctx.Err() == nil && !errors.As(err, &own) && ReasonOf(err) == 0 {
			err = &UnavailableError{Reason: ReasonDeadline, Err: err}
		}
		err = s.classify(ctx, err)
		if err != nil && ctx.Err() != nil {
			// The caller's deadline cut it short: that says nothing of
			// the store's health.
			return ctx.Err()
		}
		br.record(err, waited)
		return err
	}
	done := make(chan error, 1)
	s.running.Add(1)
	go func() {
		defer s.running.Add(-1)
		err := f(dctx)
		s.slots.release()
		done <- err
	}()
	select {
	case err := <-done:
		err = s.classify(ctx, err)
		br.record(err, waited)
		return err
	case <-dctx.Done():
		select {
		case err := <-done: // finished as the deadline came
			err = s.classify(ctx, err)
			br.record(err, waited)
			return err
		default:
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		err := &UnavailableError{Reason: ReasonDeadline, Err: fmt.Errorf("no answer within %v", s.opts.Deadline)}
		br.record(err, waited)
		return err
	}
}

// classify turns a backend's error into the guard's answer: nil, an error of
// the contract, the caller's own context error, or ErrUnavailable.
func (s *Store) classify(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var u *UnavailableError
	var own callerError
	switch {
	case errors.As(err, &own):
		return own.err
	case errors.Is(err, ErrNotCounter):
		// A Counter's answer for a value that is not a count: the caller's
		// mistake, as the generic Count returns it, not the store's.
		return err
	case errors.As(err, &u):
		return err
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return err
	case errors.Is(err, context.DeadlineExceeded):
		return &UnavailableError{Reason: ReasonDeadline, Err: err}
	}
	return &UnavailableError{Reason: ReasonDown, Err: err}
}

// Handle is a prefixed view of a Store, claimed by one limiter. Its keys
// never meet those of another handle. It is safe for concurrent use.
type Handle struct {
	s      *Store
	prefix string
	lane   lane
	parts  atomic.Pointer[[]breaker] // a breaker per part, once Spread spread the keys

	mu    sync.Mutex
	owner string
}

// Prefix returns the prefix under which the handle's keys live.
func (h *Handle) Prefix() string { return h.prefix }

// Store returns the store the handle belongs to.
func (h *Handle) Store() *Store { return h.s }

// Shared reports whether every instance of the app sees the same entries.
func (h *Handle) Shared() bool { return h.s.b.Shared() }

// Claim records that owner, a limiter's name, counts through this handle. A
// handle can be claimed once: a second claim returns a *[ReuseError] matching
// [ErrStoreReuse] that names both claimants. A name can be claimed once per
// store. A second limiter of the store with the same name is refused with a
// *[NameError] matching [ErrDuplicateName]. Its RateLimit fields, logs and
// metrics could not be told from the first's.
func (h *Handle) Claim(owner string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.owner != "" {
		return &ReuseError{Prefix: h.prefix, First: h.owner, Second: owner}
	}
	if owner == "" {
		owner = "(unnamed)"
	}
	s := h.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if prefix, dup := s.names[owner]; dup {
		return &NameError{Name: owner, First: prefix, Second: h.prefix}
	}
	if s.names == nil {
		s.names = map[string]string{}
	}
	s.names[owner] = h.prefix
	h.owner = owner
	return nil
}

// Owner returns the name the handle was claimed by, or "".
func (h *Handle) Owner() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.owner
}

// Update atomically reads the live entries for keys, calls apply with them
// and the store's clock, and writes what apply leaves in them. No other
// update to these keys comes in between (see [ApplyFunc]). It returns
// apply's own error unchanged. When apply left a bad value, it returns
// an error matching [ErrInvalidValue], and nothing is written. It
// returns [ErrInvalidKey] for bad keys, and [ErrFull] (matching
// [ErrUnavailable]) when a new key finds the store full. When the store
// could not answer, the error matches ErrUnavailable.
func (h *Handle) Update(ctx context.Context, keys []string, apply ApplyFunc) error {
	if err := checkKeys(keys); err != nil {
		return err
	}
	if h.s.obs == nil {
		return h.update(ctx, keys, apply)
	}
	start := time.Now()
	err := h.update(ctx, keys, apply)
	h.s.observe(opUpdate, h.prefix, start, err)
	return err
}

// update runs apply on one of the guard's two paths: on the caller's
// goroutine for a backend in process memory, under call for one that does
// I/O.
func (h *Handle) update(ctx context.Context, keys []string, apply ApplyFunc) error {
	s := h.s
	if s.inline != nil {
		if err := s.enter(); err != nil {
			return err
		}
		ofCaller, err := s.inline.UpdateInline(h.prefix, keys, apply, checkApplied)
		if err != nil && !ofCaller {
			err = s.classify(ctx, err)
		}
		return err
	}
	br, err := h.breakerOf(keys)
	if err != nil {
		return err
	}
	c := applyPool.Get().(*applyCall)
	c.user = apply
	// The call may outlive its deadline, so apply must not run once the
	// caller has been answered.
	err = s.call(ctx, &h.lane, br, func(ctx context.Context) error {
		err := s.b.Update(ctx, h.prefix, keys, c.fn)
		if err == nil {
			return nil
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if own := c.own(err); own != nil {
			return callerError{own}
		}
		return err
	})
	if s.prompt {
		// The backend ran on this goroutine and has returned: no apply of
		// this call can follow, so c can serve another.
		c.release()
		return err
	}
	c.mu.Lock()
	c.abandoned = true
	c.mu.Unlock()
	// c is not returned to the pool: a late apply may still look at it.
	return err
}

// Read returns the live entries for keys, in order; a key with no live entry
// has the zero Entry.
func (h *Handle) Read(ctx context.Context, keys []string) ([]Entry, error) {
	if err := checkKeys(keys); err != nil {
		return nil, err
	}
	br, err := h.breakerOf(keys)
	if err != nil {
		return nil, err
	}
	var out []Entry
	var start time.Time
	if h.s.obs != nil {
		start = time.Now()
	}
	err = h.s.call(ctx, &h.lane, br, func(ctx context.Context) error {
		var err error
		out, err = h.s.b.Read(ctx, h.prefix, keys)
		return err
	})
	if h.s.obs != nil {
		h.s.observe(opRead, h.prefix, start, err)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

func checkKeys(keys []string) error {
	if len(keys) == 0 || len(keys) > MaxKeys {
		return fmt.Errorf("%w: %d keys in one call, want 1 to %d", ErrInvalidKey, len(keys), MaxKeys)
	}
	for i, k := range keys {
		if k == "" || len(k) > MaxKeyLen {
			return fmt.Errorf("%w: key %d is %d bytes, want 1 to %d", ErrInvalidKey, i, len(k), MaxKeyLen)
		}
		for _, o := range keys[:i] {
			if o == k {
				return fmt.Errorf("%w: key %d named twice", ErrInvalidKey, i)
			}
		}
	}
	return nil
}

// errAbandoned aborts an apply that runs after its caller was answered.
var errAbandoned = &UnavailableError{Reason: ReasonDeadline, Err: errors.New("apply ran after the caller was answered")}

// applyCall wraps a caller's apply: it checks and normalises what apply
// leaves, and remembers apply's own error so that the guard can tell it from
// a store failure. fn is bound once, so a call allocates nothing.
type applyCall struct {
	fn        ApplyFunc // checks abandoned, then runs
	user      ApplyFunc
	userErr   error // the last error apply itself returned
	checkErr  error // the last error the checks returned
	mu        sync.Mutex
	abandoned bool
}

var applyPool = sync.Pool{New: func() any {
	c := new(applyCall)
	c.fn = c.apply
	return c
}}

func (c *applyCall) release() {
	c.user, c.userErr, c.checkErr = nil, nil, nil
	applyPool.Put(c)
}

func (c *applyCall) apply(now time.Time, entries []Entry) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.abandoned {
		return errAbandoned
	}
	return c.run(now, entries)
}

func (c *applyCall) run(now time.Time, entries []Entry) error {
	c.userErr, c.checkErr = nil, nil
	now = time.UnixMilli(now.UnixMilli())
	if err := c.user(now, entries); err != nil {
		c.userErr = err
		return err
	}
	c.checkErr = checkApplied(now, entries)
	return c.checkErr
}

// checkApplied checks and normalises what an apply left in entries. Every
// value must be at most MaxValueSize bytes of JSON, and every expiry is cut
// to the millisecond. A value that expires at or before now is dropped,
// since it would not be live.
func checkApplied(now time.Time, entries []Entry) error {
	for i := range entries {
		e := &entries[i]
		if e.Value == nil {
			continue
		}
		if len(e.Value) > MaxValueSize {
			return fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidValue, len(e.Value), MaxValueSize)
		}
		if !validJSON(e.Value) {
			return errNotJSON
		}
		ms := e.ExpiresAt.UnixMilli()
		if ms <= now.UnixMilli() {
			e.Value = nil // expired as written: not live, so gone
			continue
		}
		e.ExpiresAt = time.UnixMilli(ms)
	}
	return nil
}

// own returns the error of the caller's making that err carries, if any:
// apply's own error, or a check of what apply left.
func (c *applyCall) own(err error) error {
	switch {
	case c.userErr != nil && errors.Is(err, c.userErr):
		return c.userErr
	case c.checkErr != nil && errors.Is(err, c.checkErr):
		return c.checkErr
	}
	return nil
}

// callerError carries an error of the caller's making through the guard,
// which passes it on unchanged and does not count it against the store.
type callerError struct{ err error }

// Error returns the caller's error's message.
func (e callerError) Error() string { return e.err.Error() }

// Unwrap returns the caller's error.
func (e callerError) Unwrap() error { return e.err }

// validJSON reports whether v is JSON, with a fast path for the plain
// integers limiters keep.
func validJSON(v []byte) bool {
	if len(v) > 0 && len(v) < 20 {
		i := 0
		if v[0] == '-' {
			i = 1
		}
		if i < len(v) && (v[i] != '0' || len(v) == i+1) {
			j := i
			for j < len(v) && v[j] >= '0' && v[j] <= '9' {
				j++
			}
			if j == len(v) && j > i {
				return true
			}
		}
	}
	return json.Valid(v)
}
