package main

import (
	"context"
	"expvar"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gatecount/gatecount/examples/internal/demotest"
	"github.com/gatecount/gatecount/internal/faultproxy"
	"github.com/gatecount/gatecount/internal/loadtest"
	"github.com/gatecount/gatecount/internal/servicetest"
	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store/postgres"
)

// The tests of this file are the acceptance of issue 26: a fleet of
// instances on one shared store never hands out more than a key's budget,
// not while the store is overloaded by a flood of fresh keys, not when it
// is full, and a change made through one instance reaches the others. Like
// those of pressure_test.go, they assert counts, never timings (but for
// TestResetReachesFleet, whose acceptance is a time bound), and every loop
// is bounded in requests and in time. The servers run in this process
// (demotest.Start), so that what reached the handlers can be counted.

// Figures of the fresh-key floods.
const (
	// floodClients is how many connections a flood holds open at once on
	// each server: far more than the store guard lets in flight
	// (floodInFlight), so that calls wait in its queue.
	floodClients = 2000
	// floodInFlight is RATE_LIMIT_STORE_MAX_IN_FLIGHT in the floods: so
	// few store calls at once that the flood saturates the store by
	// construction, however slowly the app (under the race detector, on a
	// loaded machine) makes its calls.
	floodInFlight = 4
	// floodFor is how long a flood lasts.
	floodFor = 4 * time.Second
	// aliceAddress is where alice's reset codes go.
	aliceAddress = "alice@example.com"
	// accountFailures and resetPerDestination are the defaults of
	// RATE_LIMIT_LOGIN_ACCOUNT_FAILURES (per hour) and
	// RATE_LIMIT_RESET_PER_DESTINATION (per hour).
	accountFailures     = 20
	resetPerDestination = 3
)

// freshNet returns the i-th address of a fresh-key flood: one of its own
// IPv6 /32, 3<i>::1 (i in 12 bits, then 16), which the limiters key as an
// address and networks of its own.
func freshNet(i int) string { return fmt.Sprintf("3%03x:%x::1", i>>16&0xfff, i&0xffff) }

// freshV4 returns an address function over the IPv4 /16 format writes
// (such as "198.18.%d.%d"): request i from an address of its own.
func freshV4(format string) func(int) string {
	return func(i int) string { return fmt.Sprintf(format, i>>8&0xff, i&0xff) }
}

// bobSignsIn is bob's correct password.
func bobSignsIn(int) url.Values {
	return url.Values{"username": {"bob"}, "password": {"battery-staple"}}
}

// aliceSignsIn is alice's correct password.
func aliceSignsIn(int) url.Values {
	return url.Values{"username": {"alice"}, "password": {"correct-horse"}}
}

// startFleet starts n example servers in this process over one store, with
// env, and returns them with their URLs. On PostgreSQL, the rows of their
// secret are deleted once they have stopped: a flood leaves some hundred
// thousand live for an hour, which would slow every test after it. It
// returns once every server counts n instances on the store.
func startFleet(t *testing.T, n int, env map[string]string) ([]*demotest.Server, []string) {
	t.Helper()
	return startFleetLogged(t, n, env, slog.New(slog.DiscardHandler))
}

// startFleetLogged is startFleet with the servers' logs going to log.
func startFleetLogged(t *testing.T, n int, env map[string]string, log *slog.Logger) ([]*demotest.Server, []string) {
	t.Helper()
	var fingerprint string
	if u := env["DATABASE_URL"]; u != "" && !strings.HasPrefix(u, "sqlite:") {
		t.Cleanup(func() { // registered first: runs after the servers stop
			if fingerprint != "" {
				dropRows(t, u, fingerprint)
			}
		})
	}
	var servers []*demotest.Server
	var urls []string
	for range n {
		s := demotest.StartLogged(t, routes, env, log)
		servers, urls = append(servers, s), append(urls, s.URL)
	}
	if b, ok := servers[0].App.Store.Store.Backend().(*postgres.Backend); ok {
		fingerprint = b.Fingerprint()
	}
	// A fleet is one once every instance has counted the others, within
	// an announce interval of the last one's start.
	for i, s := range servers {
		for j := 0; s.App.Store.Store.Members() != n; j++ {
			if j == 100 {
				t.Fatalf("server %d counts %d instances on its store after 10 s, want %d", i, s.App.Store.Store.Members(), n)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return servers, urls
}

// dropRows deletes the rows of the secret whose fingerprint is given from
// the PostgreSQL database at u.
func dropRows(t *testing.T, u, fingerprint string) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		t.Error(err)
		return
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `DELETE FROM gatecount_entries WHERE fingerprint = $1`, fingerprint); err != nil {
		t.Errorf("deleting the test's rows: %v", err)
	}
}

// timed is a load run that starts after a delay.
type timed struct {
	after time.Duration
	c     loadtest.LoadConfig
}

// runTimed runs every config at once, each after its delay, and fails the
// test on an error.
func runTimed(t *testing.T, runs ...timed) []*loadtest.Result {
	t.Helper()
	out := make([]*loadtest.Result, len(runs))
	errs := make([]error, len(runs))
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Go(func() {
			time.Sleep(r.after)
			out[i], errs[i] = loadtest.Run(context.Background(), r.c)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// counters returns every count the process's metrics hold (the servers of
// this process share them), by dotted name: the store calls answered
// unavailable by reason (unavailable.overloaded, …) and the limiters'
// decisions by outcome (decisions.login.allowed_local, …).
func counters(s *demotest.Server) map[string]int64 {
	out := map[string]int64{}
	var walk func(prefix string, m *expvar.Map)
	walk = func(prefix string, m *expvar.Map) {
		m.Do(func(kv expvar.KeyValue) {
			switch v := kv.Value.(type) {
			case *expvar.Int:
				out[prefix+kv.Key] = v.Value()
			case *expvar.Map:
				walk(prefix+kv.Key+".", v)
			}
		})
	}
	out["waited"] = s.App.Store.Store.Stats().Waited
	root := s.App.Metrics.Map()
	for _, name := range []string{"unavailable", "decisions"} {
		if m, ok := root.Get(name).(*expvar.Map); ok {
			walk(name+".", m)
		}
	}
	return out
}

// since returns what changed from before to after, as "name=delta" in
// name order, for the log.
func since(before, after map[string]int64) (map[string]int64, string) {
	d := map[string]int64{}
	for k, v := range after {
		if n := v - before[k]; n != 0 {
			d[k] = n
		}
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(d)) {
		fmt.Fprintf(&b, " %s=%d", k, d[k])
	}
	return d, strings.TrimSpace(b.String())
}

// saturated returns how many store calls of the change d waited for a slot
// of the guard, or were answered unavailable because a wait ran out
// (overloaded) or the store's answer did not come in time (deadline): the
// signs of a flood the store cannot take at once.
func saturated(d map[string]int64) int64 {
	return d["waited"] + d["unavailable.overloaded"] + d["unavailable.deadline"]
}

// A flood of fresh keys saturates the store; that is never a free budget.
// One and two servers on PostgreSQL and on Redis, TRUSTED_PROXIES set, 4
// store calls at once (RATE_LIMIT_STORE_MAX_IN_FLIGHT): for 4 s, 2,000
// connections per server send POST /login for a new account
// u<i> with a password of its own (as a sprayer would, to pass the count
// per password), each from an IPv6 /64 of its own (or POST /password-reset to
// u<i>@example.com). Over the middle half of the flood, 19 wrong passwords
// for alice from 19 new IPv4 addresses (2 reset requests for
// alice@example.com): one fewer than the budget; after the flood, 40 more
// (10 more). Over the whole scenario at most 20 of alice's wrong
// passwords reach the password check (RATE_LIMIT_LOGIN_ACCOUNT_FAILURES)
// and at most 3 codes go to her address (RATE_LIMIT_RESET_PER_DESTINATION),
// on all servers together. And all through the flood, bob's correct
// sign-ins, each from an address of its own with his device cookie, are
// each answered 200: his device's store calls wait in a queue the flood
// never joins.
func TestFreshKeyFloodOverload(t *testing.T) {
	servicetest.Long(t)
	type route struct {
		name, path string
		flood      func(i int) url.Values // the flood's request i
		victim     func(i int) url.Values // alice's request
		budget     int
		// alice's requests during the flood: one fewer than the budget,
		// so that no instance's memory shows her key spent and each asks
		// the store about it again after the flood
		during  int
		after   int // alice's requests after the flood
		what    string
		reached func(*demotest.Server) int // alice's requests that reached the handler's work
	}
	// The reset flood comes first: bob signs in during both, and the login
	// flood leaves the sign-in limiter's memory full of its keys.
	floods := []route{
		{
			name: "reset", path: "/password-reset",
			flood:  func(i int) url.Values { return url.Values{"email": {"u" + strconv.Itoa(i) + "@example.com"}} },
			victim: func(int) url.Values { return url.Values{"email": {aliceAddress}} }, budget: resetPerDestination, during: resetPerDestination - 1, after: 10,
			what:    "reset codes went to " + aliceAddress,
			reached: func(s *demotest.Server) int { return s.App.CodesSent(aliceAddress) },
		},
		{
			name: "login", path: "/login",
			flood: func(i int) url.Values {
				return url.Values{"username": {"u" + strconv.Itoa(i)}, "password": {"x" + strconv.Itoa(i)}}
			},
			victim: wrongFor("alice"), budget: accountFailures, during: accountFailures - 1, after: 40,
			what:    "of alice's wrong passwords reached the password check",
			reached: func(s *demotest.Server) int { return s.App.PasswordChecksFor("alice") },
		},
	}
	for _, tc := range []struct {
		store   string
		servers int
	}{
		{"postgres", 1},
		{"postgres", 2},
		{"redis", 1},
		{"redis", 2},
	} {
		t.Run(fmt.Sprintf("%s/%d servers", tc.store, tc.servers), func(t *testing.T) {
			env := []string{"TRUSTED_PROXIES=127.0.0.1/32", "RATE_LIMIT_STORE_MAX_IN_FLIGHT=" + strconv.Itoa(floodInFlight)}
			// one fleet for both floods, whose keys never meet
			servers, urls := startFleet(t, tc.servers, storeEnv(t, tc.store, env...))
			device := deviceOf(t, servers[0], "bob", "battery-staple")
			for ri, rt := range floods {
				t.Run(rt.name, func(t *testing.T) {
					before := counters(servers[0])
					runs := []timed{
						{0, loadtest.LoadConfig{
							Targets: urls, Callers: loadtest.NewCallers(1), Clients: floodClients * len(urls), Duration: floodFor, Requests: 1 << 20,
							Request: formFrom(rt.path, freshNet, rt.flood),
						}},
						// each of bob's sign-ins from an address of its own,
						// so that his own attempts never spend an address's
						// budget, with his device cookie
						{0, loadtest.LoadConfig{
							Targets: urls, Callers: loadtest.NewCallers(1), Clients: 2, Duration: floodFor, Requests: 20000,
							// An answer, however late: what is asserted is
							// its status, never its time.
							Timeout: time.Minute,
							Request: withCookie(formFrom("/login", freshV4(fmt.Sprintf("10.%d.%%d.%%d", ri+1)), bobSignsIn), device),
						}},
					}
					// alice's, spread evenly over the middle half of the
					// flood, each from an address of its own, round robin
					// over the servers
					for i := range rt.during {
						at := floodFor/4 + time.Duration(i)*(floodFor/2)/time.Duration(rt.during)
						runs = append(runs, timed{at, loadtest.LoadConfig{
							Targets: urls[i%len(urls):][:1], Callers: loadtest.NewCallers(1), Clients: 1, Requests: 1, Duration: floodFor, Timeout: time.Minute,
							Request: formFrom(rt.path, func(int) string { return freshV4("198.18.%d.%d")(i) }, rt.victim),
						}})
					}
					res := runTimed(t, runs...)
					flood, bob := res[0], res[1]
					during := map[int]int{}
					for _, r := range res[2:] {
						for code, n := range r.Status {
							during[code] += n
						}
						if r.Requests > sumStatus(r) {
							during[0] += r.Requests - sumStatus(r)
						}
					}
					reachedDuring := 0
					for _, s := range servers {
						reachedDuring += rt.reached(s)
					}
					d, figures := since(before, counters(servers[0]))
					after := run(t, loadtest.LoadConfig{
						Targets: urls, Callers: loadtest.NewCallers(1), Clients: 8, Requests: rt.after, Duration: time.Minute,
						Request: formFrom(rt.path, freshV4("198.19.%d.%d"), rt.victim),
					})
					reached := 0
					for _, s := range servers {
						reached += rt.reached(s)
					}
					t.Logf("flood of %s: %d requests from %d connections, %v; the store's calls and the limiters' decisions meanwhile: %s",
						rt.path, flood.Requests, floodClients*len(urls), flood.Status, figures)
					t.Logf("bob's correct sign-ins during the flood: %d answered %v, errors %v", bob.Requests, bob.Status, bob.Errors)
					t.Logf("alice: %d during the flood answered %v, %d after it answered %v; %d %s during the flood, %d in all (budget %d)",
						rt.during, during, rt.after, after.Status, reachedDuring, rt.what, reached, rt.budget)
					if saturated(d) == 0 {
						t.Errorf("no store call waited during the flood: the scenario tests nothing")
					}
					if reached > rt.budget {
						t.Errorf("%d %s (%d during the flood, %d after it), want at most the budget of %d",
							reached, rt.what, reachedDuring, reached-reachedDuring, rt.budget)
					}
					// His device's calls wait in a queue of their own, which
					// the flood's never join.
					if o := others(bob, http.StatusOK); len(o) > 0 || bob.Requests == 0 {
						t.Errorf("bob's correct sign-ins with his device cookie during the flood: %d answered %v, want each 200; other statuses %v (0 is no answer); errors %v",
							bob.Requests, bob.Status, o, bob.Errors)
					}
				})
			}
		})
	}
}

// A full store is no free budget per instance. Two servers on PostgreSQL
// and on Redis, RATE_LIMIT_MAX_ENTRIES=1000: first 1,100 GET /health from
// fresh IPv6 /64s fill the store; then 80 wrong passwords for alice from 80
// new addresses, round robin over the servers: at most 20 reach the
// password check on both together; then 10 reset requests for her address
// from new addresses: at most 3 codes go to it. Then 600 sign-ins, each
// with a fresh account, password and /64, fill what each server's login
// limiter can count alone (its memory, bounded by the store's bound); then
// bob signs in with his right password from new addresses, his keys new
// too. Neither the flood nor bob is ever answered 503: a new key counted
// alone is admitted or refused (429), never answered as a store outage.
func TestFullStoreFleet(t *testing.T) {
	servicetest.Long(t)
	const (
		maxEntries = 1000
		flood      = 1100
		guesses    = 80
		resets     = 10
		// more sign-ins with fresh keys (6 each) than two memories of
		// maxEntries can count alone
		loginFlood = 600
		bobs       = 10
	)
	for _, kind := range []string{"postgres", "redis"} {
		t.Run(kind, func(t *testing.T) {
			servers, urls := startFleet(t, 2, storeEnv(t, kind,
				"RATE_LIMIT_MAX_ENTRIES="+strconv.Itoa(maxEntries), "TRUSTED_PROXIES=127.0.0.1/32"))
			res := run(t, loadtest.LoadConfig{
				Targets: urls, Callers: loadtest.NewCallers(1), Clients: 8, Requests: flood, Duration: time.Minute,
				Request: healthFrom(freshNet),
			})
			n := liveEntries(t, servers[0])
			t.Logf("the flood of %d GET /health: %v; the store holds %d live entries of at most %d", flood, res.Status, n, maxEntries)
			if n < maxEntries {
				t.Fatalf("the flood left the store at %d of %d entries: not full, the scenario tests nothing", n, maxEntries)
			}
			// bob signs in once in the full store, and keeps his device
			device := deviceOf(t, servers[0], "bob", "battery-staple")
			before := counters(servers[0])
			guessed := run(t, loadtest.LoadConfig{
				Targets: urls, Callers: loadtest.NewCallers(1), Clients: 8, Requests: guesses, Duration: time.Minute,
				Request: formFrom("/login", freshV4("203.0.%d.%d"), wrongFor("alice")),
			})
			reset := run(t, loadtest.LoadConfig{
				Targets: urls, Callers: loadtest.NewCallers(1), Clients: 8, Requests: resets, Duration: time.Minute,
				Request: formFrom("/password-reset", freshV4("198.51.%d.%d"),
					func(int) url.Values { return url.Values{"email": {aliceAddress}} }),
			})
			_, figures := since(before, counters(servers[0]))
			checks, codes := 0, 0
			for i, s := range servers {
				c, k := s.App.PasswordChecksFor("alice"), s.App.CodesSent(aliceAddress)
				t.Logf("server %d: %d of alice's wrong passwords reached the check, %d codes sent", i+1, c, k)
				checks, codes = checks+c, codes+k
			}
			t.Logf("in the full store: %d wrong passwords answered %v, %d resets answered %v; %d checks in all (budget %d), %d codes (budget %d); meanwhile %s",
				guesses, guessed.Status, resets, reset.Status, checks, accountFailures, codes, resetPerDestination, figures)
			if checks > accountFailures {
				t.Errorf("%d of alice's %d wrong passwords reached the password check on two servers, want at most the budget of %d", checks, guesses, accountFailures)
			}
			if codes > resetPerDestination {
				t.Errorf("%d reset codes went to %s from two servers, want at most the budget of %d", codes, aliceAddress, resetPerDestination)
			}

			before = counters(servers[0])
			fresh := run(t, loadtest.LoadConfig{
				Targets: urls, Callers: loadtest.NewCallers(1), Clients: 8, Requests: loginFlood, Duration: time.Minute,
				Request: formFrom("/login", func(i int) string { return freshNet(flood + i) }, func(i int) url.Values {
					return url.Values{"username": {"u" + strconv.Itoa(i)}, "password": {"x" + strconv.Itoa(i)}}
				}),
			})
			bob := run(t, loadtest.LoadConfig{
				Targets: urls, Callers: loadtest.NewCallers(1), Clients: 1, Requests: bobs, Duration: time.Minute,
				Request: formFrom("/login", freshV4("10.9.%d.%d"), bobSignsIn),
			})
			_, figures = since(before, counters(servers[0]))
			t.Logf("%d sign-ins with fresh keys answered %v; then bob's %d correct sign-ins from new addresses answered %v; meanwhile %s",
				loginFlood, fresh.Status, bobs, bob.Status, figures)
			if fresh.Status[http.StatusUnauthorized] == loginFlood {
				t.Errorf("every sign-in with fresh keys was counted alone: the limiters' memories never filled, the scenario tests nothing")
			}
			if o := others(fresh, http.StatusUnauthorized, http.StatusTooManyRequests); len(o) > 0 {
				t.Errorf("sign-ins with fresh keys in a full store: %v, want each 401 (counted alone) or 429 (no room to count it), never another status (%v; 0 is no answer)", fresh.Status, o)
			}
			if o := others(bob, http.StatusOK, http.StatusTooManyRequests); len(o) > 0 {
				t.Errorf("bob's correct sign-ins with new keys in a full store: %v, want each 200 or 429, never another status (%v; 0 is no answer)", bob.Status, o)
			}
			for i := range bobs { // strangers filled every memory; bob's own device still signs in
				body := bobSignsIn(i).Encode()
				res, got := demotest.PostBody(t, urls[i%len(urls)]+"/login", freshV4("10.10.%d.%d")(i), "application/x-www-form-urlencoded", body, device)
				if res.StatusCode != http.StatusOK {
					t.Fatalf("bob's sign-in %d with his device cookie, the store and memories full: %d (%s), want 200", i+1, res.StatusCode, got)
				}
			}
		})
	}
}

// withCookie returns request, each request it builds carrying c.
func withCookie(request func(context.Context, string, loadtest.Caller, int) (*http.Request, error), c *http.Cookie) func(context.Context, string, loadtest.Caller, int) (*http.Request, error) {
	return func(ctx context.Context, target string, caller loadtest.Caller, i int) (*http.Request, error) {
		req, err := request(ctx, target, caller, i)
		if err == nil {
			req.AddCookie(c)
		}
		return req, err
	}
}

// deviceOf signs account in on s with password and returns the device
// cookie the guard gives.
func deviceOf(t *testing.T, s *demotest.Server, account, password string) *http.Cookie {
	t.Helper()
	body := url.Values{"username": {account}, "password": {password}}.Encode()
	res, _ := demotest.PostBody(t, s.URL+"/login", "192.0.2.77", "application/x-www-form-urlencoded", body)
	for _, c := range res.Cookies() {
		if c.Name == middleware.DefaultDeviceCookie && res.StatusCode == http.StatusOK {
			return c
		}
	}
	t.Fatalf("%s's sign-in: %d, no device cookie", account, res.StatusCode)
	return nil
}

// Saturation is not an outage. One server on PostgreSQL and on Redis,
// RATE_LIMIT_HEALTH_PER_MINUTE=3: while 1,200 connections flood POST /login
// with fresh keys, and once store calls wait for the guard, 3 bursts of
// 300 concurrent GET /health, each burst from one address of its own, are
// each answered exactly 3 × 200 and 297 × 429: a store too busy to answer
// at once never lets the health route through uncounted (its policy,
// Allow, is for an outage). Once more on PostgreSQL
// behind a link that holds every chunk of bytes 20 ms each way, where calls
// the guard lets in wait for one of the driver's pooled connections: that
// wait is overload too.
func TestSaturationIsNotOutage(t *testing.T) {
	servicetest.Long(t)
	const (
		budget  = 3
		burst   = 300
		bursts  = 3
		clients = 1200
		// the bursts start once the flood has store calls waiting, which
		// it must within this
		saturateWithin = 10 * time.Second
	)
	for _, tc := range []struct {
		name, store string
		// slow, when not zero, puts PostgreSQL behind a fault proxy that
		// holds every chunk of bytes this long each way, so that calls
		// wait for one of the driver's connections as the guard lets more
		// in than its pool holds
		slow time.Duration
	}{
		{"postgres", "postgres", 0},
		{"postgres, slow link", "postgres", 20 * time.Millisecond},
		{"redis", "redis", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := []string{"TRUSTED_PROXIES=127.0.0.1/32", "RATE_LIMIT_HEALTH_PER_MINUTE=" + strconv.Itoa(budget)}
			env := storeEnv(t, tc.store, vars...)
			var p *faultproxy.Proxy
			if tc.slow > 0 {
				p, env["DATABASE_URL"] = proxied(t, env["DATABASE_URL"])
			}
			servers, urls := startFleet(t, 1, env)
			if p != nil {
				p.Delay(tc.slow)
			}
			before := counters(servers[0])
			var flood *loadtest.Result
			var err error
			var wg sync.WaitGroup
			defer wg.Wait()
			ctx, stop := context.WithCancel(context.Background())
			defer stop() // before the wait, however the test ends
			wg.Go(func() {
				// bounded by the bursts below, which stop it, and at most 30 s
				flood, err = loadtest.Run(ctx, loadtest.LoadConfig{
					Targets: urls, Callers: loadtest.NewCallers(1), Clients: clients, Duration: 30 * time.Second, Requests: 1 << 22,
					Request: formFrom("/login", freshNet, func(i int) url.Values {
						return url.Values{"username": {"u" + strconv.Itoa(i)}, "password": {"x" + strconv.Itoa(i)}}
					}),
				})
			})
			for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
				d, _ := since(before, counters(servers[0]))
				if saturated(d) > 0 {
					t.Logf("store calls waited %v into the flood", time.Since(start).Round(10*time.Millisecond))
					break
				}
				if time.Since(start) > saturateWithin {
					t.Fatalf("no store call waited within %v of the flood: the scenario tests nothing", saturateWithin)
				}
			}
			results := make([]*loadtest.Result, bursts)
			for b := range bursts {
				results[b] = run(t, loadtest.LoadConfig{
					Targets: urls, Callers: loadtest.NewCallers(1), Clients: burst, Requests: burst, Duration: time.Minute,
					Request: healthFrom(one(fmt.Sprintf("192.0.2.%d", 200+b))),
				})
			}
			stop()
			wg.Wait()
			if err != nil {
				t.Fatal(err)
			}
			_, figures := since(before, counters(servers[0]))
			t.Logf("flood of /login from %d connections: %d requests answered %v; meanwhile %s", clients, flood.Requests, flood.Status, figures)
			for b, res := range results {
				t.Logf("burst %d of %d GET /health from one address: %v", b+1, burst, res.Status)
				if res.Status[http.StatusOK] != budget || res.Status[http.StatusTooManyRequests] != burst-budget {
					t.Errorf("burst %d of %d concurrent GET /health from one address during the flood: %v, want exactly %d × 200 and %d × 429 (other statuses %v; 0 is no answer)",
						b+1, burst, res.Status, budget, burst-budget, others(res, http.StatusOK, http.StatusTooManyRequests))
				}
			}
		})
	}
}

// A Reset through one instance reaches the fleet. Two servers, A and B, on
// PostgreSQL and on Redis: alice's account budget is spent by 20 wrong
// passwords from 20 addresses, split over both, and each server then
// refuses her right password once (so each remembers her key spent). Her
// keys (the cap's and the delay's among them) are reset through A's
// sign-in limiter; within 2 s B admits her
// right password from a new address (asked every 100 ms, each time from an
// address of its own), and then A does too.
func TestResetReachesFleet(t *testing.T) {
	const (
		within = 2 * time.Second
		every  = 100 * time.Millisecond
	)
	spender := func(i int) string { return fmt.Sprintf("198.51.100.%d", i+1) }
	for _, kind := range []string{"postgres", "redis"} {
		t.Run(kind, func(t *testing.T) {
			servers, _ := startFleet(t, 2, storeEnv(t, kind, "TRUSTED_PROXIES=127.0.0.1/32"))
			a, b := servers[0], servers[1]
			login := func(s *demotest.Server, ip string) (*http.Response, string) {
				return demotest.Post(t, s.URL+"/login", ip, aliceSignsIn(0))
			}
			for i := range accountFailures {
				if res, body := demotest.Post(t, servers[i%2].URL+"/login", spender(i), wrongFor("alice")(i)); res.StatusCode != http.StatusUnauthorized {
					t.Fatalf("alice's wrong password %d: %d %s, want 401", i+1, res.StatusCode, body)
				}
			}
			for i, s := range servers {
				if res, body := login(s, fmt.Sprintf("192.0.2.%d", 10+i)); res.StatusCode != http.StatusTooManyRequests {
					t.Fatalf("alice's right password on server %d once her account budget was spent: %d %s, want 429", i+1, res.StatusCode, body)
				}
			}

			ctx := context.Background()
			l := a.App.Login.Limiter()
			// The account's failures, its consecutive failures and the delay
			// its 20th failure imposed (RATE_LIMIT_LOGIN_DELAY_AFTER).
			keys := []string{keyfunc.JoinKeys("account", "alice"), keyfunc.JoinKeys("consecutive", "alice"), keyfunc.JoinKeys("delay", "alice")}
			for i := range accountFailures {
				keys = append(keys, keyfunc.JoinKeys("account-ip", "alice", spender(i)), keyfunc.JoinKeys("ip", spender(i)))
			}
			for i := range servers {
				ip := fmt.Sprintf("192.0.2.%d", 10+i)
				keys = append(keys, keyfunc.JoinKeys("account-ip", "alice", ip), keyfunc.JoinKeys("ip", ip))
			}
			for _, k := range keys {
				if err := l.Reset(ctx, k); err != nil {
					t.Fatalf("reset through server A: %v", err)
				}
			}
			reset := time.Now()

			// asked every 100 ms, each time from an address of its own, until
			// B admits her or 2 s have passed (and at most 30 times)
			var last string
			var took time.Duration
			polls, admitted := 0, false
			for polls < 30 {
				res, _ := login(b, fmt.Sprintf("192.0.2.%d", 100+polls))
				polls++
				took = time.Since(reset)
				if res.StatusCode == http.StatusOK {
					admitted = took <= within
					last = "200"
					break
				}
				last = fmt.Sprintf("%d, Retry-After %q", res.StatusCode, res.Header.Get("Retry-After"))
				if took > within {
					break
				}
				time.Sleep(every)
			}
			resA, bodyA := login(a, "192.0.2.250")
			t.Logf("after the reset through A: B asked %d times over %v, last answered %s (admitted within %v: %v); then A answered %d",
				polls, took.Round(time.Millisecond), last, within, admitted, resA.StatusCode)
			if !admitted {
				t.Errorf("server B did not admit alice's right password within %v of a Reset of her keys through server A (%d tries over %v, last answer %s)",
					within, polls, took.Round(time.Millisecond), last)
			}
			if resA.StatusCode != http.StatusOK {
				t.Errorf("server A, through which her keys were reset, answered alice's right password %d %s, want 200", resA.StatusCode, bodyA)
			}
		})
	}
}
