package memory

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatecount/gatecount/internal/clock"
	"github.com/gatecount/gatecount/internal/lockorder"
	"github.com/gatecount/gatecount/internal/loop"
	"github.com/gatecount/gatecount/internal/option"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/storekit"
	"github.com/gatecount/gatecount/store/value"
)

// Defaults of Options.
const (
	DefaultSweepInterval = time.Minute
	DefaultShards        = 64
)

// Options configure a memory store. The zero value gives the defaults.
type Options struct {
	// Store configures the guard.
	Store store.Options
	// MaxEntries bounds the live entries; 0 means
	// 100,000.
	MaxEntries int
	// SweepInterval is how often expired entries are removed in the
	// background; 0 means [DefaultSweepInterval].
	SweepInterval time.Duration
	// Shards is the number of shards, rounded up to a power of two; 0 means
	// [DefaultShards].
	Shards int
	// Now is the store's clock. Nil means the process clock, read at
	// millisecond precision from memory. A goroutine of the store's
	// advances that clock every millisecond while the store is busy. It may
	// lag the system clock by a few milliseconds when every core is busy;
	// it never runs ahead. Close stops that goroutine. Tests set Now.
	Now func() time.Time
}

// New returns a memory store behind the guard. Its background sweep runs
// until Close.
func New(o Options) *store.Store {
	s, _ := storekit.Build(&o.Store, func() (*Backend, error) { return NewBackend(o), nil }) // NewBackend never fails
	return s
}

// Backend is the memory store's [store.Backend]. Most code wants New, which
// wraps it in the guard.
type Backend struct {
	shards []shard
	mask   uint64
	seed   maphash.Seed
	now    func() int64  // unix milliseconds
	coarse *clock.Coarse // the clock, when Options.Now is nil
	live   atomic.Int64
	// minExp is at or before the earliest expiry of any entry held (unix
	// milliseconds), so that a full store knows in O(1) whether a sweep
	// could free anything.
	minExp atomic.Int64
	bound  *storekit.Bound

	sweepMu sync.Mutex // one sweep at a time
	sweeper *loop.Loop
}

// item is one entry. A value that is a count ([store.ParseCount]) is kept
// as the number n, with value nil, so that counting formats and parses
// nothing. So is a token bucket's TAT ([value.BucketOf]), with bucket set.
// Any other value is kept as its bytes. Items whose keys hash alike are
// chained through next.
type item struct {
	prefix, key string
	value       []byte // nil when the value is the number n
	n           int64
	exp         int64 // unix milliseconds
	next        *item
	bucket      bool // n is a token bucket's TAT, not a count
}

// appendValue appends the item's value, as JSON, to dst.
func (it *item) appendValue(dst []byte) []byte {
	switch {
	case it.value != nil:
		return append(dst, it.value...)
	case it.bucket:
		return value.AppendBucket(dst, it.n)
	}
	return value.AppendCount(dst, it.n)
}

// setValue keeps v as the item's value: as a number when it is a count or
// a token bucket.
func (it *item) setValue(v []byte) {
	if n, ok := value.CountOf(v); ok {
		it.value, it.n, it.bucket = nil, n, false
		return
	}
	if n, ok := value.BucketOf(v); ok {
		it.value, it.n, it.bucket = nil, n, true
		return
	}
	it.value, it.bucket = append(it.value[:0], v...), false
}

// shard holds the entries whose key hashes pick it, by hash.
type shard struct {
	mu sync.Mutex
	m  map[uint64]*item
	// scratch and bufs serve the update whose lowest shard this is, under
	// mu, so that updates allocate nothing.
	scratch [store.MaxKeys]store.Entry
	bufs    [store.MaxKeys][]byte
	_       [64]byte // keep neighbouring shards' locks off one cache line
}

// find returns the item of prefix and key with hash h, or nil.
func (s *shard) find(h uint64, prefix, key string) *item {
	for it := s.m[h]; it != nil; it = it.next {
		if it.key == key && it.prefix == prefix {
			return it
		}
	}
	return nil
}

// add puts a new item under hash h.
func (s *shard) add(h uint64, it *item) {
	it.next = s.m[h]
	s.m[h] = it
}

// remove takes the item out of the chain of hash h.
func (s *shard) remove(h uint64, it *item) {
	head := s.m[h]
	if head == it {
		if it.next == nil {
			delete(s.m, h)
		} else {
			s.m[h] = it.next
		}
		return
	}
	for p := head; p != nil; p = p.next {
		if p.next == it {
			p.next = it.next
			return
		}
	}
}

// NewBackend returns the memory backend and starts its background sweep.
// o.Store should already have its defaults (see [store.Options.WithDefaults]).
func NewBackend(o Options) *Backend {
	option.Default(&o.MaxEntries, storekit.DefaultMaxEntriesMemory)
	option.Default(&o.SweepInterval, DefaultSweepInterval)
	n := 1
	option.Default(&o.Shards, DefaultShards)
	for n < o.Shards {
		n <<= 1
	}
	log := o.Store.Logger
	if log != nil {
		log = log.With("store", "memory")
	}
	b := &Backend{
		shards: make([]shard, n),
		mask:   uint64(n - 1),
		seed:   maphash.MakeSeed(),
		bound:  storekit.NewBound(o.MaxEntries, log),
	}
	for i := range b.shards {
		b.shards[i].m = make(map[uint64]*item)
	}
	if o.Now == nil {
		b.coarse = clock.NewCoarse()
		b.now = b.coarse.UnixMilli
	} else {
		now := o.Now
		b.now = func() int64 { return now().UnixMilli() }
	}
	b.minExp.Store(math.MaxInt64)
	b.sweeper = loop.Go(context.Background(), func(ctx context.Context) { b.sweepEvery(ctx, o.SweepInterval) })
	return b
}

// sweepEvery removes expired entries every d until ctx ends (Close).
func (b *Backend) sweepEvery(ctx context.Context, d time.Duration) {
	loop.Every(ctx, loop.Task{Every: d, Do: func(context.Context) { b.sweep() }})
}

// Now returns the store's time, to the millisecond: Options.Now's, or the
// process clock's.
func (b *Backend) Now() time.Time { return time.UnixMilli(b.now()) }

// Shared reports false: the entries are this process's alone.
func (b *Backend) Shared() bool { return false }

// hash returns the hash of prefix and key, which picks the key's shard
// (its top bits) and its place in the shard's map.
func (b *Backend) hash(prefix, key string) uint64 {
	return maphash.String(b.seed, key) ^ mixPrefix(prefix)
}

// mixPrefix folds a prefix into 64 bits, cheaply: prefixes are few and
// chosen by the app, never by a client. The seeded hash of the key, which a
// client does choose, keeps the sum unpredictable: for one prefix, keys
// collide only when their seeded hashes do.
func mixPrefix(p string) uint64 {
	h := uint64(len(p)) * 0x9e3779b97f4a7c15
	for len(p) >= 8 {
		h = (h ^ binary.LittleEndian.Uint64([]byte(p[:8]))) * 0xbf58476d1ce4e5b9
		h ^= h >> 31
		p = p[8:]
	}
	var tail uint64 // the last 0 to 7 bytes, packed: one multiply, not one each
	for i := 0; i < len(p); i++ {
		tail |= uint64(p[i]) << (8 * i)
	}
	h = (h ^ tail) * 0x94d049bb133111eb
	return h ^ h>>29
}

// shardOf returns the shard of the key whose hash is h.
func (b *Backend) shardOf(h uint64) int { return int((h >> 32) & b.mask) }

// lockSet is the shards of one call, locked in ascending order.
type lockSet struct {
	hash [store.MaxKeys]uint64 // of each key
	lockorder.Set
}

func (b *Backend) lock(ls *lockSet, prefix string, keys []string) {
	for i, k := range keys {
		h := b.hash(prefix, k)
		ls.hash[i] = h
		ls.Add(b.shardOf(h))
	}
	for _, s := range ls.Ascending() {
		b.shards[s].mu.Lock()
	}
}

func (b *Backend) unlock(ls *lockSet) {
	ord := ls.Ascending()
	for i := len(ord) - 1; i >= 0; i-- {
		b.shards[ord[i]].mu.Unlock()
	}
}

// Update implements [store.Backend].
func (b *Backend) Update(_ context.Context, prefix string, keys []string, apply store.ApplyFunc) error {
	_, err := b.UpdateInline(prefix, keys, apply, nil)
	return err
}

// UpdateInline implements [store.Inline]: Update, with check run after apply
// (when not nil) in the same step.
func (b *Backend) UpdateInline(prefix string, keys []string, apply, check store.ApplyFunc) (ofCaller bool, err error) {
	full, ofCaller, err := b.update(prefix, keys, apply, check, false)
	if !full {
		return ofCaller, err
	}
	// Full: if an entry has expired, remove the expired ones with no shard
	// locked. Either way run the update once more, to be refused (and
	// logged) if there is still no room: a flood of new keys costs no sweep
	// each, only when something has expired.
	b.sweepIfExpired()
	_, ofCaller, err = b.update(prefix, keys, apply, check, true)
	return ofCaller, err
}

// sweepIfExpired sweeps when the earliest expiry has passed, and returns
// how many entries went.
func (b *Backend) sweepIfExpired() int {
	if b.now() < b.minExp.Load() {
		return 0
	}
	b.sweepMu.Lock()
	defer b.sweepMu.Unlock()
	if b.now() < b.minExp.Load() {
		return 0 // another sweep made room meanwhile
	}
	return b.sweepLocked()
}

// lowerMinExp notes an entry that expires at exp.
func (b *Backend) lowerMinExp(exp int64) {
	for {
		cur := b.minExp.Load()
		if exp >= cur || b.minExp.CompareAndSwap(cur, exp) {
			return
		}
	}
}

// liveItem returns the item of prefix and key with hash h in sh, whose lock
// the caller holds. It returns nil when there is none or it expired by
// nowMs; an expired item is removed.
func (b *Backend) liveItem(sh *shard, h uint64, prefix, key string, nowMs int64) *item {
	it := sh.find(h, prefix, key)
	if it != nil && it.exp <= nowMs {
		sh.remove(h, it)
		b.live.Add(-1)
		return nil
	}
	return it
}

// held fills items with the live items of keys, whose shards ls holds
// locked, removing those that expired by nowMs.
func (b *Backend) held(ls *lockSet, prefix string, keys []string, nowMs int64, items []*item) {
	for i, k := range keys {
		items[i] = b.liveItem(&b.shards[b.shardOf(ls.hash[i])], ls.hash[i], prefix, k, nowMs)
	}
}

// reserve makes room for added new keys, all or none. It reports full when
// there is no room; then, once the caller has swept, it also returns the
// bound's error (and logs it).
func (b *Backend) reserve(prefix string, added int, swept bool) (full bool, err error) {
	if added == 0 {
		return false, nil
	}
	n := int(b.live.Add(int64(added)))
	if b.bound.Full(n - 1) {
		b.live.Add(-int64(added))
		if !swept {
			return true, nil
		}
		return true, b.bound.Admit(n-1, prefix)
	}
	_ = b.bound.Admit(n-1, prefix) // not full: only logs when filling
	return false, nil
}

// CountInline implements [store.Inline]: the counting rule
// ([store.Tally.Charge]) applied to the held counts in place. It makes no
// copy of them for an apply, and no check of what it wrote, since it writes
// only counts. Budgets of other algorithms than FixedWindow run
// [store.ApplyCount] through UpdateInline.
func (b *Backend) CountInline(prefix string, keys [store.MaxCountKeys]string, caps []store.Budget, n int64) (t store.Tally, err error) {
	ks := keys[:len(caps)]
	for _, c := range caps {
		if c.Algorithm != store.FixedWindow {
			return t, b.countApplied(prefix, ks, caps, n, &t)
		}
	}
	full, err := b.count(prefix, ks, caps, n, &t, false)
	if !full {
		return t, err
	}
	b.sweepIfExpired() // as Update does when full
	_, err = b.count(prefix, ks, caps, n, &t, true)
	return t, err
}

// CountOne implements [store.Inline]: CountInline for one key, with one
// shard locked and no arrays. A token bucket is counted as a fixed window
// is, on its TAT ([store.KeyTally.ChargeBucket]); a sliding window runs
// [store.ApplyCount] through UpdateInline.
func (b *Backend) CountOne(prefix, key string, c store.Budget, n int64) (k store.KeyTally, err error) {
	if c.Algorithm == store.SlidingWindow {
		var t store.Tally
		err := b.countApplied(prefix, []string{key}, []store.Budget{c}, n, &t)
		return t.Key(), err
	}
	h := b.hash(prefix, key)
	full, err := b.countOne(h, prefix, key, c, n, &k, false)
	if !full {
		return k, err
	}
	b.sweepIfExpired() // as Update does when full
	_, err = b.countOne(h, prefix, key, c, n, &k, true)
	return k, err
}

// countOne is count for one key, whose hash is h, into k.
func (b *Backend) countOne(h uint64, prefix, key string, c store.Budget, n int64, k *store.KeyTally, swept bool) (full bool, err error) {
	sh := &b.shards[b.shardOf(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k.Now = b.now()
	it := b.liveItem(sh, h, prefix, key, k.Now)
	if c.Algorithm == store.TokenBucket {
		return b.chargeBucket(sh, h, it, prefix, key, c, n, k, swept)
	}
	switch {
	case it == nil:
		k.Count, k.ExpiresAt = 0, 0
	case it.value != nil || it.bucket:
		return false, fmt.Errorf("%w: %.40q", store.ErrNotCounter, it.appendValue(nil))
	default:
		k.Count, k.ExpiresAt = it.n, it.exp
	}
	if !k.Charge(c, n) {
		return false, nil // refused: nothing changes
	}
	if it != nil {
		it.n = k.Count
		return false, nil
	}
	if full, err := b.reserve(prefix, 1, swept); full {
		return true, err
	}
	sh.add(h, &item{prefix: prefix, key: key, n: k.Count, exp: k.ExpiresAt})
	b.lowerMinExp(k.ExpiresAt)
	return false, nil
}

// chargeBucket is countOne for a token bucket, it the key's live item or
// nil, under sh's lock.
func (b *Backend) chargeBucket(sh *shard, h uint64, it *item, prefix, key string, c store.Budget, n int64, k *store.KeyTally, swept bool) (full bool, err error) {
	var tat int64
	if it != nil {
		if it.value != nil || !it.bucket {
			return false, fmt.Errorf("%w: %.40q", store.ErrNotCounter, it.appendValue(nil))
		}
		tat = it.n
	}
	tat = k.ChargeBucket(c, n, tat)
	if !k.Allowed {
		return false, nil // refused: nothing changes
	}
	exp := value.BucketExpiry(tat)
	if it != nil {
		it.n, it.exp = tat, exp // later than it was: minExp holds
		return false, nil
	}
	if full, err := b.reserve(prefix, 1, swept); full {
		return true, err
	}
	sh.add(h, &item{prefix: prefix, key: key, n: tat, exp: exp, bucket: true})
	b.lowerMinExp(exp)
	return false, nil
}

// countApplied is a Count of budgets that are not all fixed windows:
// store.ApplyCount run through UpdateInline, which a full store answers as
// it answers Count.
func (b *Backend) countApplied(prefix string, keys []string, caps []store.Budget, n int64, t *store.Tally) error {
	_, err := b.UpdateInline(prefix, keys, func(now time.Time, es []store.Entry) error {
		return store.ApplyCount(now, es, caps, n, t)
	}, nil)
	if err != nil {
		*t = store.Tally{Limiting: -1}
	}
	return err
}

// Count implements [store.Counter], as CountInline.
func (b *Backend) Count(_ context.Context, prefix string, keys []string, caps []store.Budget, n int64, t *store.Tally) error {
	var ks [store.MaxCountKeys]string
	copy(ks[:], keys)
	var err error
	*t, err = b.CountInline(prefix, ks, caps, n)
	return err
}

// CountsAlgorithms implements [store.AlgorithmCounter]: Count follows every
// [store.Algorithm].
func (b *Backend) CountsAlgorithms() {}

func (b *Backend) count(prefix string, keys []string, caps []store.Budget, n int64, t *store.Tally, swept bool) (full bool, err error) {
	var ls lockSet
	b.lock(&ls, prefix, keys)
	defer b.unlock(&ls)

	nowMs := b.now()
	var items [store.MaxCountKeys]*item
	b.held(&ls, prefix, keys, nowMs, items[:])
	// Field by field, and only the keys counted: t may hold the results of
	// a first try that found the store full (CountInline).
	t.Now = time.UnixMilli(nowMs)
	added := 0
	for i, it := range items[:len(keys)] {
		switch {
		case it == nil:
			t.Counts[i], t.ExpiresAt[i] = 0, time.Time{}
			added++
		case it.value != nil || it.bucket:
			return false, fmt.Errorf("%w: %.40q", store.ErrNotCounter, it.appendValue(nil))
		default:
			t.Counts[i], t.ExpiresAt[i] = it.n, time.UnixMilli(it.exp)
		}
	}
	if !t.Charge(caps, n) {
		return false, nil // refused: nothing changes
	}
	if full, err := b.reserve(prefix, added, swept); full {
		return true, err
	}
	for i, it := range items[:len(keys)] {
		if it != nil {
			it.n = t.Counts[i]
			continue
		}
		exp := t.ExpiresAt[i].UnixMilli()
		b.shards[b.shardOf(ls.hash[i])].add(ls.hash[i], &item{prefix: prefix, key: keys[i], n: t.Counts[i], exp: exp})
		b.lowerMinExp(exp)
	}
	return false, nil
}

// update runs one read-modify-write. It reports full, with nothing written,
// when new keys found no room and swept is false, and whether its error is
// apply's or check's.
func (b *Backend) update(prefix string, keys []string, apply, check store.ApplyFunc, swept bool) (full, ofCaller bool, err error) {
	var ls lockSet
	b.lock(&ls, prefix, keys)
	defer b.unlock(&ls)

	nowMs := b.now()
	now := time.UnixMilli(nowMs)
	sc := &b.shards[ls.Ascending()[0]]
	entries := sc.scratch[:len(keys)]
	var items [store.MaxKeys]*item
	b.held(&ls, prefix, keys, nowMs, items[:])
	for i, it := range items[:len(keys)] {
		if it == nil {
			entries[i] = store.Entry{}
			continue
		}
		sc.bufs[i] = it.appendValue(sc.bufs[i][:0])
		// Field by field: a whole Entry built on the stack and copied in
		// costs a stalled store forwarding on every call.
		e := &entries[i]
		e.Value = sc.bufs[i]
		e.ExpiresAt = time.UnixMilli(it.exp)
	}
	defer clear(entries)

	if err := apply(now, entries); err != nil {
		return false, true, err
	}
	if check != nil {
		if err := check(now, entries); err != nil {
			return false, true, err
		}
	}

	added := 0
	for i := range keys {
		if items[i] == nil && entries[i].Value != nil {
			added++
		}
	}
	if full, err := b.reserve(prefix, added, swept); full {
		return true, false, err
	}
	for i, k := range keys {
		e := &entries[i]
		it := items[i]
		switch {
		case e.Value == nil && it != nil:
			b.shards[b.shardOf(ls.hash[i])].remove(ls.hash[i], it)
			b.live.Add(-1)
		case e.Value == nil:
		case it == nil:
			it = &item{prefix: prefix, key: k, exp: e.ExpiresAt.UnixMilli()}
			it.setValue(e.Value)
			b.shards[b.shardOf(ls.hash[i])].add(ls.hash[i], it)
			b.lowerMinExp(it.exp)
		default:
			it.setValue(e.Value)
			it.exp = e.ExpiresAt.UnixMilli()
			b.lowerMinExp(it.exp)
		}
	}
	return false, false, nil
}

// Holds reports whether a live entry of prefix is held under any of keys,
// without copying it: a look that neither allocates nor writes.
func (b *Backend) Holds(prefix string, keys []string) bool {
	nowMs := b.now()
	for _, k := range keys {
		h := b.hash(prefix, k)
		sh := &b.shards[b.shardOf(h)]
		sh.mu.Lock()
		it := sh.find(h, prefix, k)
		live := it != nil && it.exp > nowMs
		sh.mu.Unlock()
		if live {
			return true
		}
	}
	return false
}

// Read implements [store.Backend].
func (b *Backend) Read(_ context.Context, prefix string, keys []string) ([]store.Entry, error) {
	var ls lockSet
	b.lock(&ls, prefix, keys)
	defer b.unlock(&ls)
	nowMs := b.now()
	out := make([]store.Entry, len(keys))
	for i, k := range keys {
		it := b.shards[b.shardOf(ls.hash[i])].find(ls.hash[i], prefix, k)
		if it == nil || it.exp <= nowMs {
			continue
		}
		out[i] = store.Entry{Value: it.appendValue(nil), ExpiresAt: time.UnixMilli(it.exp)}
	}
	return out, nil
}

// Sweep implements [store.Backend].
func (b *Backend) Sweep(context.Context) (int, error) { return b.sweep(), nil }

func (b *Backend) sweep() int {
	b.sweepMu.Lock()
	defer b.sweepMu.Unlock()
	return b.sweepLocked()
}

func (b *Backend) sweepLocked() int {
	// Writes during the sweep lower minExp themselves; the sweep lowers it
	// to the earliest expiry it leaves behind.
	b.minExp.Store(math.MaxInt64)
	left := int64(math.MaxInt64)
	n := 0
	for i := range b.shards {
		s := &b.shards[i]
		s.mu.Lock()
		nowMs := b.now()
		for h, head := range s.m {
			for it := head; it != nil; it = it.next {
				if it.exp <= nowMs {
					s.remove(h, it)
					n++
				} else {
					left = min(left, it.exp)
				}
			}
		}
		s.mu.Unlock()
	}
	b.lowerMinExp(left)
	b.live.Add(-int64(n))
	return n
}

// Close stops the background sweep and waits for it. It is idempotent.
func (b *Backend) Close() error {
	b.sweeper.Stop()
	if b.coarse != nil {
		b.coarse.Close()
	}
	return nil
}

// Entries returns the entries held, expired ones not yet removed included.
func (b *Backend) Entries() int { return int(b.live.Load()) }

// MaxEntries returns the bound on live entries.
func (b *Backend) MaxEntries() int { return b.bound.Max() }
