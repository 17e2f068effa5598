package redis_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatecount/gatecount/internal/servicetest"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store"
	redisstore "github.com/gatecount/gatecount/store/redis"
	"github.com/gatecount/gatecount/store/storekit"
	"github.com/gatecount/gatecount/store/storetest"
)

// scriptCalls returns the scripts each master of c has run (EVALSHA and
// EVAL, from INFO commandstats), by its address.
func scriptCalls(t testing.TB, c *redis.ClusterClient) map[string]int64 {
	t.Helper()
	var mu sync.Mutex
	out := map[string]int64{}
	err := c.ForEachMaster(t.Context(), func(ctx context.Context, m *redis.Client) error {
		info, err := m.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		var n int64
		for line := range strings.SplitSeq(info, "\n") {
			name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || name != "cmdstat_evalsha" && name != "cmdstat_eval" {
				continue
			}
			calls, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
			c, err := strconv.ParseInt(calls, 10, 64)
			if err != nil {
				return fmt.Errorf("%s: %q: %w", m.Options().Addr, line, err)
			}
			n += c
		}
		mu.Lock()
		out[m.Options().Addr] = n
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// entryKeys returns how many entries under the secret's fingerprint fp
// each master of c holds (its live index and list of tags left out), by
// its address.
func entryKeys(t testing.TB, c *redis.ClusterClient, fp string) map[string]int {
	t.Helper()
	var mu sync.Mutex
	out := map[string]int{}
	err := c.ForEachMaster(t.Context(), func(ctx context.Context, m *redis.Client) error {
		n := 0
		it := m.Scan(ctx, 0, "gatecount:{*}:"+fp+":*", 10000).Iterator()
		for it.Next(ctx) {
			if k := it.Val(); !strings.HasSuffix(k, ":ends") && !strings.HasSuffix(k, ":ends:at") {
				n++
			}
		}
		mu.Lock()
		out[m.Options().Addr] = n
		mu.Unlock()
		return it.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// within fails the test unless every value of got is within 10% of the
// mean of them all.
func within(t *testing.T, what string, got map[string]int64, masters int) {
	t.Helper()
	if len(got) != masters {
		t.Fatalf("%s: %d masters, want %d: %v", what, len(got), masters, got)
	}
	var sum int64
	for _, n := range got {
		sum += n
	}
	mean := float64(sum) / float64(len(got))
	for addr, n := range got {
		if d := float64(n)/mean - 1; d < -0.10 || d > 0.10 {
			t.Errorf("%s: %s has %d, %+.1f%% off the mean %.0f; want within ±10%% (all: %v)", what, addr, n, 100*d, mean, got)
		}
	}
	t.Logf("%s: %v", what, got)
}

// randomAddr returns a random IPv4 address, as a per-address limiter's key.
func randomAddr() string {
	return fmt.Sprintf("%d.%d.%d.%d", rand.N(224)+1, rand.N(256), rand.N(256), rand.N(256))
}

// TestClusterSpreadEven: a spread per-address limiter's keys, 100,000
// random addresses, land within ±10% of an even split over the Cluster's
// three masters, and so do the masters' script calls under a load of
// random addresses. Before the spread, every key of a limiter lived on
// one master. 6,000 of the addresses are counted through the store (all
// of them with GATECOUNT_LONG=1); the others are written by a pipeline
// under the names the store gives them, which is faster under -race.
func TestClusterSpreadEven(t *testing.T) {
	const keys = 100_000
	counted := 6000
	if servicetest.IsLong() {
		counted = keys
	}
	c := newCluster(t)
	s := open(t, c, redisstore.Options{Secret: newSecret(), Store: store.Options{MaxInFlight: 256}})
	h := handle(t, s, randomName("spread"))
	if n := h.Spread(); n != 256 {
		t.Fatalf("Spread() = %d on a Cluster, want 256", n)
	}
	b := s.Backend().(*redisstore.Backend)
	caps := []store.Budget{{Limit: 10, Window: time.Hour}}
	before := scriptCalls(t, c)
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for next.Add(1) <= int64(counted) {
				if tl, err := h.Count(t.Context(), []string{randomAddr()}, caps, 1); err != nil || !tl.Allowed {
					if failed.Add(1) == 1 {
						t.Errorf("Count: %+v, %v", tl, err)
					}
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	after := scriptCalls(t, c)
	calls := map[string]int64{}
	for addr, n := range after {
		calls[addr] = n - before[addr]
	}
	for left := keys - counted; left > 0; {
		n := min(left, 5000)
		left -= n
		_, err := c.Pipelined(t.Context(), func(p redis.Pipeliner) error {
			for range n {
				p.Set(t.Context(), b.KeyName(h.Prefix(), randomAddr()), "0", time.Minute)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	entries := map[string]int64{}
	total := int64(0)
	for addr, n := range entryKeys(t, c, b.Fingerprint()) {
		entries[addr] = int64(n)
		total += int64(n)
	}
	if total < keys-keys/100 || total > keys {
		t.Fatalf("%d entries on the masters for %d random addresses", total, keys)
	}
	masters := len(shards(t, c))
	within(t, "entries per master", entries, masters)
	within(t, "script calls per master", calls, masters)
}

// TestClusterSpreadBound: the bound of a store is the whole count over
// every shard of a spread limiter. Filled one key at a time, it warns at
// 80% (160 of 200 entries), and refuses the 201st key as full, with the
// keys spread over every master. A sweep reaches every shard: once the
// entries have expired it removes all 200, and a new key has room again.
func TestClusterSpreadBound(t *testing.T) {
	const max = 200
	c := newCluster(t)
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	s := open(t, c, redisstore.Options{Secret: newSecret(), MaxEntries: max, Store: store.Options{Logger: log}})
	b := s.Backend().(*redisstore.Backend)
	h := handle(t, s, randomName("spread-bound"))
	h.Spread()
	ctx := t.Context()
	window := 2 * time.Second
	caps := []store.Budget{{Limit: 10, Window: window}}
	var last time.Time
	for i := range max {
		if i < max*4/5 && strings.Contains(logs.String(), storekit.KindFilling) {
			t.Fatalf("the filling warning came with %d of %d entries, want it at %d", i, max, max*4/5)
		}
		tl, err := h.Count(ctx, []string{randomAddr()}, caps, 1)
		if err != nil || !tl.Allowed {
			t.Fatalf("key %d of %d: %+v, %v; want it counted", i+1, max, tl, err)
		}
		last = tl.Now
		if i+1 == max*4/5 && !strings.Contains(logs.String(), storekit.KindFilling) {
			t.Fatalf("no filling warning with %d of %d entries", i+1, max)
		}
	}
	if _, err := h.Count(ctx, []string{randomAddr()}, caps, 1); store.ReasonOf(err) != store.ReasonFull {
		t.Fatalf("key %d in a store bound to %d: %v, want full", max+1, max, err)
	}
	if !strings.Contains(logs.String(), storekit.KindFull) {
		t.Error("no full error logged")
	}
	indexes := liveIndexes(t, c, b.Fingerprint())
	masters := map[string]bool{}
	for _, m := range indexes {
		masters[m] = true
	}
	if len(indexes) < 100 || len(masters) != len(shards(t, c)) {
		t.Errorf("%d entries on %d shards over %d masters; want them spread over every master", max, len(indexes), len(masters))
	}
	// Wait, on the Cluster's clock, until every entry has expired.
	for {
		now, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if now.After(last.Add(window)) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	removed, err := s.Sweep(ctx)
	if err != nil || removed != max {
		t.Errorf("Sweep after every entry expired: %d removed, %v; want %d", removed, err, max)
	}
	if n := b.Live(); n != 0 {
		t.Errorf("Live() = %d after the sweep, want 0", n)
	}
	if tl, err := h.Count(ctx, []string{randomAddr()}, caps, 1); err != nil || !tl.Allowed {
		t.Errorf("a new key after the sweep: %+v, %v; want it counted", tl, err)
	}
}

// syncBuffer is a log's output, safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestClusterSpreadCalls: a call on a spread handle names keys of one
// shard. Keys of two shards are refused as invalid, and change nothing.
func TestClusterSpreadCalls(t *testing.T) {
	s := open(t, newCluster(t), redisstore.Options{Secret: newSecret()})
	h := handle(t, s, randomName("spread-calls"))
	h.Spread()
	b := s.Backend().(*redisstore.Backend)
	// Two keys of different shards, and two of one shard.
	first := "k0"
	p0, _ := b.Part(h.Prefix(), []string{first})
	var apart, together []string
	for i := 1; apart == nil || together == nil; i++ {
		k := "k" + strconv.Itoa(i)
		switch p, _ := b.Part(h.Prefix(), []string{k}); {
		case p == p0 && together == nil:
			together = []string{first, k}
		case p != p0 && apart == nil:
			apart = []string{first, k}
		}
	}
	caps := []store.Budget{{Limit: 5, Window: time.Hour}, {Limit: 5, Window: time.Hour}}
	if _, err := h.Count(t.Context(), apart, caps, 1); !errors.Is(err, store.ErrInvalidKey) {
		t.Errorf("Count of keys of two shards: %v, want %v", err, store.ErrInvalidKey)
	}
	if tl, err := h.Count(t.Context(), together, caps, 1); err != nil || !tl.Allowed {
		t.Errorf("Count of two keys of one shard: %+v, %v; want it counted", tl, err)
	}
	es, err := h.Read(t.Context(), apart[1:])
	if err != nil || es[0].Live() {
		t.Errorf("a key of the refused call: %v, %v; want no entry", es, err)
	}
}

// TestClusterSpreadFailover stops one master of a Cluster under a spread
// limiter, on two instances. Keys on the other masters keep their exact
// answers (40 attempts on a budget of 30: 30 allowed, 10 refused), though
// they share the limiter with keys on the stopped master; keys on the
// stopped master are answered unavailable, never allowed or refused, and
// a limiter on the handle refuses them by its policy (Deny), and them
// only. Once the master is back, its keys count exactly again.
func TestClusterSpreadFailover(t *testing.T) {
	u := failoverURL(t)
	c := newClusterAt(t, u)
	ctx := t.Context()
	secret := newSecret()
	so := store.Options{
		Deadline:    time.Second,
		MaxInFlight: 64,
		Breaker:     store.BreakerOptions{Failures: 3, Cooldown: 100 * time.Millisecond},
	}
	prefix := randomName("spread-failover")
	var hs [2]*store.Handle
	for i := range hs {
		hs[i] = handle(t, open(t, newClusterAt(t, u), redisstore.Options{Secret: secret, Store: so}), prefix)
		hs[i].Spread()
	}
	b := hs[0].Store().Backend().(*redisstore.Backend)
	// Keys by the master that holds them, found before any stops.
	owner := map[int64]string{}
	for _, sh := range shards(t, c) {
		for _, r := range sh.Slots {
			for slot := r.Start; slot <= r.End; slot++ {
				owner[slot] = masterAddr(sh)
			}
		}
	}
	keysOn := map[string][]string{}
	for i := 0; i < 2000; i++ {
		k := "k" + strconv.Itoa(i)
		slot, err := c.ClusterKeySlot(ctx, b.KeyName(prefix, k)).Result()
		if err != nil {
			t.Fatal(err)
		}
		keysOn[owner[slot]] = append(keysOn[owner[slot]], k)
	}
	tagsAt := masterOf(t, c, "gatecount:{"+b.Fingerprint()+"}:tags")
	var victim string
	var healthy []string
	for m := range keysOn {
		if victim == "" && m != tagsAt {
			victim = m
		} else {
			healthy = append(healthy, m)
		}
	}
	if len(keysOn) != 3 || len(keysOn[victim]) < 30 {
		t.Fatalf("keys by master: %d masters, want 3, each with 30 keys or more", len(keysOn))
	}
	// burst counts 40 attempts on key, budget 30, over both instances.
	var errsMu sync.Mutex
	errs := map[string]int{} // the errors of the last burst, for the log
	burst := func(key string) (allowed, refused, unavailable int64) {
		budget := []store.Budget{{Limit: 30, Window: time.Hour}}
		var a, r, un atomic.Int64
		var wg sync.WaitGroup
		errsMu.Lock()
		clear(errs)
		errsMu.Unlock()
		for i := range 40 {
			wg.Go(func() {
				switch tl, err := hs[i%2].Count(ctx, []string{key}, budget, 1); {
				case err != nil:
					errsMu.Lock()
					errs[err.Error()]++
					errsMu.Unlock()
					un.Add(1)
				case tl.Allowed:
					a.Add(1)
				default:
					r.Add(1)
				}
			})
		}
		wg.Wait()
		return a.Load(), r.Load(), un.Load()
	}
	round := 0
	exact := func(when, m string) {
		t.Helper()
		key := keysOn[m][round]
		if a, r, un := burst(key); a != 30 || r != 10 || un != 0 {
			t.Errorf("%s: a key on %s answered %d allowed, %d refused, %d unavailable (errors: %v); want 30, 10, 0", when, m, a, r, un, errs)
		}
	}
	for _, m := range append(healthy, victim) {
		exact("before the stop", m)
	}
	round++
	// A limiter on the spread handle, whose policy for a store down is
	// Deny: it refuses the keys of the stopped master, and those only.
	l, err := limiter.New(hs[0], limiter.Options{Name: "failover", Budget: limiter.Budget{Limit: 1000, Window: time.Hour}, Unavailable: limiter.Deny})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	restart := stopNode(t, c, victim)
	for _, m := range append(healthy, victim) {
		d, err := l.Attempt(ctx, keysOn[m][len(keysOn[m])-1])
		if down := m == victim; err != nil || d.Allowed == down || d.Unavailable != down {
			t.Errorf("the limiter, on a key of %s (stopped: %v): %+v, %v; want allowed %v, unavailable %v", m, down, d, err, !down, down)
		}
	}
	for ; round < 11; round++ {
		var wg sync.WaitGroup
		var va, vr int64
		wg.Go(func() { va, vr, _ = burst(keysOn[victim][round]) })
		for _, m := range healthy {
			exact(fmt.Sprintf("round %d with %s stopped", round, victim), m)
		}
		wg.Wait()
		if va+vr != 0 {
			t.Errorf("round %d: a key on the stopped master answered %d allowed and %d refused; want every attempt unavailable", round, va, vr)
		}
	}
	restart()
	round++
	// The restarted master settles: its cluster state, the others' view of
	// it, each handle's connections to it, and the breaker of the part of
	// the key counted next there, which the outage may have opened (a part
	// is a shard: its keys share a breaker). It has settled once a burst as
	// wide as the test's, 20 counts a handle at once on a spare key of that
	// part, is answered whole. What failed meanwhile is logged.
	part, _ := b.Part(prefix, keysOn[victim][round:][:1])
	var spare []string
	for _, k := range keysOn[victim][round+1 : len(keysOn[victim])-1] { // the last is the limiter's
		if p, _ := b.Part(prefix, []string{k}); p == part {
			spare = []string{k}
			break
		}
	}
	if spare == nil {
		t.Fatalf("no spare key of part %d on %s among %d keys", part, victim, len(keysOn[victim]))
	}
	settling := map[string]int{}
	for i := 0; ; i++ {
		var mu sync.Mutex
		var wg sync.WaitGroup
		failed := 0
		for j := range 40 {
			wg.Go(func() {
				if _, err := hs[j%2].Count(ctx, spare, []store.Budget{{Limit: 1 << 20, Window: time.Hour}}, 1); err != nil {
					mu.Lock()
					failed++
					settling[err.Error()]++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if failed == 0 {
			t.Logf("after the restart, %d bursts before one was answered whole; errors meanwhile: %v", i+1, settling)
			break
		}
		if i == 100 {
			t.Fatalf("the keys on %s were not all counted within 100 bursts after it came back: %v", victim, settling)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, m := range append(healthy, victim) {
		exact("after the restart", m)
	}
}

// TestClusterSpreadReset: a limiter's Reset of keys of several shards of a
// spread handle clears each of them, one call a key.
func TestClusterSpreadReset(t *testing.T) {
	s := open(t, newCluster(t), redisstore.Options{Secret: newSecret()})
	h := handle(t, s, randomName("spread-reset"))
	h.Spread()
	l, err := limiter.New(h, limiter.Options{Name: "reset", Budget: limiter.Budget{Limit: 1, Window: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"} // of several shards, most likely
	for _, k := range keys {
		if d, err := l.Attempt(t.Context(), k); err != nil || !d.Allowed {
			t.Fatalf("Attempt(%s): %+v, %v", k, d, err)
		}
	}
	if err := l.Reset(t.Context(), keys...); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	for _, k := range keys {
		if es, err := h.Read(t.Context(), []string{k}); err != nil || es[0].Live() {
			t.Errorf("key %s after Reset: %v, %v; want no entry", k, es, err)
		}
	}
}

// oneShard returns a key of one shard of h for name: name, a tilde and the
// first number that puts it in shard 0. A spread handle's calls must name
// keys of one shard.
func oneShard(h *store.Handle, name string) string {
	b := h.Store().Backend().(*redisstore.Backend)
	for n := 0; ; n++ {
		k := name + "~" + strconv.Itoa(n)
		if p, ok := b.Part(h.Prefix(), []string{k}); ok && p == 0 {
			return k
		}
	}
}

// TestClusterSpreadContract runs the contract suite on spread handles on
// the Cluster, its keys all in one shard of each handle (Pair.Key). Every
// case runs and passes: none is skipped or does not apply.
func TestClusterSpreadContract(t *testing.T) {
	spread := func(h *store.Handle) *store.Handle {
		h.Spread()
		return h
	}
	for _, c := range storetest.Cases {
		t.Run(c.Name, func(t *testing.T) {
			secret := newSecret()
			c1 := newCluster(t)
			s1 := open(t, c1, redisstore.Options{Secret: secret})
			s2 := open(t, newCluster(t), redisstore.Options{Secret: secret})
			prefix := randomName("contract")
			p := storetest.Pair{
				First:  spread(handle(t, s1, prefix)),
				Second: spread(handle(t, s2, prefix)),
				Other:  spread(handle(t, s1, prefix+"-other")),
				NewBounded: func(max int) (*store.Handle, error) {
					s, err := redisstore.New(t.Context(), newCluster(t), redisstore.Options{Secret: newSecret(), MaxEntries: max})
					if err != nil {
						return nil, err
					}
					h, err := s.Handle(prefix)
					if err != nil {
						s.Close()
						return nil, err
					}
					return spread(h), nil
				},
				SameBacking: func() (*store.Store, error) {
					return redisstore.New(t.Context(), c1, redisstore.Options{Secret: secret, Store: store.Options{Logger: quiet}})
				},
				Key: oneShard,
			}
			ctx, cancel := context.WithTimeout(t.Context(), storetest.CaseTimeout)
			defer cancel()
			if err := c.Run(ctx, p); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestClusterMiddlewareSpreads: the middleware of one key per request
// spreads its limiter's keys over every master of a Cluster. Before, they
// all lived on one.
func TestClusterMiddlewareSpreads(t *testing.T) {
	c := newCluster(t)
	s := open(t, c, redisstore.Options{Secret: newSecret()})
	h := handle(t, s, randomName("per-caller"))
	m, err := middleware.New(h, limiter.Budget{Limit: 10, Window: time.Hour}, middleware.Options{
		Key: func(r *http.Request) (string, error) { return r.Header.Get("X-Caller"), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	app := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	for i := range 200 {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Caller", "caller-"+strconv.Itoa(i))
		w := httptest.NewRecorder()
		app.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("request %d: %d", i, w.Code)
		}
	}
	masters := map[string]bool{}
	for _, at := range liveIndexes(t, c, s.Backend().(*redisstore.Backend).Fingerprint()) {
		masters[at] = true
	}
	if want := len(shards(t, c)); len(masters) != want {
		t.Errorf("200 callers' keys live on %d masters, want all %d", len(masters), want)
	}
}
