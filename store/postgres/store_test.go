package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/keyhash"
	"github.com/gatecount/gatecount/store/value"
)

// hideCounter hides the Counter capability of a backend, so that Count runs
// the generic algorithm through Update.
type hideCounter struct{ b *Backend }

func (h hideCounter) Shared() bool { return h.b.Shared() }
func (h hideCounter) Backing() any { return h.b.Backing() }
func (h hideCounter) Update(ctx context.Context, p string, k []string, a store.ApplyFunc) error {
	return h.b.Update(ctx, p, k, a)
}
func (h hideCounter) Read(ctx context.Context, p string, k []string) ([]store.Entry, error) {
	return h.b.Read(ctx, p, k)
}
func (h hideCounter) Sweep(ctx context.Context) (int, error) { return h.b.Sweep(ctx) }
func (h hideCounter) Close() error                           { return h.b.Close() }

// newGenericStore opens a store whose Count goes through Update.
func newGenericStore(t testing.TB, pool *pgxpool.Pool, o Options) *store.Store {
	t.Helper()
	if o.Secret == nil {
		o.Secret = testSecret
	}
	o.Store = o.Store.WithDefaults()
	b, err := NewBackend(context.Background(), pool, o)
	if err != nil {
		t.Fatal(err)
	}
	s := store.New(hideCounter{b}, o.Store)
	t.Cleanup(func() { s.Close() })
	return s
}

// TestExactBudget: 100 goroutines on each of two pools make 200 attempts
// at once on a fresh key with a budget of 30; exactly 30 are admitted,
// through the native Count and through the generic one, for one key and
// for two.
func TestExactBudget(t *testing.T) { exactBudget(t, newPool(t), newPool(t), 20, nil) }

// exactBudget runs TestExactBudget's rounds over two pools, calling
// between (unless nil) before every round but the first.
func exactBudget(t *testing.T, poolA, poolB *pgxpool.Pool, rounds int, between func(t *testing.T)) {
	const (
		perPool = 100
		budget  = 30
	)
	kinds := []struct {
		name string
		open func(testing.TB, *pgxpool.Pool, Options) *store.Store
	}{
		{"native", newStore},
		{"generic", newGenericStore},
	}
	for _, kind := range kinds {
		for _, nkeys := range []int{1, 2} {
			t.Run(kind.name+"/"+strings.Repeat("k", nkeys), func(t *testing.T) {
				prefix := randomPrefix("exact")
				// Every attempt is let in, so that each is decided, and
				// answered on a machine under load (200 attempts on one
				// key take turns on its row).
				o := Options{Store: store.Options{MaxInFlight: 2 * perPool, Deadline: 10 * time.Second}}
				a, err := kind.open(t, poolA, o).Handle(prefix)
				if err != nil {
					t.Fatal(err)
				}
				b, err := kind.open(t, poolB, o).Handle(prefix)
				if err != nil {
					t.Fatal(err)
				}
				caps := make([]store.Budget, nkeys)
				for i := range caps {
					caps[i] = store.Budget{Limit: budget, Window: time.Minute}
				}
				for round := range rounds {
					if round > 0 && between != nil {
						between(t)
					}
					keys := []string{"shared-" + randomPrefix("a"), "shared-" + randomPrefix("b")}[:nkeys]
					var admitted, failed atomic.Int64
					var firstErr error
					var errOnce sync.Once
					var wg sync.WaitGroup
					for i := range 2 * perPool {
						h := a
						if i%2 == 1 {
							h = b
						}
						wg.Go(func() {
							tl, err := h.Count(context.Background(), keys, caps, 1)
							if err != nil {
								failed.Add(1)
								errOnce.Do(func() { firstErr = err })
								return
							}
							if tl.Allowed {
								admitted.Add(1)
							}
						})
					}
					wg.Wait()
					if firstErr != nil {
						t.Fatalf("round %d: %d attempts failed, first: %v", round, failed.Load(), firstErr)
					}
					if got := admitted.Load(); got != budget {
						t.Fatalf("round %d: %d of %d attempts admitted, want exactly %d", round, got, 2*perPool, budget)
					}
				}
			})
		}
	}
}

// TestUpdateExact: concurrent increments through Update on two pools lose
// nothing, a key's first increment included.
// incr is an apply that adds one to the counter of every key, starting a
// minute's window for a key that has none.
func incr(now time.Time, es []store.Entry) error {
	for i := range es {
		var n int64
		if es[i].Live() {
			var err error
			if n, err = store.ParseCount(es[i].Value); err != nil {
				return err
			}
		} else {
			es[i].ExpiresAt = now.Add(time.Minute)
		}
		es[i].Value = value.AppendCount(es[i].Value[:0], n+1)
	}
	return nil
}

func TestUpdateExact(t *testing.T) {
	poolA, poolB := newPool(t), newPool(t)
	prefix := randomPrefix("incr")
	o := Options{Store: store.Options{MaxInFlight: 128}}
	a, _ := newStore(t, poolA, o).Handle(prefix)
	b, _ := newStore(t, poolB, o).Handle(prefix)
	for round := range 5 {
		keys := []string{"x-" + randomPrefix("k"), "y-" + randomPrefix("k")}
		const workers = 100
		var wg sync.WaitGroup
		var failures atomic.Int64
		for i := range workers {
			h := a
			if i%2 == 1 {
				h = b
			}
			wg.Go(func() {
				if err := h.Update(context.Background(), keys, incr); err != nil {
					failures.Add(1)
				}
			})
		}
		wg.Wait()
		if n := failures.Load(); n != 0 {
			t.Fatalf("round %d: %d updates failed", round, n)
		}
		es, err := a.Read(context.Background(), keys)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range es {
			if n, err := store.ParseCount(e.Value); err != nil || n != workers {
				t.Fatalf("round %d: key %d counted %s (%v), want %d", round, i, e.Value, err, workers)
			}
		}
	}
}

// dbNow returns the database server's clock.
func dbNow(t testing.TB, pool *pgxpool.Pool) time.Time {
	t.Helper()
	var now time.Time
	if err := pool.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// TestSkewedProcessClocks: two instances whose process clocks are twenty
// minutes apart make the same decisions, and both report the database's
// time: the store judges expiry on the server's clock alone.
func TestSkewedProcessClocks(t *testing.T) {
	pool := newPool(t)
	ahead := func() time.Time { return time.Now().Add(10 * time.Minute) }
	behind := func() time.Time { return time.Now().Add(-10 * time.Minute) }
	prefix := randomPrefix("skew")
	for _, kind := range []string{"native", "generic"} {
		t.Run(kind, func(t *testing.T) {
			open := newStore
			if kind == "generic" {
				open = newGenericStore
			}
			a, err := open(t, pool, Options{processNow: ahead}).Handle(prefix + kind)
			if err != nil {
				t.Fatal(err)
			}
			// The second instance needs its own backing for the same prefix.
			b, err := open(t, newPool(t), Options{processNow: behind}).Handle(prefix + kind)
			if err != nil {
				t.Fatal(err)
			}
			const window = 400 * time.Millisecond
			caps := []store.Budget{{Limit: 3, Window: window}}
			key := []string{"k"}
			var exp time.Time
			for i, want := range []bool{true, true, true, false, false, false} {
				h := []*store.Handle{a, b}[i%2]
				before := dbNow(t, pool).Truncate(time.Millisecond)
				tl, err := h.Count(context.Background(), key, caps, 1)
				if err != nil {
					t.Fatal(err)
				}
				after := dbNow(t, pool)
				if tl.Allowed != want {
					t.Fatalf("attempt %d: allowed %v, want %v", i, tl.Allowed, want)
				}
				if tl.Now.Before(before) || tl.Now.After(after) {
					t.Fatalf("attempt %d: store time %v outside the database's %v..%v", i, tl.Now, before, after)
				}
				if i == 0 {
					exp = tl.ExpiresAt[0]
				} else if !tl.ExpiresAt[0].Equal(exp) {
					t.Fatalf("attempt %d: window ends %v, first said %v", i, tl.ExpiresAt[0], exp)
				}
			}
			// Once the database's clock passes the end of the window, a new
			// window starts on either instance.
			for deadline := time.Now().Add(10 * time.Second); !dbNow(t, pool).After(exp); {
				if time.Now().After(deadline) {
					t.Fatal("the database's clock never passed the window's end")
				}
				time.Sleep(50 * time.Millisecond)
			}
			tl, err := b.Count(context.Background(), key, caps, 1)
			if err != nil || !tl.Allowed || tl.Counts[0] != 1 {
				t.Fatalf("after the window: %+v, %v; want a fresh count of 1", tl, err)
			}
		})
	}
}

// TestPrivacy: no column of any row holds the key in clear.
func TestPrivacy(t *testing.T) {
	pool := newPool(t)
	s := newStore(t, pool, Options{})
	h := newHandle(t, s, "privacy")
	gs := newGenericStore(t, pool, Options{})
	gh := newHandle(t, gs, "privacy-generic")
	const key = "alice@example.com"
	ctx := context.Background()
	caps := []store.Budget{{Limit: 5, Window: time.Minute}}
	for _, hh := range []*store.Handle{h, gh} {
		if _, err := hh.Count(ctx, []string{key}, caps, 1); err != nil {
			t.Fatal(err)
		}
	}
	var rows, found int
	err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE g::text ILIKE '%alice@example.com%' OR encode(g.keyhash, 'escape') ILIKE '%alice@example.com%') FROM gatecount_entries g`).Scan(&rows, &found)
	if err != nil {
		t.Fatal(err)
	}
	if rows == 0 || found != 0 {
		t.Fatalf("%d of %d rows hold the key in clear", found, rows)
	}
	// The row is there, under the key's HMAC.
	hs, _ := keyhash.New(testSecret)
	sum := hs.Sum(h.Prefix(), key)
	var fp, value string
	if err := pool.QueryRow(ctx, "SELECT fingerprint, value FROM gatecount_entries WHERE keyhash = $1", sum[:]).Scan(&fp, &value); err != nil {
		t.Fatal(err)
	}
	if fp != hs.Fingerprint() || value != "1" {
		t.Fatalf("row under the key's hash: fingerprint %s value %s; want %s and 1", fp, value, hs.Fingerprint())
	}
}

// TestSecretRotation: a store under a new secret neither reads the rows of
// the old one nor counts them against its bound, and its sweep leaves them
// until they expire.
func TestSecretRotation(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	prefix := randomPrefix("rotate")
	old, err := newStore(t, pool, Options{Secret: randomSecret()}).Handle(prefix)
	if err != nil {
		t.Fatal(err)
	}
	caps := []store.Budget{{Limit: 5, Window: time.Minute}}
	short := []store.Budget{{Limit: 5, Window: 300 * time.Millisecond}}
	for _, k := range []string{"a", "b", "c"} {
		if _, err := old.Count(ctx, []string{k}, caps, 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := old.Count(ctx, []string{"brief"}, short, 1); err != nil {
		t.Fatal(err)
	}
	old.Store().Close() // the rolling deployment is over

	newer := newStore(t, pool, Options{Secret: randomSecret(), MaxEntries: 2})
	h, err := newer.Handle(prefix)
	if err != nil {
		t.Fatal(err)
	}
	es, err := h.Read(ctx, []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range es {
		if e.Live() {
			t.Fatalf("the new secret reads key %d of the old one: %s", i, e.Value)
		}
	}
	// The old rows do not count: the new store has room for two keys.
	for _, k := range []string{"a", "b"} {
		tl, err := h.Count(ctx, []string{k}, caps, 1)
		if err != nil || tl.Counts[0] != 1 {
			t.Fatalf("Count(%s) under the new secret: %+v, %v; want a fresh count", k, tl, err)
		}
	}
	if _, err := h.Count(ctx, []string{"c"}, caps, 1); !errors.Is(err, store.ErrFull) {
		t.Fatalf("third key under a bound of two: %v, want ErrFull", err)
	}
	// Sweeping leaves the old secret's live rows and removes its expired one.
	time.Sleep(400 * time.Millisecond)
	if _, err := newer.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	var live, expired int
	err = pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE expires_at > now()), count(*) FILTER (WHERE expires_at <= now())
		FROM gatecount_entries WHERE keyhash = ANY($1)`, oldHashes(t, old, []string{"a", "b", "c", "brief"})).Scan(&live, &expired)
	if err != nil {
		t.Fatal(err)
	}
	if live != 3 || expired != 0 {
		t.Fatalf("after a sweep under the new secret: %d live and %d expired rows of the old one, want 3 and 0", live, expired)
	}
}

// oldHashes returns the row keys of keys under h's store.
func oldHashes(t testing.TB, h *store.Handle, keys []string) [][]byte {
	t.Helper()
	b := h.Store().Backend().(*Backend)
	out := make([][]byte, len(keys))
	for i, k := range keys {
		s := b.hasher.Sum(h.Prefix(), k)
		out[i] = s[:]
	}
	return out
}

// TestSweepBatches: a sweep removes every expired row, in several batches,
// and says how many went.
func TestSweepBatches(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	s := newStore(t, pool, Options{Secret: randomSecret(), SweepInterval: time.Hour})
	b := s.Backend().(*Backend)
	<-b.started // the first background sweep is done
	const n = 2*SweepBatch + 17
	fp := "sweeptest" + randomPrefix("")
	_, err := pool.Exec(ctx, `INSERT INTO gatecount_entries (keyhash, fingerprint, value, expires_at)
		SELECT sha256(($1 || i)::bytea), $1, '1', now() - interval '1 minute' FROM generate_series(1, $2) AS i`, fp, n)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var left int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM gatecount_entries WHERE fingerprint = $1", fp).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d expired rows left after Sweep", left)
	}
	// Other tests' stores may sweep some of these rows first.
	if got < 0 {
		t.Fatalf("Sweep = %d", got)
	}
	t.Logf("Sweep removed %d rows", got)
}

// TestDuplicatePrefixOnOnePool: two stores over one pool refuse a second
// handle for a prefix.
func TestDuplicatePrefixOnOnePool(t *testing.T) {
	pool := newPool(t)
	prefix := randomPrefix("dup")
	if _, err := newStore(t, pool, Options{}).Handle(prefix); err != nil {
		t.Fatal(err)
	}
	if _, err := newStore(t, pool, Options{}).Handle(prefix); !errors.Is(err, store.ErrDuplicatePrefix) {
		t.Fatalf("second handle for %s on one pool: %v, want ErrDuplicatePrefix", prefix, err)
	}
}

// TestSecretRequired: New refuses a missing or short secret, saying how to
// make one, and never looks for one in the environment.
func TestSecretRequired(t *testing.T) {
	pool := newPool(t)
	// A secret in the environment is not the store's to read.
	t.Setenv("GATECOUNT_SECRET", string(testSecret))
	for _, tc := range []struct {
		name   string
		secret []byte
		want   error
	}{
		{"none", nil, ErrNoSecret},
		{"empty", []byte{}, ErrNoSecret},
		{"short", []byte("too short"), keyhash.ErrWeakSecret},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(context.Background(), pool, Options{Secret: tc.secret})
			if !errors.Is(err, tc.want) {
				if s != nil {
					s.Close()
				}
				t.Fatalf("New: %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), keyhash.HowToMakeSecret) {
				t.Fatalf("New: %q does not say how to make a secret (%q)", err, keyhash.HowToMakeSecret)
			}
		})
	}
}

// TestMixedPaths: counts through the single-statement path (far from the
// bound), through gatecount_count (near it) and increments through Update,
// all on one key at once, lose nothing and admit exactly the budget.
func TestMixedPaths(t *testing.T) {
	secret := randomSecret()
	prefix := randomPrefix("mixed")
	o := Options{Secret: secret, Store: store.Options{MaxInFlight: 256}}
	fast := newStore(t, newPool(t), o)
	// A bound of 1,000 is always counted exactly: gatecount_count.
	near := newStore(t, newPool(t), Options{Secret: secret, MaxEntries: 1000, Store: o.Store})
	generic := newGenericStore(t, newPool(t), o)
	for fb := fast.Backend().(*Backend); !fb.hold(1); { // wait for the first count
		time.Sleep(10 * time.Millisecond)
	}
	fast.Backend().(*Backend).release(1)
	hs := make([]*store.Handle, 3)
	for i, s := range []*store.Store{fast, near, generic} {
		h, err := s.Handle(prefix)
		if err != nil {
			t.Fatal(err)
		}
		hs[i] = h
	}
	const budget, attempts = 40, 150
	caps := []store.Budget{{Limit: budget, Window: time.Minute}}
	for round := range 5 {
		key := []string{"k" + randomPrefix("r")}
		var admitted, failed atomic.Int64
		var wg sync.WaitGroup
		for i := range attempts {
			h := hs[i%3]
			wg.Go(func() {
				tl, err := h.Count(context.Background(), key, caps, 1)
				switch {
				case err != nil:
					failed.Add(1)
				case tl.Allowed:
					admitted.Add(1)
				}
			})
		}
		wg.Wait()
		if failed.Load() != 0 || admitted.Load() != budget {
			t.Fatalf("round %d: %d admitted, %d failed; want %d admitted", round, admitted.Load(), failed.Load(), budget)
		}
	}
}

// rowCount returns how many rows, of any kind, h's store keeps for keys.
func rowCount(t testing.TB, pool *pgxpool.Pool, h *store.Handle, keys ...string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM gatecount_entries WHERE keyhash = ANY($1)",
		oldHashes(t, h, keys)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestNoPlaceholdersLeft: calls that lock keys without rows and write
// nothing leave no row behind: a read-only Update of several keys, one
// that holds a row and inserts another (the second try, with
// placeholders), and a refused Count of several keys.
func TestNoPlaceholdersLeft(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	h := newHandle(t, newStore(t, pool, Options{}), "placeholders")
	none := func(time.Time, []store.Entry) error { return nil }
	if err := h.Update(ctx, []string{"a", "b"}, none); err != nil {
		t.Fatal(err)
	}
	if n := rowCount(t, pool, h, "a", "b"); n != 0 {
		t.Fatalf("a read-only Update of two new keys left %d rows", n)
	}
	full := []store.Budget{{Limit: 1, Window: time.Minute}}
	if _, err := h.Count(ctx, []string{"held"}, full, 1); err != nil {
		t.Fatal(err)
	}
	// "held" has a row and "new" has none: the optimistic try gives up,
	// the second locks a placeholder for "new"; apply writes "new" only
	// when asked to.
	for _, write := range []bool{false, true} {
		err := h.Update(ctx, []string{"held", "new"}, func(now time.Time, es []store.Entry) error {
			if es[1].Live() {
				return errors.New("new key read as live")
			}
			if write {
				es[1] = store.Entry{Value: []byte("1"), ExpiresAt: now.Add(time.Minute)}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n, want := rowCount(t, pool, h, "new"), btoi(write); n != want {
			t.Fatalf("Update writing the new key %v: %d rows for it, want %d", write, n, want)
		}
	}
	// apply fails on the second try, after placeholders are in: they go.
	errApply := errors.New("apply failed")
	tries := 0
	err := h.Update(ctx, []string{"held", "new2"}, func(now time.Time, es []store.Entry) error {
		if tries++; tries > 1 {
			return errApply
		}
		es[1] = store.Entry{Value: []byte("1"), ExpiresAt: now.Add(time.Minute)}
		return nil
	})
	if !errors.Is(err, errApply) || tries != 2 {
		t.Fatalf("Update whose apply fails on its second try: %v after %d tries, want the apply's error after 2", err, tries)
	}
	if n := rowCount(t, pool, h, "new2"); n != 0 {
		t.Fatalf("an Update whose apply failed left %d rows for its new key", n)
	}
	tl, err := h.Count(ctx, []string{"fresh", "held"}, []store.Budget{full[0], full[0]}, 1)
	if err != nil || tl.Allowed || tl.Limiting != 1 {
		t.Fatalf("Count over a full key: %+v, %v; want refused by key 1", tl, err)
	}
	if n := rowCount(t, pool, h, "fresh"); n != 0 {
		t.Fatalf("a refused Count left %d rows for its new key", n)
	}
}

// TestOddRows: rows no call writes in the ordinary way are read as the
// generic Count reads them, on the one-key path and the multi-key one: a
// placeholder left behind (expired at the epoch) is no counter, and a count
// not written in canonical form is not a count.
func TestOddRows(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	s := newStore(t, pool, Options{})
	h := newHandle(t, s, "odd")
	fp := s.Backend().(*Backend).Fingerprint()
	caps := []store.Budget{{Limit: 5, Window: time.Minute}, {Limit: 5, Window: time.Minute}}
	for _, tc := range []struct {
		name, value, expires string
		want                 int64 // count after a Count of 1; -1 for ErrNotCounter
	}{
		{"placeholder", "", "timestamptz 'epoch'", 1},
		{"expired", "4", "now() - interval '1 second'", 1},
		{"live", "4", "now() + interval '1 minute'", 5},
		{"leading zero", "04", "now() + interval '1 minute'", -1},
		{"negative", "-1", "now() + interval '1 minute'", -1},
	} {
		for _, nkeys := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/%d", tc.name, nkeys), func(t *testing.T) {
				keys := []string{randomPrefix("k"), randomPrefix("other")}[:nkeys]
				_, err := pool.Exec(ctx, `INSERT INTO gatecount_entries (keyhash, fingerprint, value, expires_at)
					VALUES ($1, $2, $3, `+tc.expires+`)`, oldHashes(t, h, keys[:1])[0], fp, tc.value)
				if err != nil {
					t.Fatal(err)
				}
				tl, err := h.Count(ctx, keys, caps[:nkeys], 1)
				switch {
				case tc.want < 0:
					if !errors.Is(err, store.ErrNotCounter) {
						t.Fatalf("Count: %+v, %v; want ErrNotCounter", tl, err)
					}
				case err != nil || !tl.Allowed || tl.Counts[0] != tc.want:
					t.Fatalf("Count: %+v, %v; want allowed with count %d", tl, err, tc.want)
				}
			})
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestUpdateStatementsLost: a connection that lost Update's prepared
// statements (DEALLOCATE ALL) fails at most one Update, and the next
// prepares them again and counts.
func TestUpdateStatementsLost(t *testing.T) {
	check := newPool(t)
	cfg, err := pgxpool.ParseConfig(testURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1 // every call on the connection that lost them
	ctx := context.Background()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	h := newHandle(t, newStore(t, pool, Options{}), "lost")
	if err := h.Update(ctx, []string{"k"}, incr); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "DEALLOCATE ALL"); err != nil {
		t.Fatal(err)
	}
	want := 1
	if err := h.Update(ctx, []string{"k"}, incr); err == nil {
		want++
	} else {
		t.Logf("the first Update after DEALLOCATE ALL: %v", err)
	}
	if err := h.Update(ctx, []string{"k"}, incr); err != nil {
		t.Fatalf("the second Update after DEALLOCATE ALL: %v", err)
	}
	want++
	var v string
	if err := check.QueryRow(ctx, "SELECT value FROM gatecount_entries WHERE keyhash = $1", oldHashes(t, h, []string{"k"})[0]).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != strconv.Itoa(want) {
		t.Fatalf("count %s after the updates that succeeded, want %d", v, want)
	}
}

// TestUpdateReadsClockAfterLock: an Update that waits for its key's row
// lock reads the clock once it holds the lock, not before: its now is no
// earlier than the clock as the transaction it waited for read it just
// before committing. (Read before the wait, the clock would be older than
// what that transaction wrote.) Both with the key's row, and in an Update
// of several keys.
func TestUpdateReadsClockAfterLock(t *testing.T) {
	for _, keys := range [][]string{{"k"}, {"k", "other"}} {
		t.Run(fmt.Sprint(len(keys)), func(t *testing.T) {
			pool := newPool(t)
			ctx := context.Background()
			b, err := NewBackend(ctx, pool, Options{Secret: randomSecret()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			prefix := randomPrefix("clock")
			if err := b.Update(ctx, prefix, keys, func(now time.Time, es []store.Entry) error {
				for i := range es {
					es[i] = store.Entry{Value: []byte("1"), ExpiresAt: now.Add(time.Hour)}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			h := b.hasher.Sum(prefix, "k")
			if _, err := tx.Exec(ctx, "SELECT 1 FROM gatecount_entries WHERE keyhash = $1 FOR UPDATE", h[:]); err != nil {
				t.Fatal(err)
			}
			type result struct {
				now time.Time
				err error
			}
			done := make(chan result, 1)
			go func() {
				var seen time.Time
				err := b.Update(ctx, prefix, keys, func(now time.Time, _ []store.Entry) error {
					seen = now
					return nil
				})
				done <- result{seen, err}
			}()
			// Until the Update waits for the row lock.
			for waiting := false; !waiting; {
				if err := pool.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity
 WHERE wait_event_type = 'Lock' AND query LIKE '%gatecount_entries%FOR UPDATE%'
   AND pid <> pg_backend_pid()`).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				select {
				case r := <-done:
					t.Fatalf("the Update ended (%v) while the row was locked", r.err)
				case <-time.After(5 * time.Millisecond):
				}
			}
			var before time.Time
			if err := tx.QueryRow(ctx, "SELECT date_trunc('milliseconds', clock_timestamp())").Scan(&before); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.now.Before(before) {
				t.Fatalf("the Update's now %v is before %v, read by the transaction it waited for", r.now, before)
			}
		})
	}
}
