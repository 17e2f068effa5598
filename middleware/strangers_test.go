package middleware_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatecount/gatecount/internal/clock"
	"github.com/gatecount/gatecount/internal/servicetest"
	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/middleware/challenge"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/keyhash"
	"github.com/gatecount/gatecount/store/memory"
	_ "github.com/gatecount/gatecount/store/sqlite" // DATABASE_URL=sqlite:…
)

// wrap guards the test's password check with g, closed when t ends.
func wrap(t *testing.T, g *middleware.SignInGuard, err error) http.Handler {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g.Wrap(&passwords{})
}

// madeUpAddr is the address of the i-th made-up name's client: each in a
// network of its own, as a botnet's.
func madeUpAddr(i int) string { return fmt.Sprintf("10.%d.%d.1", i>>8&255, i&255) }

// madeUpKeys are the keys of a name that only ever fails: those no other
// name shares.
func madeUpKeys(name string) []string {
	return []string{keyfunc.JoinKeys("account", name), keyfunc.JoinKeys("consecutive", name), keyfunc.JoinKeys("delay", name)}
}

// liveOf returns those of keys that have a live entry in h.
func liveOf(t *testing.T, h *store.Handle, keys []string) []string {
	t.Helper()
	var live []string
	for len(keys) > 0 {
		batch := keys[:min(len(keys), store.MaxKeys)]
		keys = keys[len(batch):]
		es, err := h.Read(context.Background(), batch)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range es {
			if e.Live() {
				live = append(live, batch[i])
			}
		}
	}
	return live
}

// A flood of 10,000 made-up names on a store of 5,000 entries, then one
// made-up name a minute: alice, who has signed in before, with her right
// password, from a new address and without her device cookie, signs in
// within an hour of the flood. Until then she is refused by no budget of
// hers: the answer names none. No entry of a made-up name lives past an
// hour, while alice's count toward the cap is kept.
func TestMadeUpNamesHoldNoRoom(t *testing.T) {
	clk, s, b, h, guarded := floodedGuard(t, false)
	ctx := context.Background()
	if w := post(guarded, "203.0.113.1", formCT, form("alice", "right")); w.Code != 200 {
		t.Fatalf("alice signs in: %d", w.Code)
	}
	clk.Advance(24 * time.Hour)

	const flood = 10_000
	var flooded []string
	for i := range flood {
		name := fmt.Sprintf("flood%d", i)
		post(guarded, madeUpAddr(i), formCT, form(name, fmt.Sprintf("guess %d", i)))
		flooded = append(flooded, madeUpKeys(name)...)
	}
	if n := b.Entries(); n < b.MaxEntries()-6 { // an attempt adds up to six keys, all or none
		t.Fatalf("the flood left %d entries, want the store full (%d)", n, b.MaxEntries())
	}
	end := clk.Now()

	signedIn := -1
	for m := 1; m <= 90; m++ {
		now := clk.Advance(time.Minute)
		name := fmt.Sprintf("trickle%d", m)
		post(guarded, madeUpAddr(flood+m), formCT, form(name, "guess"))
		if signedIn < 0 {
			w := post(guarded, fmt.Sprintf("198.51.100.%d", m), formCT, form("alice", "right"))
			switch {
			case w.Code == 200:
				signedIn = m
			case w.Code != 429 || w.Header().Get("RateLimit") != "" || retryAfter(t, w) < 1 ||
				!strings.Contains(w.Body.String(), "no room"):
				t.Fatalf("alice %v after the flood: %d RateLimit %q %s; want 429 naming no budget of hers, the store's room",
					now.Sub(end), w.Code, w.Header().Get("RateLimit"), w.Body)
			}
		}
		if m == 60 {
			if live := liveOf(t, h, flooded); len(live) > 0 {
				t.Fatalf("an hour after the flood, %d keys of its names live, %q first", len(live), live[0])
			}
		}
		if m > 60 {
			if live := liveOf(t, h, madeUpKeys(fmt.Sprintf("trickle%d", m-60))); len(live) > 0 {
				t.Fatalf("an hour after a made-up name's failure, its keys %q live", live)
			}
		}
	}
	t.Logf("alice signed in %d minutes after the flood", signedIn)
	if signedIn < 0 || signedIn > 60 {
		t.Fatalf("alice signed in %d minutes after the flood, want within the hour", signedIn)
	}
	// What is left are the last hour's made-up names, at most six keys
	// each, and alice's.
	if _, err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if n := b.Entries(); n > 6*60+10 {
		t.Fatalf("%d entries live an hour and a half after the flood, want the last hour's made-up names' at most", n)
	}
	if live := liveOf(t, h, []string{keyfunc.JoinKeys("consecutive", "alice")}); len(live) != 1 {
		t.Fatal("alice's count toward the cap was not kept")
	}
}

// One failure of a made-up name holds no entry past the guard's longest
// windowed budget: the cap's count of a name that never signed in expires
// with the rest, on passwords and codes alike, and with SignIn's back-off and challenges.
func TestMadeUpNameEntriesExpire(t *testing.T) {
	pow, err := challenge.NewProofOfWork(challenge.ProofOfWorkOptions{Secret: powSecret})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		guard   func(t *testing.T, h *store.Handle) http.Handler
		longest time.Duration
	}{
		{"signin", func(t *testing.T, h *store.Handle) http.Handler {
			g, err := middleware.SignIn(h, middleware.SignInOptions{Logger: quiet, Device: middleware.DeviceOptions{Secret: deviceSecret}})
			return wrap(t, g, err)
		}, time.Hour},
		{"signin, back-off", func(t *testing.T, h *store.Handle) http.Handler {
			g, err := middleware.SignIn(h, middleware.SignInOptions{Logger: quiet, Device: middleware.DeviceOptions{Secret: deviceSecret},
				AccountIPFailures: limiter.Budget{Limit: 1, Window: 15 * time.Minute},
				Backoff:           middleware.Backoff{Max: 2 * time.Hour, History: 3 * time.Hour}})
			return wrap(t, g, err)
		}, 3 * time.Hour},
		{"signin, challenge", func(t *testing.T, h *store.Handle) http.Handler {
			g, err := middleware.SignIn(h, middleware.SignInOptions{Logger: quiet, Device: middleware.DeviceOptions{Secret: deviceSecret},
				Challenge: pow, ChallengeBudget: limiter.Budget{Limit: 10, Window: 2 * time.Hour}})
			return wrap(t, g, err)
		}, 2 * time.Hour},
		{"verify", func(t *testing.T, h *store.Handle) http.Handler {
			g, err := middleware.SignIn(h, middleware.SignInOptions{Code: true, Logger: quiet, AccountFailures: limiter.Budget{Limit: 10, Window: 90 * time.Minute}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { g.Close() })
			return g.Wrap(&passwords{})
		}, 90 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(t0)
			o := store.Options{Logger: quiet}
			b := memory.NewBackend(memory.Options{Now: clk.Now, Store: o})
			s := store.New(b, o)
			t.Cleanup(func() { s.Close() })
			gh := handle(t, s, "g:")
			h := tc.guard(t, gh)
			if w := login(h, "192.0.2.1", "nobody", "guess"); w.Code != 401 {
				t.Fatalf("a made-up name's failure: %d", w.Code)
			}
			if w := login(h, "192.0.2.1", "nobody", "guess"); w.Code != 401 && w.Code != 429 {
				t.Fatalf("a made-up name's second failure: %d", w.Code)
			}
			consecutive := []string{keyfunc.JoinKeys("consecutive", "nobody")}
			clk.Advance(tc.longest - time.Second)
			if len(liveOf(t, gh, consecutive)) != 1 {
				t.Fatalf("the cap's count of a made-up name is gone before %v, the guard's longest window", tc.longest)
			}
			clk.Advance(time.Second)
			if _, err := s.Sweep(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := b.Entries(); n != 0 {
				t.Fatalf("%d entries of a made-up name's failures live after %v, want none", n, tc.longest)
			}
		})
	}
}

// An account that has signed in keeps its count toward the cap across days,
// and the cap ends a year after the failure that reached it: Retry-After
// says when. A name that never signed in is never capped by a trickle: its
// count expires with the guard's windows.
func TestCapKeptForRealAccounts(t *testing.T) {
	const limit = 10
	clk := clock.NewFake(t0)
	o := outOfTheWay
	o.ConsecutiveFailures = limit
	o.Delay.After = limit // no delays
	_, p, h := signIn(t, clk, o)
	if w := post(h, "203.0.113.1", formCT, form("alice", "right")); w.Code != 200 {
		t.Fatalf("alice signs in: %d", w.Code)
	}
	guess := func(account string, day, i int) *httptest.ResponseRecorder {
		return post(h, guessAddr(day*10+i), formCT, form(account, "wrong"))
	}
	// Three failures a day for three days, each on a name of each kind.
	for day := range 3 {
		for i := range 3 {
			for _, account := range []string{"alice", "nobody"} {
				if w := guess(account, day, i); w.Code != 401 {
					t.Fatalf("%s's failure %d on day %d: %d", account, i+1, day+1, w.Code)
				}
			}
		}
		clk.Advance(24 * time.Hour)
	}
	if w := guess("nobody", 3, 0); w.Code != 401 {
		t.Fatalf("a made-up name after 9 failures over three days: %d, want 401: not capped", w.Code)
	}
	if w := guess("alice", 3, 0); w.Code != 401 {
		t.Fatalf("alice's 10th failure: %d", w.Code)
	}
	last := clk.Now()
	capped := func(when string, want time.Duration) {
		t.Helper()
		before := p.checks.Load()
		w := post(h, "198.51.100.1", formCT, form("alice", "right"))
		if w.Code != 429 || p.checks.Load() != before || !strings.Contains(w.Header().Get("RateLimit"), `"login-consecutive"`) ||
			retryAfter(t, w) != int(want/time.Second) {
			t.Fatalf("alice %s: %d RateLimit %q Retry-After %q, want 429 by login-consecutive for %v",
				when, w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"), want)
		}
	}
	capped("at the cap", limiter.MaxWindow)
	clk.Advance(limiter.MaxWindow - 24*time.Hour)
	capped("a year less a day after the last failure", 24*time.Hour)
	clk.Set(last.Add(limiter.MaxWindow))
	if w := post(h, "198.51.100.1", formCT, form("alice", "right")); w.Code != 200 {
		t.Fatalf("alice a year after the failure that reached the cap: %d, want 200", w.Code)
	}
}

// On Redis, every key a failed sign-in of a made-up name writes expires
// within the guard's longest window, an hour: read as the keys' TTLs. The
// one key that lives longer is the count toward the cap of alice, who
// signed in. 200 names stand for the flood here: what is checked is each
// key's TTL, which the number of names does not change.
func TestMadeUpNamesTTLRedis(t *testing.T) {
	u := servicetest.RedisURL(t)
	secret := make([]byte, 32)
	rand.Read(secret)
	s := openShared(t, u, secret)
	proxies, _ := keyfunc.ParseNetworks("127.0.0.1/32")
	g, err := middleware.SignIn(handle(t, s, fresh("names")), middleware.SignInOptions{Logger: quiet, IP: keyfunc.IPOptions{TrustedProxies: proxies}, Device: middleware.DeviceOptions{Secret: deviceSecret}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	h := g.Wrap(&passwords{})
	if w := post(h, "203.0.113.1", formCT, form("alice", "right")); w.Code != 200 {
		t.Fatalf("alice signs in: %d", w.Code)
	}
	for i := range 200 {
		for range 2 { // the second finds the name's keys in the store
			if w := post(h, madeUpAddr(i), formCT, form(fmt.Sprintf("made-up%d", i), fmt.Sprintf("guess %d", i))); w.Code != 401 {
				t.Fatalf("made-up name %d: %d", i, w.Code)
			}
		}
	}
	o, err := redis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	hs, err := keyhash.New(secret)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var entries, long int
	it := c.Scan(ctx, 0, "gatecount:{*}:"+hs.Fingerprint()+":*", 1000).Iterator()
	for it.Next(ctx) {
		k := it.Val()
		if name := k[strings.LastIndexByte(k, ':')+1:]; len(name) != 64 { // the live index's keys
			continue
		}
		entries++
		ttl, err := c.PTTL(ctx, k).Result()
		switch {
		case err != nil:
			t.Fatal(err)
		case ttl > limiter.MaxWindow-time.Minute:
			long++ // alice's count toward the cap
		case ttl <= 0 || ttl > time.Hour:
			t.Errorf("an entry has a TTL of %v, want at most an hour", ttl)
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if entries < 200*5 || long != 1 {
		t.Fatalf("%d entries, %d of them living a year; want the made-up names' (at least 5 each) and alice's count alone living a year", entries, long)
	}
}

// Unlock and Recovered tell that an account is real, as a success does:
// the count of an account that never signed in is kept across days after
// either, and reaches the cap.
func TestCapKeptAfterUnlock(t *testing.T) {
	const limit = 10
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		free func(g *middleware.SignInGuard) error
	}{
		{"Unlock", func(g *middleware.SignInGuard) error { return g.Unlock(ctx, "carol") }},
		{"Recovered", func(g *middleware.SignInGuard) error { return g.Recovered(ctx, "carol") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(t0)
			o := outOfTheWay
			o.ConsecutiveFailures = limit
			o.Delay.After = limit // no delays
			g, _, h := signIn(t, clk, o)
			if err := tc.free(g); err != nil {
				t.Fatal(err)
			}
			for i := range limit {
				if w := post(h, guessAddr(i), formCT, form("carol", "wrong")); w.Code != 401 {
					t.Fatalf("failure %d: %d", i+1, w.Code)
				}
				clk.Advance(12 * time.Hour)
			}
			if w := post(h, guessAddr(limit), formCT, form("carol", "wrong")); w.Code != 429 || !strings.Contains(w.Header().Get("RateLimit"), `"login-consecutive"`) {
				t.Fatalf("after %d failures over five days: %d %q, want the cap", limit, w.Code, w.Header().Get("RateLimit"))
			}
		})
	}
}

// The count a success keeps is an entry of count 0 that every store reads
// and charges as any other, keeping its year: on memory, SQLite,
// PostgreSQL and Redis.
func TestCapKeptEveryStore(t *testing.T) {
	stores := exactStores()
	stores["sqlite"] = func(t *testing.T) *store.Store {
		return openShared(t, "sqlite:"+filepath.Join(t.TempDir(), "gatecount.db"), deviceSecret)
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			proxies, _ := keyfunc.ParseNetworks("127.0.0.1/32")
			g, err := middleware.SignIn(handle(t, s, fresh("kept")), middleware.SignInOptions{Logger: quiet, IP: keyfunc.IPOptions{TrustedProxies: proxies}, Device: middleware.DeviceOptions{Secret: deviceSecret}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { g.Close() })
			h := g.Wrap(&passwords{})
			ctx := context.Background()
			consecutive := func(want int) {
				t.Helper()
				st, err := g.Show(ctx, "alice")
				if err != nil {
					t.Fatal(err)
				}
				b := st.Budgets[1]
				if b.Budget != "login-consecutive" || b.Used != want || time.Until(b.Reset) < limiter.MaxWindow-time.Hour {
					t.Fatalf("alice's count toward the cap: %+v, want %d used, kept a year", b, want)
				}
			}
			for round, failures := range []int{3, 2} {
				if w := post(h, "203.0.113.1", formCT, form("alice", "right")); w.Code != 200 {
					t.Fatalf("alice signs in (round %d): %d", round, w.Code)
				}
				consecutive(0)
				for i := range failures {
					if w := post(h, guessAddr(i), formCT, form("alice", "wrong")); w.Code != 401 {
						t.Fatalf("failure %d: %d", i+1, w.Code)
					}
				}
				consecutive(failures)
			}
		})
	}
}

// In shadow the guard counts as it would: a success keeps the count, and
// failures over days reach the cap, which Show tells.
func TestCapKeptInShadow(t *testing.T) {
	const limit = 10
	clk := clock.NewFake(t0)
	o := outOfTheWay
	o.ConsecutiveFailures = limit
	o.Delay.After = limit // no delays
	o.Shadow = true
	g, _, h := signIn(t, clk, o)
	if w := post(h, "203.0.113.1", formCT, form("alice", "right")); w.Code != 200 {
		t.Fatalf("alice signs in: %d", w.Code)
	}
	for i := range limit {
		post(h, guessAddr(i), formCT, form("alice", "wrong"))
		clk.Advance(12 * time.Hour)
	}
	s, err := g.Show(context.Background(), "alice")
	if err != nil || !s.Refused || s.Budgets[1].Used != limit {
		t.Fatalf("Show after %d failures over five days in shadow: %+v, %v; want alice at the cap", limit, s, err)
	}
}

// On a shared store that a flood fills, a made-up name's count toward the
// cap is never kept a year. Those counted in process memory while the store
// was full, and written in once it has room, live two windows at most.
func TestMadeUpNamesSharedFullStore(t *testing.T) {
	clk, _, _, h, guarded := floodedGuard(t, true)
	var caps []string
	fail := func(from, n int) {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8) // attempts at once, as a flood sends them
		for i := from; i < from+n; i++ {
			name := fmt.Sprintf("made-up%d", i)
			caps = append(caps, keyfunc.JoinKeys("consecutive", name))
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				post(guarded, madeUpAddr(i), formCT, form(name, fmt.Sprintf("guess %d", i)))
			})
		}
		wg.Wait()
	}
	const flood = 10_000
	fail(0, flood)
	for m := 1; m <= 120; m++ {
		clk.Advance(time.Minute)
		fail(flood+m, 1)
		if m%10 != 0 {
			continue
		}
		now := clk.Now()
		for i := 0; i < len(caps); i += store.MaxKeys {
			batch := caps[i:min(i+store.MaxKeys, len(caps))]
			es, err := h.Read(context.Background(), batch)
			if err != nil {
				t.Fatal(err)
			}
			for j, e := range es {
				if e.Live() && e.ExpiresAt.Sub(now) > 2*time.Hour {
					t.Fatalf("%d min after the flood, %s lives %v more, want at most two windows", m, batch[j], e.ExpiresAt.Sub(now))
				}
			}
		}
	}
}

// floodedGuard returns a sign-in guard with the defaults on a memory store
// of 5,000 entries, shared or not, whose clock is clk.
func floodedGuard(t *testing.T, shared bool) (*clock.Fake, *store.Store, *memory.Backend, *store.Handle, http.Handler) {
	clk := clock.NewFake(t0)
	o := store.Options{Logger: quiet}
	b := memory.NewBackend(memory.Options{MaxEntries: 5000, Now: clk.Now, Store: o})
	var backend store.Backend = b
	if shared {
		backend = sharedBackend{b}
	}
	s := store.New(backend, o)
	t.Cleanup(func() { s.Close() })
	h := handle(t, s, "signin:")
	proxies, _ := keyfunc.ParseNetworks("127.0.0.1/32")
	g, err := middleware.SignIn(h, middleware.SignInOptions{Logger: quiet, IP: keyfunc.IPOptions{TrustedProxies: proxies}, Device: middleware.DeviceOptions{Secret: deviceSecret}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return clk, s, b, h, g.Wrap(&passwords{})
}
