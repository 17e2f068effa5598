package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/gatecount/gatecount/examples/internal/demotest"
	"github.com/gatecount/gatecount/internal/faultproxy"
	"github.com/gatecount/gatecount/internal/loadtest"
	"github.com/gatecount/gatecount/internal/servicetest"
	"github.com/gatecount/gatecount/store/postgres"
	redisstore "github.com/gatecount/gatecount/store/redis"
)

// The tests of this file press on the limits as an attacker would: bursts
// of hundreds of concurrent requests, floods of keys, outages, and counts
// of what reached the handler. Every one asserts counts, never timings;
// every loop is bounded in requests and in time.

// migratedPostgres returns the test PostgreSQL's URL, its schema migrated.
func migratedPostgres(t *testing.T) string {
	t.Helper()
	u := servicetest.PostgresURL(t)
	migrate(t, u)
	return u
}

// migrate migrates the PostgreSQL database at u.
func migrate(t *testing.T, u string) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
}

// storeEnv returns the environment that puts a server's counts in a store
// of kind ("memory", "postgres", "sqlite" or "redis") under a fresh secret,
// plus the variables of extra, as KEY=VALUE. Servers started with one
// result share their counts.
func storeEnv(t *testing.T, kind string, extra ...string) map[string]string {
	t.Helper()
	env := map[string]string{"GATECOUNT_SECRET": demotest.NewSecret()}
	switch kind {
	case "memory":
		env["RATE_LIMIT_STORE"] = "memory"
	case "postgres":
		env["DATABASE_URL"] = migratedPostgres(t)
	case "sqlite":
		env["DATABASE_URL"] = "sqlite:" + filepath.Join(t.TempDir(), "gatecount.db")
	case "redis":
		env["RATE_LIMIT_STORE_URL"] = servicetest.RedisURL(t)
	default:
		t.Fatalf("unknown store %q", kind)
	}
	for _, kv := range extra {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return env
}

// formFrom returns a LoadConfig.Request that posts form to path from the
// client at the address ip(i) tells, through the trusted loopback proxy.
func formFrom(path string, ip func(i int) string, form func(i int) url.Values) func(context.Context, string, loadtest.Caller, int) (*http.Request, error) {
	return func(ctx context.Context, target string, _ loadtest.Caller, i int) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, target+path, strings.NewReader(form(i).Encode()))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Forwarded-For", ip(i))
		return req, nil
	}
}

// healthFrom returns a LoadConfig.Request for GET /health from the address
// ip(i) tells, through the trusted loopback proxy.
func healthFrom(ip func(i int) string) func(context.Context, string, loadtest.Caller, int) (*http.Request, error) {
	return func(ctx context.Context, target string, _ loadtest.Caller, i int) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target+"/health", nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("X-Forwarded-For", ip(i))
		return req, nil
	}
}

// one returns an address function that always answers ip.
func one(ip string) func(int) string { return func(int) string { return ip } }

// wrongFor returns a form function: a wrong password for user.
func wrongFor(user string) func(int) url.Values {
	return func(int) url.Values { return url.Values{"username": {user}, "password": {"wrong"}} }
}

// run runs c and fails the test on an error.
func run(t *testing.T, c loadtest.LoadConfig) *loadtest.Result {
	t.Helper()
	res, err := loadtest.Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// runAll runs every config at once, and fails the test on an error.
func runAll(t *testing.T, cs ...loadtest.LoadConfig) []*loadtest.Result {
	t.Helper()
	out := make([]*loadtest.Result, len(cs))
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { out[i], errs[i] = loadtest.Run(context.Background(), c) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// others returns the statuses of res other than want, with their counts.
func others(res *loadtest.Result, want ...int) map[int]int {
	out := map[int]int{}
	for s, n := range res.Status {
		if !containsInt(want, s) {
			out[s] = n
		}
	}
	if failed := res.Requests - sumStatus(res); failed > 0 {
		out[0] = failed // requests that got no answer at all
	}
	return out
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

func sumStatus(res *loadtest.Result) int {
	n := 0
	for _, c := range res.Status {
		n += c
	}
	return n
}

// cluster starts n example servers as processes (built without the race
// detector, as deployed) over the store kind under a fresh secret, with
// callers as API_KEYS, budget as RATE_LIMIT_EXECUTE_PER_MINUTE and the
// variables of env, and stops them when the test ends.
func cluster(t *testing.T, kind loadtest.Store, n int, callers []loadtest.Caller, budget int, env ...string) *loadtest.Cluster {
	t.Helper()
	c := loadtest.ClusterConfig{Bin: serverBin(t), Dir: t.TempDir(), Servers: n, Store: kind, Callers: callers, Budget: budget, Env: env}
	switch kind {
	case loadtest.Postgres:
		c.DatabaseURL = servicetest.PostgresURL(t)
	case loadtest.Redis:
		c.RedisURL = servicetest.RedisURL(t)
	}
	return startCluster(t, c)
}

// startCluster starts the servers c describes and stops them when the test
// ends.
func startCluster(t *testing.T, c loadtest.ClusterConfig) *loadtest.Cluster {
	t.Helper()
	cl, err := loadtest.StartCluster(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cl.Close(); err != nil {
			t.Error(err)
		}
	})
	return cl
}

// A healthy store never answers a burst "unavailable": two servers on one
// store, 3 rounds of 500 concurrent POST /execute for one fresh caller,
// split over both (budget 30), are answered exactly 30 × 2xx and 470 × 429
// every round, no 503.
func TestBurstHealthyStore(t *testing.T) {
	const rounds, n, budget = 3, 500, 30
	for _, kind := range []loadtest.Store{loadtest.Postgres, loadtest.SQLite, loadtest.Redis} {
		t.Run(string(kind), func(t *testing.T) {
			callers := loadtest.NewCallers(rounds)
			cl := cluster(t, kind, 2, callers, budget)
			for r, c := range callers {
				res, err := loadtest.Burst(context.Background(), cl.URLs(), c, n)
				if err != nil {
					t.Fatal(err)
				}
				if err := res.CheckBurst(loadtest.Expect{Budget: budget, Shared: true}, n); err != nil {
					t.Errorf("round %d: %v", r+1, err)
				}
			}
		})
	}
}

// Concurrency never lifts a limit: with RATE_LIMIT_HEALTH_PER_MINUTE=3 on
// PostgreSQL, 500 concurrent GET /health from one address are answered
// exactly 3 × 200 and 497 × 429.
func TestBurstHealthPerIP(t *testing.T) {
	const n, budget = 500, 3
	callers := loadtest.NewCallers(1)
	cl := cluster(t, loadtest.Postgres, 1, callers, 30, "RATE_LIMIT_HEALTH_PER_MINUTE="+strconv.Itoa(budget), "TRUSTED_PROXIES=127.0.0.1/32")
	res := run(t, loadtest.LoadConfig{
		Targets:  cl.URLs(),
		Callers:  callers,
		Clients:  n,
		Requests: n,
		Duration: time.Minute,
		// not the loopback address, whose budget the start's own GET
		// /health spent from
		Request: healthFrom(one("192.0.2.33")),
	})
	if err := res.CheckBurst(loadtest.Expect{Budget: budget, Shared: true}, n); err != nil {
		t.Error(err)
	}
}

// A key flood hands out no fresh budget (memory store and PostgreSQL,
// RATE_LIMIT_MAX_ENTRIES=1000; and two servers on PostgreSQL and on Redis,
// the traffic split over both): 15 wrong passwords for alice and a reset
// code for her address, then 1,100 GET /health from fresh IPv6 networks
// fill the store; then alice's wrong passwords and reset requests come
// from new addresses, whose keys the full store cannot hold. Over the
// whole scenario at most 20 of alice's wrong passwords reach the password
// check (RATE_LIMIT_LOGIN_ACCOUNT_FAILURES) and at most 3 reset codes go to
// her address (RATE_LIMIT_RESET_PER_DESTINATION). And a new address's GET
// /health, which the full store cannot hold either, is still counted: at
// most 3 of its 10 are answered 200 (RATE_LIMIT_HEALTH_PER_MINUTE=3).
func TestKeyFlood(t *testing.T) {
	const (
		maxEntries     = 1000
		flood          = 1100
		accountBudget  = 20 // RATE_LIMIT_LOGIN_ACCOUNT_FAILURES, per hour
		resetBudget    = 3  // RATE_LIMIT_RESET_PER_DESTINATION, per hour
		guessesBefore  = 15
		guessesAfter   = 60
		resetsAfter    = 10
		healthBudget   = 3 // RATE_LIMIT_HEALTH_PER_MINUTE
		healthAfter    = 10
		aliceAddress   = "alice@example.com"
		floodClients   = 8
		attackClients  = 8
		resetClientsIP = "198.51.100.%d"
	)
	for _, tc := range []struct {
		name, store string
		servers     int
	}{
		{"memory", "memory", 1},
		{"postgres", "postgres", 1},
		{"postgres, two servers", "postgres", 2},
		{"redis, two servers", "redis", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := storeEnv(t, tc.store,
				"RATE_LIMIT_MAX_ENTRIES="+strconv.Itoa(maxEntries), "TRUSTED_PROXIES=127.0.0.1/32",
				"RATE_LIMIT_HEALTH_PER_MINUTE="+strconv.Itoa(healthBudget))
			var servers []*demotest.Server
			var urls []string
			for range tc.servers {
				s := demotest.Start(t, routes, env)
				servers, urls = append(servers, s), append(urls, s.URL)
			}
			for i := range guessesBefore {
				if res, body := demotest.Post(t, urls[i%len(urls)]+"/login", fmt.Sprintf("192.0.2.%d", i+1), wrongFor("alice")(i)); res.StatusCode != http.StatusUnauthorized {
					t.Fatalf("alice's wrong password %d before the flood: %d %s", i+1, res.StatusCode, body)
				}
			}
			if res, _ := demotest.Post(t, urls[0]+"/password-reset", "192.0.2.100", url.Values{"email": {aliceAddress}}); res.StatusCode != http.StatusAccepted {
				t.Fatalf("reset before the flood: %d", res.StatusCode)
			}

			res := run(t, loadtest.LoadConfig{
				Targets: urls, Callers: loadtest.NewCallers(1), Clients: floodClients, Requests: flood, Duration: time.Minute,
				Request: healthFrom(func(i int) string { return fmt.Sprintf("2001:db8:f1:%x::1", i) }),
			})
			n := liveEntries(t, servers[0])
			t.Logf("the flood of %d /health: %v; the store holds %d live entries of at most %d", flood, res.Status, n, maxEntries)
			if n < maxEntries {
				t.Fatalf("the flood left the store at %d of %d entries: not full, the scenario tests nothing", n, maxEntries)
			}

			// to one server: each counts a key the store cannot hold alone
			health := run(t, loadtest.LoadConfig{
				Targets: urls[:1], Callers: loadtest.NewCallers(1), Clients: 1, Requests: healthAfter, Duration: time.Minute,
				Request: healthFrom(one("2001:db8:ffff::1")),
			})
			if n := health.Status[http.StatusOK]; n > healthBudget {
				t.Errorf("%d GET /health from one new address in the full store: %v, want at most the budget of %d × 200: a full store let requests through uncounted",
					healthAfter, health.Status, healthBudget)
			}

			guesses := run(t, loadtest.LoadConfig{
				Targets: urls, Callers: loadtest.NewCallers(1), Clients: attackClients, Requests: guessesAfter, Duration: time.Minute,
				Request: formFrom("/login", func(i int) string { return fmt.Sprintf("203.0.113.%d", i+1) }, wrongFor("alice")),
			})
			resets := run(t, loadtest.LoadConfig{
				Targets: urls, Callers: loadtest.NewCallers(1), Clients: attackClients, Requests: resetsAfter, Duration: time.Minute,
				Request: formFrom("/password-reset", func(i int) string { return fmt.Sprintf(resetClientsIP, i+1) },
					func(int) url.Values { return url.Values{"email": {aliceAddress}} }),
			})
			checks, codes := 0, 0
			for _, s := range servers {
				checks += s.App.PasswordChecks()
				codes += s.App.CodesSent(aliceAddress)
			}
			t.Logf("after the flood: %d GET /health from one new address answered %v; %d wrong passwords from new addresses answered %v; %d resets answered %v; %d of alice's wrong passwords reached the check in all, %d codes sent",
				healthAfter, health.Status, guessesAfter, guesses.Status, resetsAfter, resets.Status, checks, codes)
			if checks > accountBudget {
				t.Errorf("%d of alice's wrong passwords reached the password check (%d before the flood, %d of %d after), want at most the budget of %d",
					checks, guessesBefore, checks-guessesBefore, guessesAfter, accountBudget)
			}
			if codes > resetBudget {
				t.Errorf("%d reset codes went to %s, want at most the budget of %d", codes, aliceAddress, resetBudget)
			}
		})
	}
}

// proxied starts a fault proxy in front of the PostgreSQL server of the
// URL direct, closed when the test's servers are, and returns it with the
// URL that reaches the database through it.
func proxied(t *testing.T, direct string) (*faultproxy.Proxy, string) {
	t.Helper()
	p, through, err := faultproxy.ForURL(direct, "5432")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() }) // registered first: runs after the servers stop
	return p, through
}

// liveEntries returns the live entries in the server's store: as its
// Stats tell; for PostgreSQL, counted in the database under the store's
// secret; for Redis, counted in the live indexes of its secret's tags.
func liveEntries(t *testing.T, s *demotest.Server) int {
	t.Helper()
	if st := s.App.Store.Store.Stats(); st.Entries >= 0 {
		return st.Entries
	}
	ctx := context.Background()
	switch b := s.App.Store.Store.Backend().(type) {
	case *postgres.Backend:
		pool, err := pgxpool.New(ctx, s.App.Config.DatabaseURL)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM gatecount_entries WHERE fingerprint = $1 AND expires_at > now()`, b.Fingerprint()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	case *redisstore.Backend:
		opts, err := goredis.ParseURL(s.App.Config.StoreURL)
		if err != nil {
			t.Fatal(err)
		}
		c := goredis.NewClient(opts)
		defer c.Close()
		tags, err := c.SMembers(ctx, "gatecount:{"+b.Fingerprint()+"}:tags").Result()
		if err != nil {
			t.Fatal(err)
		}
		now := strconv.FormatInt(time.Now().UnixMilli(), 10)
		n := 0
		for _, tag := range tags {
			k, err := c.ZCount(ctx, "gatecount:{"+tag+"}:"+b.Fingerprint()+":live", "("+now, "+inf").Result()
			if err != nil {
				t.Fatal(err)
			}
			n += int(k)
		}
		return n
	}
	t.Fatalf("the %s store tells no count of its entries", s.App.Store.Kind)
	return 0
}

// A store outage after a key was refused hands out no fresh budget: on
// PostgreSQL through a fault proxy, alice's wrong passwords from one
// address are refused once her 5 failures there are spent, and a caller's
// POST /execute once its 30 are; then the database is black-holed (or its
// connections cut), and every further attempt of both is still answered
// 429: none reaches the password check or the work. Another caller, who
// had spent 25 of the 30, has its work done at most 5 more times during
// the outage: counting in process memory goes on from the last count this
// instance knew, not from zero.
func TestOutageAfterRefusal(t *testing.T) {
	const (
		executeBudget = 30
		partlySpent   = 25 // of the other caller's execute budget
		rounds, per   = 2, 10
		attacker      = "192.0.2.50"
	)
	direct := migratedPostgres(t)
	for _, tc := range []struct {
		name  string
		fault func(*faultproxy.Proxy)
	}{
		{"black hole", (*faultproxy.Proxy).BlackHole},
		{"cut", (*faultproxy.Proxy).Cut},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, dbURL := proxied(t, direct)
			callers := loadtest.NewCallers(2)
			spent, partial := callers[0], callers[1]
			s := demotest.Start(t, routes, map[string]string{
				"DATABASE_URL":                  dbURL,
				"GATECOUNT_SECRET":              demotest.NewSecret(),
				"TRUSTED_PROXIES":               "127.0.0.1/32",
				"API_KEYS":                      loadtest.APIKeys(callers),
				"RATE_LIMIT_EXECUTE_PER_MINUTE": strconv.Itoa(executeBudget),
			})
			for i := range accountIPFailures + 1 {
				want := http.StatusUnauthorized
				if i == accountIPFailures {
					want = http.StatusTooManyRequests
				}
				if res, body := demotest.Post(t, s.URL+"/login", attacker, wrongFor("alice")(i)); res.StatusCode != want {
					t.Fatalf("alice's wrong password %d before the outage: %d %s, want %d", i+1, res.StatusCode, body, want)
				}
			}
			for i := range executeBudget + 1 {
				want := http.StatusOK
				if i == executeBudget {
					want = http.StatusTooManyRequests
				}
				if res, body := demotest.Do(t, "POST", s.URL+"/execute", spent.Token); res.StatusCode != want {
					t.Fatalf("execute %d before the outage: %d %s, want %d", i+1, res.StatusCode, body, want)
				}
			}
			for i := range partlySpent {
				if res, body := demotest.Do(t, "POST", s.URL+"/execute", partial.Token); res.StatusCode != http.StatusOK {
					t.Fatalf("the other caller's execute %d before the outage: %d %s", i+1, res.StatusCode, body)
				}
			}
			checks := s.App.PasswordChecks()

			tc.fault(p)
			for r := range rounds {
				res := runAll(t,
					loadtest.LoadConfig{
						Targets: []string{s.URL}, Callers: callers[:1], Clients: per, Requests: per, Duration: time.Minute,
						Request: formFrom("/login", one(attacker), wrongFor("alice")),
					},
					loadtest.LoadConfig{Targets: []string{s.URL}, Callers: []loadtest.Caller{spent}, Clients: per, Requests: per, Duration: time.Minute},
					loadtest.LoadConfig{Targets: []string{s.URL}, Callers: []loadtest.Caller{partial}, Clients: per, Requests: per, Duration: time.Minute},
				)
				logins, executes := res[0], res[1]
				if o := others(logins, http.StatusTooManyRequests); len(o) > 0 {
					t.Errorf("round %d of the outage: alice's refused sign-in answered %v, want only 429 (other statuses %v; 0 is no answer)", r+1, logins.Status, o)
				}
				if o := others(executes, http.StatusTooManyRequests); len(o) > 0 {
					t.Errorf("round %d of the outage: the spent caller's execute answered %v, want only 429 (other statuses %v; 0 is no answer)", r+1, executes.Status, o)
				}
				t.Logf("round %d of the outage: alice's sign-ins %v; the spent caller's execute %v; the other caller's %v", r+1, logins.Status, executes.Status, res[2].Status)
			}
			p.Restore()
			if n := s.App.PasswordChecks() - checks; n > 0 {
				t.Errorf("during the outage %d of alice's refused wrong passwords reached the password check: a fresh budget", n)
			}
			if n := s.App.Executions(spent.Name); n != executeBudget {
				t.Errorf("the spent caller's work done %d times in all, want the budget of %d", n, executeBudget)
			}
			// Local counting goes on from what this instance knew of the key.
			if n := s.App.Executions(partial.Name); n > executeBudget {
				t.Errorf("the other caller's work done %d times in all (%d before the outage, %d during it), over the budget of %d: counting in the outage started again from zero",
					n, partlySpent, n-partlySpent, executeBudget)
			}
		})
	}
}

// One limited client slows no one else: while one address floods POST
// /login with wrong passwords for alice from 100 connections for 4 s (on
// PostgreSQL, and on Redis), every correct sign-in of bob from other
// addresses answers 200 and every POST /execute 200: no 503.
func TestFloodSparesBystanders(t *testing.T) {
	const (
		floodFor     = 4 * time.Second
		floodClients = 100
	)
	for _, kind := range []loadtest.Store{loadtest.Postgres, loadtest.Redis} {
		t.Run(string(kind), func(t *testing.T) {
			callers := loadtest.NewCallers(1)
			cl := cluster(t, kind, 1, callers, 1000000, "TRUSTED_PROXIES=127.0.0.1/32")
			res := runAll(t,
				loadtest.LoadConfig{
					Targets: cl.URLs(), Callers: callers, Clients: floodClients, Duration: floodFor, Requests: 1 << 20,
					Request: formFrom("/login", one("203.0.113.66"), wrongFor("alice")),
				},
				// each of bob's sign-ins from an address of its own, so that
				// his own attempts never spend an address's budget
				loadtest.LoadConfig{
					Targets: cl.URLs(), Callers: callers, Clients: 2, Duration: floodFor, Requests: 20000,
					Request: formFrom("/login", func(i int) string { return fmt.Sprintf("10.%d.%d.%d", 1+i>>16&0xff, i>>8&0xff, i&0xff) },
						func(int) url.Values { return url.Values{"username": {"bob"}, "password": {"battery-staple"}} }),
				},
				loadtest.LoadConfig{Targets: cl.URLs(), Callers: callers, Clients: 2, Duration: floodFor, Requests: 20000},
			)
			flood, bob, execute := res[0], res[1], res[2]
			t.Logf("flood of /login: %d requests, %v; bob's sign-ins %v; execute %v", flood.Requests, flood.Status, bob.Status, execute.Status)
			if o := others(bob, http.StatusOK); len(o) > 0 || bob.Requests == 0 {
				t.Errorf("bob's correct sign-ins during the flood: %d answered %v, want every one 200 (other statuses %v; 0 is no answer)", bob.Requests, bob.Status, o)
			}
			if o := others(execute, http.StatusOK); len(o) > 0 || execute.Requests == 0 {
				t.Errorf("POST /execute during the flood: %d answered %v, want every one 200 (other statuses %v; 0 is no answer)", execute.Requests, execute.Status, o)
			}
			if n := flood.Status[http.StatusUnauthorized]; n > accountIPFailures {
				t.Errorf("%d of the flood's wrong passwords were checked (answered 401), want at most %d", n, accountIPFailures)
			}
		})
	}
}

// accountIPFailures is the default RATE_LIMIT_LOGIN_ACCOUNT_IP_FAILURES.
const accountIPFailures = 5

// A refused key costs no store call: once an address's budget is spent,
// 3,000 more attempts from it cost at most a tenth as many transactions in
// PostgreSQL as attempts (an attempt the store answers costs at least
// one), counted by pg_stat_database on the real server, in a database of
// this test's own (the test database's name with "_xact" added), so that no
// other test's transactions are counted. Each case spends the address's
// budget on GET /health (RATE_LIMIT_HEALTH_PER_MINUTE=3) or on sign-ins
// with a new account name each time, as credential stuffing does
// (RATE_LIMIT_LOGIN_IP_ATTEMPTS=10), then sends the 3,000, which must all
// be answered 429. The count covers the 3,000 up to the server's stop
// (PostgreSQL's backends report their last counts as they exit), so it
// can only be too high, never too low.
func TestRefusedCostsNoTransaction(t *testing.T) {
	const more = 3000
	dbURL, dbName, stats := ownDatabase(t, "_xact")
	stuffing := func(i int) url.Values {
		return url.Values{"username": {fmt.Sprintf("user-%d", i)}, "password": {"guess"}}
	}
	for _, tc := range []struct {
		name   string
		env    string
		spend  int
		attack func(context.Context, string, loadtest.Caller, int) (*http.Request, error)
		spent  int // the status of an attempt within the budget
	}{
		{"health", "RATE_LIMIT_HEALTH_PER_MINUTE=3", 3, healthFrom(one("192.0.2.9")), http.StatusOK},
		{"sign-in", "RATE_LIMIT_LOGIN_IP_ATTEMPTS=10", 10, formFrom("/login", one("192.0.2.9"), stuffing), http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			callers := loadtest.NewCallers(1)
			cl := startCluster(t, loadtest.ClusterConfig{
				Bin: serverBin(t), Dir: t.TempDir(), Servers: 1, Store: loadtest.Postgres, DatabaseURL: dbURL,
				Callers: callers, Env: []string{"TRUSTED_PROXIES=127.0.0.1/32", tc.env},
			})
			spend := run(t, loadtest.LoadConfig{Targets: cl.URLs(), Callers: callers, Clients: 1, Requests: tc.spend + 1, Request: tc.attack})
			if spend.Status[tc.spent] != tc.spend || spend.Status[http.StatusTooManyRequests] != 1 {
				t.Fatalf("spending the budget of %d: %v, want %d × %d then a 429", tc.spend, spend.Status, tc.spend, tc.spent)
			}
			before := transactions(t, stats, dbName)
			res := run(t, loadtest.LoadConfig{
				Targets: cl.URLs(), Callers: callers, Clients: 8, Requests: more, Duration: time.Minute,
				Request: func(ctx context.Context, target string, c loadtest.Caller, i int) (*http.Request, error) {
					return tc.attack(ctx, target, c, tc.spend+1+i)
				},
			})
			if err := cl.Close(); err != nil { // its sessions report their counts as they end
				t.Fatal(err)
			}
			after := settledTransactions(t, stats, dbName)
			cost := after - before
			t.Logf("%d attempts after the budget was spent: %v; %d transactions in the database (%.3f per attempt)", more, res.Status, cost, float64(cost)/more)
			if o := others(res, http.StatusTooManyRequests); len(o) > 0 {
				t.Errorf("attempts past the budget answered %v, want only 429 (other statuses %v)", res.Status, o)
			}
			if cost > more/10 {
				t.Errorf("%d attempts refused cost %d transactions in the store, want at most %d (a tenth)", more, cost, more/10)
			}
		})
	}
}

// ownDatabase creates, once, a database beside the test PostgreSQL's named
// as its own with suffix added, and migrates it. It returns the new
// database's URL and name, and a pool on the test database, which sees the
// new one's statistics without being counted in them.
func ownDatabase(t *testing.T, suffix string) (string, string, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	base := servicetest.PostgresURL(t)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/") + suffix
	pool, err := pgxpool.New(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if !exists {
		quoted := `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
		if _, err := pool.Exec(ctx, `CREATE DATABASE `+quoted); err != nil && !strings.Contains(err.Error(), "already exists") {
			t.Fatal(err)
		}
	}
	u.Path = "/" + name
	migrate(t, u.String())
	return u.String(), name, pool
}

// transactions returns the transactions committed and rolled back in the
// database name so far, as its sessions have reported them. Read from
// another database, it adds none of its own.
func transactions(t *testing.T, stats *pgxpool.Pool, name string) int64 {
	t.Helper()
	var n int64
	if err := stats.QueryRow(context.Background(), `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// settledTransactions waits until no session is connected to the database
// name, so that every one has reported its counts (a backend does as it
// exits), and until the count stops moving, then returns it. Both waits
// are bounded.
func settledTransactions(t *testing.T, stats *pgxpool.Pool, name string) int64 {
	t.Helper()
	for i := 0; ; i++ {
		var sessions int
		if err := stats.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'`, name).Scan(&sessions); err != nil {
			t.Fatal(err)
		}
		if sessions == 0 {
			break
		}
		if i == 200 {
			t.Fatalf("%d sessions still connected to %s after 10 s", sessions, name)
		}
		time.Sleep(50 * time.Millisecond)
	}
	last, same := transactions(t, stats, name), 0
	for range 50 {
		time.Sleep(100 * time.Millisecond)
		n := transactions(t, stats, name)
		if n == last {
			if same++; same == 3 {
				break
			}
			continue
		}
		last, same = n, 0
	}
	return last
}
