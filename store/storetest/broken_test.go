package storetest_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/storekit"
	"github.com/gatecount/gatecount/store/storetest"
	"github.com/gatecount/gatecount/store/value"
)

// flaw is the one way a test backend breaks the contract: each is a single
// realistic bug of a store author.
type flaw int

const (
	sound              flaw = iota
	losesUpdates            // reads, lets go of its lock while apply runs, relocks, writes
	ignoresExpiry           // reads and applies expired entries
	evictsWhenFull          // removes a live entry to make room
	halfMultiKey            // writes key 0, unlocks, then writes the rest
	judgesAhead             // tells apply the time, judges expiry minutes later
	judgesBehind            // tells apply the time, judges expiry minutes earlier
	sweepsLive              // Sweep removes live entries too
	writesOnApplyError      // writes what apply left even when it failed
	retriesStale            // optimistic: after a conflict, runs apply again on the entries the first run changed
	countNotAtomic          // its own Count charges keys with room when another has none
	reencodesJSON           // keeps each value as encoding/json re-encodes it
	cachesReads             // each instance keeps what Read read for cacheFor, dropping what it writes
	cachesReadsBlind        // each instance keeps what Read read for cacheFor, whatever it writes
	readAliases             // Read returns the stored bytes themselves
	applyAliases            // apply is given the stored bytes themselves
	expiresEarly            // judges expiry earlyBy after the time it tells apply
	keepsExpiry             // a write over an expired row keeps the row's expiry
	countKeepsExpiry        // its own Count over an expired row keeps the row's expiry
	readsOneByOne           // Read takes its lock afresh for each key
	locksInCallOrder        // takes its keys' locks in the order a call names them
	writesFirstRun          // optimistic: after a conflict, writes the first run's result
	joinsPrefix             // names an entry by its prefix and key joined
	sweepOverCounts         // Sweep reports every row it looked at
	sweepNoCommit           // Sweep counts the expired rows but does not remove them
	leaksOnRewrite          // counts a write over an expired row as a new row
	countIgnoresBound       // its own Count adds keys without asking the bound
	boundPerPrefix          // keeps its bound per prefix
	leaksGoroutine          // Close does not stop its background goroutine
	countRacy               // its own Count reads, lets go of its lock, relocks, writes
	restartsWindow          // its own Count moves the window's end on every count
)

// How far broken clocks are off, and how long a caching store caches.
const (
	skew     = 5 * time.Minute
	earlyBy  = 100 * time.Millisecond
	cacheFor = time.Second
)

// locking is how a test backend keeps an Update atomic.
type locking int

const (
	// oneLock holds the world's lock through the whole Update.
	oneLock locking = iota
	// keyLocks holds a lock per key, taken in the keys' order, through the
	// Update, and the world's lock only to read and write.
	keyLocks
	// optimistic reads, runs apply with no lock of the world held, and
	// writes only if no key changed meanwhile; otherwise it starts over.
	// Updates of one instance take turns under a lock of its own, so only
	// other instances' updates conflict with them.
	optimistic
)

// errFreed ends a call stuck on a key lock once the test is over.
var errFreed = errors.New("test over: key locks freed")

// world is the table a test backend keeps its rows in, shared by the
// backends of "instances" of a shared store. Like a SQL table, it keeps an
// expired row until a sweep removes it or a write replaces it.
type world struct {
	mu    sync.Mutex
	m     map[wkey]*row
	rows  int            // rows held, as the store's own count has it
	added int            // rows ever added
	per   map[string]int // rows held per prefix, as that count has it
	max   int            // rows; 0 for no bound
	ver   uint64
	locks map[wkey]chan struct{}
	freed chan struct{} // closed when the test is over
}

// wkey names a row.
type wkey struct{ prefix, key string }

type row struct {
	prefix string
	v      []byte
	exp    time.Time
	ver    uint64
}

func newWorld(max int) *world {
	return &world{m: map[wkey]*row{}, per: map[string]int{}, max: max,
		locks: map[wkey]chan struct{}{}, freed: make(chan struct{})}
}

// mapBackend is a store.Backend over a world, broken by its flaw.
type mapBackend struct {
	w      *world
	flaw   flaw
	lock   locking
	shared bool
	inline bool
	prompt bool          // it claims store.Prompt
	pool   *pool         // what it shares with other backends
	clock  time.Duration // this instance's clock is off by clock

	cacheMu sync.Mutex
	cache   map[wkey]cached
	turns   sync.Mutex // of an optimistic instance's updates

	stop, done chan struct{} // of the background goroutine, when started
}

type cached struct {
	e  store.Entry
	at time.Time
}

func (b *mapBackend) Shared() bool { return b.shared }

// background stands for a store's background sweep: it runs until Close,
// or until the test is over.
func (b *mapBackend) background() {
	defer close(b.done)
	select {
	case <-b.stop:
	case <-b.w.freed:
	}
}

func (b *mapBackend) Close() error {
	if b.stop == nil || b.flaw == leaksGoroutine {
		return nil
	}
	select {
	case <-b.stop:
	default:
		close(b.stop)
	}
	<-b.done
	return nil
}

func (b *mapBackend) now() time.Time { return time.Now().Add(b.clock) }

// trip stands for the round trip a shared store makes to its server for
// each statement: other clients' statements run meanwhile. An inline
// store's calls make none.
func (b *mapBackend) trip() {
	if !b.inline {
		runtime.Gosched()
	}
}

// judge is the time expiry is judged at.
func (b *mapBackend) judge(now time.Time) time.Time {
	switch b.flaw {
	case judgesAhead:
		return now.Add(skew)
	case judgesBehind:
		return now.Add(-skew)
	case expiresEarly:
		return now.Add(earlyBy)
	}
	return now
}

func (b *mapBackend) live(r *row, judge time.Time) bool {
	if r != nil && b.flaw == liveAtExpiry {
		return !r.exp.Before(judge.Truncate(time.Millisecond))
	}
	return r != nil && (b.flaw == ignoresExpiry || r.exp.After(judge))
}

func (b *mapBackend) name(prefix, key string) wkey {
	if b.flaw == joinsPrefix {
		return wkey{prefix + key, ""}
	}
	return wkey{prefix, key}
}

// snapshot returns the live entries of keys. The caller holds w.mu.
func (b *mapBackend) snapshot(prefix string, keys []string, judge time.Time) ([]store.Entry, []uint64) {
	es := make([]store.Entry, len(keys))
	vers := make([]uint64, len(keys))
	for i, k := range keys {
		r := b.w.m[b.name(prefix, k)]
		if r != nil {
			vers[i] = r.ver
		}
		if b.live(r, judge) {
			v := bytes.Clone(r.v)
			if b.flaw == applyAliases {
				v = r.v
			}
			es[i] = store.Entry{Value: v, ExpiresAt: r.exp}
		}
	}
	return es, vers
}

// held is the number of rows the bound counts for prefix. The caller
// holds w.mu.
func (b *mapBackend) held(prefix string) int {
	if b.flaw == boundPerPrefix {
		return b.w.per[prefix]
	}
	return b.w.rows
}

// write writes es for keys, all or nothing, making room under the bound
// unless unbounded is set; keepExp keeps an expired row's expiry when the
// row is written over. The caller holds w.mu.
func (b *mapBackend) write(prefix string, keys []string, es []store.Entry, judge time.Time, skip []bool, unbounded, keepExp bool) error {
	w := b.w
	for swept := false; w.max > 0 && !unbounded; {
		added := 0
		for i, k := range keys {
			if es[i].Value == nil || skip != nil && skip[i] {
				continue
			}
			if r := w.m[b.name(prefix, k)]; r == nil || b.flaw == leaksOnRewrite && !b.live(r, judge) {
				added++
			}
		}
		if added == 0 || b.held(prefix)+added <= w.max {
			break
		}
		if !swept {
			b.sweepLocked(judge, true)
			swept = true
			continue
		}
		if b.flaw != evictsWhenFull {
			return store.ErrFull
		}
		for n, r := range w.m { // evict any other entry
			if r.prefix != prefix || !slices.Contains(keys, n.key) {
				b.remove(n)
				break
			}
		}
	}
	for i, k := range keys {
		if skip != nil && skip[i] {
			continue
		}
		if i == 1 && b.flaw == halfMultiKey {
			w.mu.Unlock()
			time.Sleep(100 * time.Microsecond)
			w.mu.Lock()
		}
		b.put(prefix, k, es[i], judge, keepExp)
	}
	return nil
}

// put writes one row. The caller holds w.mu.
func (b *mapBackend) put(prefix, key string, e store.Entry, judge time.Time, keepExp bool) {
	w := b.w
	n := b.name(prefix, key)
	r := w.m[n]
	if e.Value == nil {
		if r != nil {
			b.remove(n)
		}
		return
	}
	v := bytes.Clone(e.Value)
	if b.flaw == reencodesJSON {
		var x any
		if json.Unmarshal(v, &x) == nil {
			v, _ = json.Marshal(x)
		}
	}
	w.ver++
	if r == nil {
		w.m[n] = &row{prefix: prefix, v: v, exp: e.ExpiresAt, ver: w.ver}
		w.rows++
		w.added++
		w.per[prefix]++
		return
	}
	exp := e.ExpiresAt
	if b.flaw == keepsLiveExpiry && b.live(r, judge) {
		exp = r.exp
	}
	if !b.live(r, judge) {
		if b.flaw == leaksOnRewrite {
			w.rows++
			w.per[prefix]++
		}
		if keepExp {
			exp = r.exp
		}
	}
	r.v, r.exp, r.ver = v, exp, w.ver
}

// remove deletes a row. The caller holds w.mu.
func (b *mapBackend) remove(n wkey) {
	w := b.w
	w.per[w.m[n].prefix]--
	delete(w.m, n)
	w.rows--
}

// lockKeys takes the key locks of keys, in their order or, with the flaw,
// in the order the call names them.
func (b *mapBackend) lockKeys(ctx context.Context, prefix string, keys []string) (func(), error) {
	if b.flaw == ignoresDeadline {
		ctx = context.Background()
	}
	names := make([]wkey, len(keys))
	for i, k := range keys {
		names[i] = b.name(prefix, k)
	}
	if b.flaw != locksInCallOrder {
		slices.SortFunc(names, func(x, y wkey) int {
			return cmp.Or(cmp.Compare(x.prefix, y.prefix), cmp.Compare(x.key, y.key))
		})
	}
	var held []chan struct{}
	unlock := func() {
		for i := len(held) - 1; i >= 0; i-- {
			<-held[i]
		}
	}
	for _, n := range names {
		b.w.mu.Lock()
		ch := b.w.locks[n]
		if ch == nil {
			ch = make(chan struct{}, 1)
			b.w.locks[n] = ch
		}
		b.w.mu.Unlock()
		select {
		case ch <- struct{}{}:
			held = append(held, ch)
		case <-b.w.freed:
			unlock()
			return nil, errFreed
		case <-ctx.Done():
			unlock()
			return nil, ctx.Err()
		}
	}
	return unlock, nil
}

func (b *mapBackend) Update(ctx context.Context, prefix string, keys []string, apply store.ApplyFunc) error {
	b.forget(prefix, keys)
	if b.lock == optimistic {
		return b.updateOptimistic(prefix, keys, apply)
	}
	if b.lock == keyLocks {
		unlock, err := b.lockKeys(ctx, prefix, keys)
		if err != nil {
			return err
		}
		defer unlock()
	}
	w := b.w
	b.trip()
	w.mu.Lock()
	now := b.now()
	judge := b.judge(now)
	es, _ := b.snapshot(prefix, keys, judge)
	letGo := b.flaw == losesUpdates || b.lock == keyLocks
	if letGo {
		w.mu.Unlock()
	}
	err := apply(now, es)
	if letGo {
		b.trip()
		w.mu.Lock()
	}
	defer func() { w.mu.Unlock() }()
	if err != nil && b.flaw != writesOnApplyError {
		return err
	}
	if werr := b.write(prefix, keys, es, judge, nil, false, b.flaw == keepsExpiry); werr != nil {
		return werr
	}
	return err
}

// updateOptimistic is Update for an optimistic store.
func (b *mapBackend) updateOptimistic(prefix string, keys []string, apply store.ApplyFunc) error {
	b.turns.Lock()
	defer b.turns.Unlock()
	w := b.w
	var first []store.Entry
	for conflicts := range 100_000 {
		if conflicts > 0 {
			// A random backoff growing with the conflicts, as optimistic
			// stores do, lets the update that won finish.
			time.Sleep(time.Duration(rand.IntN(min(conflicts, 40)*50+1)) * time.Microsecond)
		}
		b.trip()
		w.mu.Lock()
		now := b.now()
		judge := b.judge(now)
		es, vers := b.snapshot(prefix, keys, judge)
		w.mu.Unlock()
		if first != nil && b.flaw == retriesStale {
			es = first
		}
		if err := apply(now, es); err != nil {
			return err
		}
		if first == nil {
			first = es
		}
		b.trip()
		w.mu.Lock()
		_, still := b.snapshot(prefix, keys, judge)
		if slices.Equal(vers, still) {
			if b.flaw == writesFirstRun {
				es = first
			}
			err := b.write(prefix, keys, es, judge, nil, false, false)
			w.mu.Unlock()
			return err
		}
		w.mu.Unlock()
	}
	return errors.New("optimistic update: too many conflicts")
}

// forget drops what the instance cached of keys, which it writes.
func (b *mapBackend) forget(prefix string, keys []string) {
	if b.flaw != cachesReads { // cachesReadsBlind forgets nothing
		return
	}
	b.cacheMu.Lock()
	defer b.cacheMu.Unlock()
	for _, k := range keys {
		delete(b.cache, b.name(prefix, k))
	}
}

func (b *mapBackend) Read(ctx context.Context, prefix string, keys []string) ([]store.Entry, error) {
	if b.lock == keyLocks {
		unlock, err := b.lockKeys(ctx, prefix, keys)
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	out := make([]store.Entry, len(keys))
	caches := b.flaw == cachesReads || b.flaw == cachesReadsBlind
	if caches {
		b.cacheMu.Lock()
		defer b.cacheMu.Unlock()
		if b.cache == nil {
			b.cache = map[wkey]cached{}
		}
		hit := true
		for i, k := range keys {
			c, ok := b.cache[b.name(prefix, k)]
			if !ok || time.Since(c.at) > cacheFor {
				hit = false
				break
			}
			out[i] = store.Entry{Value: bytes.Clone(c.e.Value), ExpiresAt: c.e.ExpiresAt}
		}
		if hit {
			return out, nil
		}
	}
	w := b.w
	b.trip()
	w.mu.Lock()
	defer w.mu.Unlock()
	judge := b.judge(b.now())
	for i, k := range keys {
		if i > 0 && b.flaw == readsOneByOne {
			w.mu.Unlock()
			b.trip()
			w.mu.Lock()
		}
		r := w.m[b.name(prefix, k)]
		if !b.live(r, judge) {
			continue
		}
		v := bytes.Clone(r.v)
		if b.flaw == readAliases {
			v = r.v
		}
		out[i] = store.Entry{Value: v, ExpiresAt: r.exp}
	}
	if caches {
		for i, k := range keys {
			b.cache[b.name(prefix, k)] = cached{store.Entry{Value: bytes.Clone(out[i].Value), ExpiresAt: out[i].ExpiresAt}, time.Now()}
		}
	}
	return out, nil
}

func (b *mapBackend) Sweep(context.Context) (int, error) {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	seen := len(b.w.m)
	n := b.sweepLocked(b.judge(b.now()), b.flaw != sweepNoCommit)
	if b.flaw == sweepOverCounts {
		return seen, nil
	}
	return n, nil
}

// sweepLocked removes the expired rows, or only counts them when commit is
// false, and returns how many. The caller holds w.mu.
func (b *mapBackend) sweepLocked(judge time.Time, commit bool) int {
	n := 0
	for k, r := range b.w.m {
		if b.flaw == sweepsLive || !r.exp.After(judge) {
			if commit {
				b.remove(k)
			}
			n++
		}
	}
	return n
}

// inlineMap is a mapBackend on the guard's path for stores in process
// memory (store.Inline).
type inlineMap struct{ *mapBackend }

func (b inlineMap) UpdateInline(prefix string, keys []string, apply, check store.ApplyFunc) (ofCaller bool, err error) {
	var mine error
	err = b.Update(context.Background(), prefix, keys, func(now time.Time, es []store.Entry) error {
		now = time.UnixMilli(now.UnixMilli())
		if mine = apply(now, es); mine == nil {
			mine = check(now, es)
		}
		return mine
	})
	if mine != nil && errors.Is(err, mine) {
		return true, mine
	}
	return false, err
}

// CountInline is the generic Count: store.ApplyCount through UpdateInline.
func (b inlineMap) CountInline(prefix string, keys [store.MaxCountKeys]string, caps []store.Budget, n int64) (t store.Tally, err error) {
	_, err = b.UpdateInline(prefix, keys[:len(caps)], func(now time.Time, es []store.Entry) error {
		return store.ApplyCount(now, es, caps, n, &t)
	}, func(time.Time, []store.Entry) error { return nil })
	return t, err
}

// CountOne is CountInline on one key.
func (b inlineMap) CountOne(prefix, key string, c store.Budget, n int64) (store.KeyTally, error) {
	t, err := b.CountInline(prefix, [store.MaxCountKeys]string{key}, []store.Budget{c}, n)
	return t.Key(), err
}

// inlineCounter is an inlineMap with a Count of its own.
type inlineCounter struct{ inlineMap }

func (b inlineCounter) Count(ctx context.Context, prefix string, keys []string, caps []store.Budget, n int64, t *store.Tally) error {
	return counterBackend{b.mapBackend}.Count(ctx, prefix, keys, caps, n, t)
}

// CountInline is the store's own Count.
func (b inlineCounter) CountInline(prefix string, keys [store.MaxCountKeys]string, caps []store.Budget, n int64) (t store.Tally, err error) {
	err = b.Count(context.Background(), prefix, keys[:len(caps)], caps, n, &t)
	return t, err
}

// CountOne is the store's own Count on one key.
func (b inlineCounter) CountOne(prefix, key string, c store.Budget, n int64) (store.KeyTally, error) {
	var t store.Tally
	err := counterBackend{b.mapBackend}.count(context.Background(), prefix, []string{key}, []store.Budget{c}, n, &t, true)
	return t.Key(), err
}

// The test stores on the guard's path for stores in process memory.
var (
	_ store.Inline  = inlineMap{}
	_ store.Inline  = inlineCounter{}
	_ store.Counter = inlineCounter{}
	_ store.Counter = counterBackend{}
)

// counterBackend is a mapBackend with a Count of its own.
type counterBackend struct{ *mapBackend }

func (b counterBackend) Count(ctx context.Context, prefix string, keys []string, caps []store.Budget, n int64, t *store.Tally) error {
	return b.count(ctx, prefix, keys, caps, n, t, false)
}

// count is Count; one says it is the one-key path of an inline store
// (CountOne).
func (b counterBackend) count(ctx context.Context, prefix string, keys []string, caps []store.Budget, n int64, t *store.Tally, one bool) error {
	if b.lock == keyLocks {
		unlock, err := b.lockKeys(ctx, prefix, keys)
		if err != nil {
			return err
		}
		defer unlock()
	}
	w := b.w
	b.trip()
	w.mu.Lock()
	defer func() { w.mu.Unlock() }()
	now := time.UnixMilli(b.now().UnixMilli())
	judge := b.judge(now)
	if one && b.flaw == countOneEndsEarly {
		judge = judge.Add(earlyBy)
	}
	*t = store.Tally{Now: now, Limiting: -1}
	for i, k := range keys {
		if r := w.m[b.name(prefix, k)]; b.live(r, judge) {
			v, err := store.ParseCount(r.v)
			if err != nil {
				return err
			}
			t.Counts[i], t.ExpiresAt[i] = v, r.exp
		}
		if t.Limiting < 0 && t.Counts[i] > int64(caps[i].Limit)-n {
			t.Limiting = i
		}
	}
	if t.Limiting >= 0 && b.flaw != countNotAtomic {
		return nil
	}
	if b.flaw == countRacy {
		w.mu.Unlock()
		runtime.Gosched() // inline or not, another call may take its turn here
		w.mu.Lock()
	}
	es := make([]store.Entry, len(keys))
	skip := make([]bool, len(keys))
	var counts [store.MaxCountKeys]int64
	var ends [store.MaxCountKeys]time.Time
	for i := range keys {
		if t.Counts[i] > int64(caps[i].Limit)-n {
			skip[i] = true // only with countNotAtomic
			continue
		}
		counts[i] = t.Counts[i] + n
		ends[i] = t.ExpiresAt[i]
		if ends[i].IsZero() || b.flaw == restartsWindow {
			ends[i] = now.Add(caps[i].Window).Truncate(time.Millisecond)
		}
		es[i] = store.Entry{Value: value.AppendCount(nil, counts[i]), ExpiresAt: ends[i]}
	}
	if err := b.write(prefix, keys, es, judge, skip, b.flaw == countIgnoresBound, b.flaw == countKeepsExpiry); err != nil {
		return err
	}
	t.Allowed = t.Limiting < 0
	for i := range keys {
		if !skip[i] {
			t.Counts[i], t.ExpiresAt[i] = counts[i], ends[i]
		}
	}
	return nil
}

// env holds what one case's stores need undone once it is over: first the
// worlds are freed (which ends calls stuck on a key lock and goroutines a
// store leaked), then the stores are closed.
type env struct {
	mu     sync.Mutex
	worlds []*world
	stores []*store.Store
}

func (e *env) world(max int) *world {
	w := newWorld(max)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.worlds = append(e.worlds, w)
	return w
}

func (e *env) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, w := range e.worlds {
		close(w.freed)
	}
	for _, s := range e.stores {
		s.Close()
	}
}

// variant is a test backend and how to open a Pair on it.
type variant struct {
	name    string
	flaw    flaw
	lock    locking
	shared  bool
	inline  bool
	counter bool
	prompt  bool
	// algorithms: a Count of its own for every algorithm
	// (algorithmCounter); with shared only.
	algorithms bool
	// clockSecond is how far Second's clock is off, for a shared store.
	clockSecond time.Duration
	// want are the cases that must find the flaw; also those that may,
	// since they check the same clause. No other case may.
	want, also []string
}

func (v variant) open(e *env, w *world, clock time.Duration) *store.Store {
	return v.openOn(e, w, new(pool), clock)
}

// openOn opens a store of v on w, sharing pl with the others on it.
func (v variant) openOn(e *env, w *world, pl *pool, clock time.Duration) *store.Store {
	b := &mapBackend{w: w, flaw: v.flaw, lock: v.lock, shared: v.shared, inline: v.inline, prompt: v.prompt, pool: pl, clock: clock,
		stop: make(chan struct{}), done: make(chan struct{})}
	go b.background()
	var be store.Backend = b
	switch {
	case v.algorithms:
		be = algorithmCounter{b}
	case v.counter && v.inline:
		be = inlineCounter{inlineMap{b}}
	case v.counter:
		be = counterBackend{b}
	case v.inline:
		be = inlineMap{b}
	}
	// TestBrokenStores runs many cases at once, on a machine perhaps slowed
	// by the race detector: a deadline of the guard's default could answer
	// a sound store's call under contention unavailable.
	opts := store.Options{Logger: slog.New(slog.DiscardHandler), Breaker: store.BreakerOptions{Failures: -1}, Deadline: time.Minute}
	s := store.New(be, opts)
	e.mu.Lock()
	e.stores = append(e.stores, s)
	e.mu.Unlock()
	return s
}

func (v variant) pair(e *env) storetest.Pair {
	w := e.world(0)
	pl := new(pool)
	first := v.openOn(e, w, pl, 0)
	p := storetest.Pair{SameBacking: func() (*store.Store, error) { return v.openOn(e, w, pl, 0), nil }}
	p.First, _ = first.Handle("app:")
	p.Other, _ = first.Handle("other:")
	p.Second = p.First
	if v.shared {
		p.Second, _ = v.open(e, w, v.clockSecond).Handle("app:")
	}
	p.NewBounded = func(max int) (*store.Handle, error) {
		return v.open(e, e.world(max), 0).Handle("bounded:")
	}
	return p
}

// Every store of each kind: shared or inline, with a Count of its own or
// not, with one lock, a lock per key or optimistic updates.
var variants = []variant{
	{name: "sound-shared", flaw: sound, shared: true, lock: oneLock},
	{name: "sound-shared-counter", flaw: sound, shared: true, counter: true},
	{name: "sound-inline", flaw: sound, inline: true},
	{name: "sound-inline-counter", flaw: sound, inline: true, counter: true},
	{name: "sound-key-locks", flaw: sound, inline: true, lock: keyLocks},
	{name: "sound-optimistic", flaw: sound, shared: true, lock: optimistic},

	{name: "loses-updates", flaw: losesUpdates, shared: true,
		want: []string{"no-lost-update"}, also: []string{"apply-retried-once", "lock-order", "count-exact-budget"}},
	{name: "ignores-expiry", flaw: ignoresExpiry, inline: true, want: []string{"expired-not-seen"},
		also: []string{"expiry-not-late", "rewrite-after-expiry", "count-window"}},
	{name: "evicts-when-full", flaw: evictsWhenFull, inline: true, want: []string{"bound"}, also: []string{"bound-count", "bound-handles"}},
	{name: "half-multi-key", flaw: halfMultiKey, shared: true, want: []string{"multi-key-atomic"}, also: []string{"read-snapshot", "lock-order"}},
	{name: "judges-expiry-ahead", flaw: judgesAhead, inline: true, want: []string{"expiry-not-early"},
		also: []string{"count-matches-generic", "count-values", "count-window", "count-exact-budget", "count-all-or-nothing"}}, // its counters expire at once
	{name: "judges-expiry-behind", flaw: judgesBehind, inline: true, want: []string{"expired-not-seen"},
		also: []string{"count-matches-generic", "expiry-not-late", "rewrite-after-expiry", "count-window", "sweep", "sweep-exact", "bound"}}, // nothing expires for minutes
	{name: "second-clock-ahead", flaw: sound, shared: true, clockSecond: skew, want: []string{"expiry-not-early"},
		also: []string{"count-matches-generic", "expiry-not-late", "count-values", "count-exact-budget", "count-all-or-nothing"}}, // Second sees First's counters expired
	{name: "second-clock-behind", flaw: sound, shared: true, clockSecond: -skew, want: []string{"expiry-not-late"},
		also: []string{"count-matches-generic", "expiry-not-early", "rewrite-after-expiry", "count-values", "count-window", "count-exact-budget"}}, // each waits for Second's clock
	{name: "sweeps-live", flaw: sweepsLive, inline: true, want: []string{"sweep"},
		also: []string{"sweep-exact", "bound", "bound-count", "bound-handles"}}, // a full store sweeps to make room
	{name: "writes-on-apply-error", flaw: writesOnApplyError, shared: true, want: []string{"apply-error", "value-limits"}, also: []string{"values-owned"}},
	{name: "retries-with-stale-entries", flaw: retriesStale, shared: true, lock: optimistic,
		want: []string{"apply-retried-once"}, also: []string{"no-lost-update", "lock-order", "count-exact-budget"}},
	{name: "count-not-atomic", flaw: countNotAtomic, shared: true, counter: true, want: []string{"count-all-or-nothing"}, also: []string{"count-matches-generic"}},

	{name: "reencodes-json", flaw: reencodesJSON, inline: true, want: []string{"round-trip"}},
	{name: "reencodes-json-shared", flaw: reencodesJSON, shared: true, want: []string{"round-trip"}},
	{name: "caches-reads", flaw: cachesReads, shared: true, want: []string{"visibility"}},
	{name: "caches-reads-inline", flaw: cachesReadsBlind, inline: true, want: []string{"visibility"},
		also: []string{"count-values", "count-matches-generic"}}, // they read back what they counted
	{name: "read-aliases", flaw: readAliases, inline: true, want: []string{"values-owned"}},
	{name: "read-aliases-shared", flaw: readAliases, shared: true, lock: keyLocks, want: []string{"values-owned"}},
	{name: "apply-aliases", flaw: applyAliases, inline: true, want: []string{"values-owned"}, also: []string{"bound", "bound-count"}}, // a refused apply changed the held key
	{name: "expires-early", flaw: expiresEarly, shared: true, want: []string{"expiry-not-early"}},
	{name: "expires-early-inline-counter", flaw: expiresEarly, inline: true, counter: true, want: []string{"expiry-not-early"}},
	{name: "keeps-expiry-on-rewrite", flaw: keepsExpiry, shared: true, want: []string{"rewrite-after-expiry"}},
	{name: "keeps-expiry-on-rewrite-inline", flaw: keepsExpiry, inline: true, want: []string{"rewrite-after-expiry"}},
	{name: "count-keeps-expiry-on-rewrite", flaw: countKeepsExpiry, inline: true, counter: true, want: []string{"rewrite-after-expiry"}},
	{name: "reads-one-by-one", flaw: readsOneByOne, shared: true, want: []string{"read-snapshot"}},
	{name: "locks-in-call-order", flaw: locksInCallOrder, inline: true, lock: keyLocks, want: []string{"lock-order"}},
	{name: "writes-first-run", flaw: writesFirstRun, shared: true, lock: optimistic,
		want: []string{"apply-retried-once"}, also: []string{"no-lost-update", "lock-order", "count-exact-budget"}},
	{name: "joins-prefix", flaw: joinsPrefix, inline: true, want: []string{"nested-prefixes"}},
	{name: "joins-prefix-shared-counter", flaw: joinsPrefix, shared: true, counter: true, want: []string{"nested-prefixes"}},
	{name: "sweep-over-counts", flaw: sweepOverCounts, inline: true, want: []string{"sweep-exact"}},
	{name: "sweep-no-commit", flaw: sweepNoCommit, shared: true, want: []string{"sweep-exact"}},
	{name: "sweep-over-counts-shared", flaw: sweepOverCounts, shared: true, lock: optimistic, want: []string{"sweep-exact"}},
	{name: "leaks-on-rewrite", flaw: leaksOnRewrite, shared: true, want: []string{"bound-rewrite"}},
	{name: "leaks-on-rewrite-inline-counter", flaw: leaksOnRewrite, inline: true, counter: true, want: []string{"bound-rewrite"}},
	{name: "count-ignores-bound", flaw: countIgnoresBound, inline: true, counter: true, want: []string{"bound-count"}, also: []string{"bound-handles"}},
	{name: "bound-per-prefix", flaw: boundPerPrefix, inline: true, want: []string{"bound-handles"}},
	{name: "bound-per-prefix-shared-counter", flaw: boundPerPrefix, shared: true, counter: true, want: []string{"bound-handles"}},
	{name: "leaks-goroutine", flaw: leaksGoroutine, shared: true, want: []string{"close"}},
	{name: "leaks-goroutine-inline", flaw: leaksGoroutine, inline: true, want: []string{"close"}},
	{name: "count-racy", flaw: countRacy, shared: true, counter: true, want: []string{"count-exact-budget"}},
	{name: "restarts-window", flaw: restartsWindow, inline: true, counter: true, want: []string{"count-values"},
		also: []string{"count-matches-generic", "count-exact-budget", "rewrite-after-expiry"}}, // each checks where a window ends
}

// brokenParallel is how many cases TestBrokenStores runs at once, over
// all variants: most of a case's time is spent waiting for entries to
// expire.
const brokenParallel = 32

// outcome is what one case found on one variant.
type outcome struct {
	name string
	err  error
}

// TestBrokenStores runs every case against each test backend: a sound one
// passes them all, and each broken one is caught, with a
// *ContractViolation, by the cases that test what it breaks, and by no
// other case.
func TestBrokenStores(t *testing.T) {
	outcomes := make([][]outcome, len(variants))
	sem := make(chan struct{}, brokenParallel)
	var wg sync.WaitGroup
	for vi, v := range variants {
		outcomes[vi] = make([]outcome, len(storetest.Cases))
		for ci, c := range storetest.Cases {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				e := new(env)
				defer e.close()
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				outcomes[vi][ci] = outcome{c.Name, c.Run(ctx, v.pair(e))}
			})
		}
	}
	wg.Wait()
	for vi, v := range variants {
		t.Run(v.name, func(t *testing.T) { v.check(t, outcomes[vi]) })
	}
}

// check asserts what the cases found on v.
func (v variant) check(t *testing.T, outcomes []outcome) {
	violated := map[string]string{}
	for _, o := range outcomes {
		var cv *storetest.ContractViolation
		switch {
		case o.err == nil:
		case errors.Is(o.err, storetest.ErrNotApplicable):
			if v.inline && o.name == "prompt-deadline" {
				continue // an inline store's calls have no deadline
			}
			t.Errorf("%s: not applicable to a Pair with NewBounded set: %v", o.name, o.err)
		case errors.As(o.err, &cv):
			if cv.Case != o.name {
				t.Errorf("%s: violation names case %q", o.name, cv.Case)
			}
			violated[o.name] = cv.What
		default:
			t.Errorf("%s: failed with %T, not a *ContractViolation: %v", o.name, o.err, o.err)
		}
	}
	if len(v.want) == 0 {
		for name, what := range violated {
			t.Errorf("a sound store violated %s: %s", name, what)
		}
		return
	}
	for _, name := range v.want {
		what, ok := violated[name]
		if !ok {
			t.Errorf("the broken store passed %q; violations found: %v", name, slices.Sorted(maps.Keys(violated)))
			continue
		}
		t.Logf("%s: %s", name, what)
	}
	for _, name := range slices.Sorted(maps.Keys(violated)) {
		if !slices.Contains(v.want, name) && !slices.Contains(v.also, name) && !slices.Contains(alsoFinds[v.name], name) {
			t.Errorf("%s, which checks another clause, also reported the flaw: %s", name, violated[name])
		}
	}
}

// TestRunSkips checks that Run skips the cases that need Pair.NewBounded
// when it is not set, and the exact count of Sweep when Pair.SharedSweep
// is; the store is inline, so prompt-deadline is skipped too.
func TestRunSkips(t *testing.T) {
	v := variant{name: "unshared", inline: true}
	for _, tc := range []struct {
		name string
		edit func(*storetest.Pair)
		want []string
	}{
		{"unbounded", func(p *storetest.Pair) { p.NewBounded = nil },
			[]string{"sweep-exact", "bound", "bound-count", "bound-handles", "bound-rewrite", "close", "prompt-deadline", "sizer"}},
		{"shared-sweep", func(p *storetest.Pair) { p.SharedSweep = true }, []string{"sweep-exact", "prompt-deadline"}},
	} {
		var skipped []string
		t.Run(tc.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) storetest.Pair {
				e := new(env)
				t.Cleanup(e.close)
				p := v.pair(e)
				tc.edit(&p)
				t.Cleanup(func() {
					if t.Skipped() {
						skipped = append(skipped, t.Name()[strings.LastIndex(t.Name(), "/")+1:])
					}
				})
				return p
			})
		})
		if !slices.Equal(skipped, tc.want) {
			t.Errorf("%s: skipped %v, want %v", tc.name, skipped, tc.want)
		}
	}
}

// The flaws of the cases of live rewrites, the expiry boundary, the routes
// of a Count and the capabilities, apart from those above.
const (
	keepsLiveExpiry   flaw = 100 + iota // a write over a live row keeps the row's expiry
	liveAtExpiry                        // an entry is live until its ExpiresAt's millisecond has passed (>= for >)
	countOneEndsEarly                   // its CountOne judges a window ended earlyBy before it has
	ignoresDeadline                     // claims store.Prompt, but waits on a key's lock past its context's end
	sizerDefaultMax                     // MaxEntries tells the default bound, not the one it was opened with
	sizerOnlyGrows                      // Entries tells the rows ever added
	secretsElsewhere                    // Secrets looks under another name than the one it writes under
	backingIsBackend                    // Backing names the Backend value, not the pool it shares
)

// pool stands for what backends of one app share, such as a connection
// pool: one world may be reached through several.
type pool struct{ _ byte }

// Backing implements store.Backing.
func (b *mapBackend) Backing() any {
	if b.flaw == backingIsBackend {
		return b
	}
	return b.pool
}

// testFingerprint is the fingerprint of the test backends' secret.
const testFingerprint = "test-secret"

// Fingerprint implements store.Secrets.
func (b *mapBackend) Fingerprint() string { return testFingerprint }

// Secrets implements store.Secrets: every row of the world is under the
// backend's secret.
func (b *mapBackend) Secrets(context.Context) (own bool, other string, err error) {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	judge := b.judge(b.now())
	for _, r := range b.w.m {
		if b.live(r, judge) {
			if b.flaw == secretsElsewhere {
				return false, testFingerprint, nil
			}
			return true, "", nil
		}
	}
	return false, "", nil
}

// Prompt implements store.Prompt: true for a variant that claims it.
func (b *mapBackend) Prompt() bool { return b.prompt }

// Entries implements store.Sizer: the rows held, expired ones not yet
// removed included.
func (b *mapBackend) Entries() int {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	if b.flaw == sizerOnlyGrows {
		return b.w.added
	}
	return b.w.rows
}

// MaxEntries implements store.Sizer.
func (b *mapBackend) MaxEntries() int {
	if b.flaw == sizerDefaultMax {
		return storekit.DefaultMaxEntriesMemory
	}
	return b.w.max
}

var (
	_ store.Prompt  = (*mapBackend)(nil)
	_ store.Sizer   = (*mapBackend)(nil)
	_ store.Secrets = (*mapBackend)(nil)
	_ store.Backing = (*mapBackend)(nil)
)

// capabilityVariants are the test backends of the cases of live rewrites,
// the expiry boundary, the routes of a Count and the capabilities: a sound
// store that claims store.Prompt, and one flaw each.
var capabilityVariants = []variant{
	{name: "sound-prompt", flaw: sound, shared: true, lock: keyLocks, prompt: true},
	{name: "sound-prompt-counter", flaw: sound, shared: true, lock: keyLocks, prompt: true, counter: true},

	{name: "keeps-live-expiry", flaw: keepsLiveExpiry, shared: true, want: []string{"rewrite-live-expiry"}},
	{name: "keeps-live-expiry-inline", flaw: keepsLiveExpiry, inline: true, want: []string{"rewrite-live-expiry"}},
	{name: "live-at-expiry", flaw: liveAtExpiry, inline: true, want: []string{"expiry-at-boundary"},
		also: []string{"expired-not-seen", "expiry-not-late", "count-routes", "rewrite-live-expiry", "count-window", "rewrite-after-expiry"}},
	{name: "live-at-expiry-shared", flaw: liveAtExpiry, shared: true, want: []string{"expiry-at-boundary"},
		also: []string{"expired-not-seen", "expiry-not-late", "count-routes", "rewrite-live-expiry", "count-window", "rewrite-after-expiry"}},
	{name: "count-racy-inline", flaw: countRacy, inline: true, counter: true, want: []string{"count-contention"},
		also: []string{"count-exact-budget"}},
	{name: "count-one-ends-early", flaw: countOneEndsEarly, inline: true, counter: true, want: []string{"count-routes"}},
	{name: "ignores-deadline", flaw: ignoresDeadline, shared: true, lock: keyLocks, prompt: true, want: []string{"prompt-deadline"}},
	{name: "sizer-default-max", flaw: sizerDefaultMax, inline: true, want: []string{"sizer"}},
	{name: "sizer-only-grows", flaw: sizerOnlyGrows, shared: true, counter: true, want: []string{"sizer"}},
	{name: "secrets-elsewhere", flaw: secretsElsewhere, shared: true, want: []string{"secrets"}},
	{name: "backing-is-backend", flaw: backingIsBackend, inline: true, want: []string{"backing"}},
}

func init() { variants = append(variants, capabilityVariants...) }

// alsoFinds are, for variants above with flaws of other cases, the cases of
// live rewrites, the expiry boundary, the routes of a Count and the
// capabilities that check the same clause from another side, and so may
// find the flaw too.
var alsoFinds = map[string][]string{
	// Atomicity: Counts and Updates racing on one key lose counts.
	"loses-updates":              {"count-contention"},
	"retries-with-stale-entries": {"count-contention"},
	"writes-first-run":           {"count-contention"},
	"count-racy":                 {"count-contention"},
	// Expiry judged on the wrong clock, or not at all: entries and
	// counters live past their ends, or end before them.
	"ignores-expiry":               {"count-routes", "expiry-at-boundary", "rewrite-live-expiry"},
	"judges-expiry-ahead":          {"count-routes", "rewrite-live-expiry"},
	"judges-expiry-behind":         {"count-routes", "expiry-at-boundary", "rewrite-live-expiry", "sizer"}, // nothing expires, so Sweep removes nothing
	"second-clock-ahead":           {"count-routes", "rewrite-live-expiry"},
	"second-clock-behind":          {"count-routes", "expiry-at-boundary", "rewrite-live-expiry"},
	"expires-early":                {"count-routes"},
	"expires-early-inline-counter": {"count-routes"},
	"caches-reads-inline":          {"expiry-at-boundary", "rewrite-live-expiry"}, // it reads what it cached
	// A Count that differs from the generic rule.
	"count-not-atomic":               {"count-routes"},
	"restarts-window":                {"count-routes"},
	"keeps-expiry-on-rewrite":        {"count-routes"}, // a counter's second window is born ended
	"keeps-expiry-on-rewrite-inline": {"count-routes"},
	"count-keeps-expiry-on-rewrite":  {"count-routes"},
	// Sweep removes the wrong rows: what Entries tells follows.
	"sweeps-live":     {"sizer"},
	"sweep-no-commit": {"sizer"},
}

// The algorithm cases' test backends: a shared store whose own Count
// follows every algorithm (store.AlgorithmCounter), sound or with one of
// these flaws.
const (
	algorithmsSound     flaw = 200 + iota
	algorithmsRacy           // its Count of a budget not fixed reads, lets go of its lock, relocks, writes
	algorithmsTellsEnd       // its Tally tells when the key's entry ends, not when one more unit is admitted
	algorithmsEndAtNext      // its entry of a key not fixed ends when the next unit drops: every unit with it
	algorithmsBurstRate      // its token bucket refills Burst units per Window, not Limit
)

// algorithmCounter is a mapBackend with a Count of its own for every
// algorithm: store.ApplyCount under the world's lock, broken by its flaw.
type algorithmCounter struct{ *mapBackend }

// CountsAlgorithms implements store.AlgorithmCounter.
func (algorithmCounter) CountsAlgorithms() {}

var _ store.AlgorithmCounter = algorithmCounter{}

func (b algorithmCounter) Count(_ context.Context, prefix string, keys []string, caps []store.Budget, n int64, t *store.Tally) error {
	w := b.w
	b.trip()
	w.mu.Lock()
	defer func() { w.mu.Unlock() }()
	now := time.UnixMilli(b.now().UnixMilli())
	es, _ := b.snapshot(prefix, keys, now)
	if b.flaw == algorithmsRacy && !slices.ContainsFunc(caps, func(c store.Budget) bool { return c.Algorithm == store.FixedWindow }) {
		w.mu.Unlock()
		b.trip()
		w.mu.Lock()
	}
	rule := caps
	if b.flaw == algorithmsBurstRate {
		rule = slices.Clone(caps)
		for i, c := range rule {
			if c.Algorithm == store.TokenBucket && c.Burst > 0 {
				rule[i].Limit = c.Burst
			}
		}
	}
	if err := store.ApplyCount(now, es, rule, n, t); err != nil || !t.Allowed {
		return err
	}
	for i, c := range caps {
		if c.Algorithm == store.FixedWindow {
			continue
		}
		switch b.flaw {
		case algorithmsTellsEnd:
			t.ExpiresAt[i] = es[i].ExpiresAt
		case algorithmsEndAtNext:
			es[i].ExpiresAt = t.ExpiresAt[i]
		}
	}
	return b.write(prefix, keys, es, now, make([]bool, len(keys)), false, false)
}

func init() {
	// The algorithm cases count through Update, time windows and race
	// calls: a store broken in one of those may fail them too.
	for i, v := range variants {
		if v.flaw != sound || v.clockSecond != 0 {
			variants[i].also = append(slices.Clip(v.also), "algorithm-exact-budget", "algorithm-matches-generic", "algorithm-window-edge", "algorithm-pacing")
		}
	}
	open := func(v variant) variant { v.shared, v.algorithms = true, true; return v }
	variants = append(variants,
		open(variant{name: "sound-algorithms", flaw: algorithmsSound}),
		open(variant{name: "algorithms-racy", flaw: algorithmsRacy, want: []string{"algorithm-exact-budget"}}),
		open(variant{name: "algorithms-tell-entry-end", flaw: algorithmsTellsEnd, want: []string{"algorithm-matches-generic"},
			also: []string{"algorithm-window-edge"}}),
		open(variant{name: "algorithms-end-at-next", flaw: algorithmsEndAtNext, want: []string{"algorithm-window-edge"},
			also: []string{"algorithm-pacing", "algorithm-matches-generic"}}),
		open(variant{name: "algorithms-burst-rate", flaw: algorithmsBurstRate, want: []string{"algorithm-pacing"},
			also: []string{"algorithm-matches-generic", "algorithm-exact-budget"}}),
	)
}
