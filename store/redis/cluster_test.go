package redis_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store"
	redisstore "github.com/gatecount/gatecount/store/redis"
)

// clusterURL is the URL of a node of the test Redis Cluster.
func clusterURL() string {
	if u := os.Getenv("GATECOUNT_TEST_REDIS_CLUSTER_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:7000/0"
}

// clusterMissing fails the test under CI and skips it otherwise.
func clusterMissing(tb testing.TB, err error) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatalf("the Redis Cluster at %s is unreachable: %v (.ci/redis-cluster.sh starts one)", clusterURL(), err)
	}
	tb.Skipf("the Redis Cluster at %s is unreachable (%v); start one with .ci/redis-cluster.sh, set GATECOUNT_TEST_REDIS_CLUSTER_URL, or CI=true to fail instead", clusterURL(), err)
}

// clusterDown returns why the test Cluster, seeded at o's first address,
// cannot be used, or nil. Each test asks again: the failover test stops a
// node.
func clusterDown(tb testing.TB, o *redis.ClusterOptions) error {
	c := redis.NewClient(&redis.Options{Addr: o.Addrs[0], Username: o.Username, Password: o.Password, MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	info, err := c.ClusterInfo(tb.Context()).Result()
	if err == nil && !strings.Contains(info, "cluster_state:ok") {
		err = errors.New("cluster_state is not ok")
	}
	return err
}

// newCluster returns a cluster client of its own on the test Cluster,
// closed when the test ends.
func newCluster(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	return newClusterAt(tb, clusterURL())
}

// newClusterAt returns a cluster client of its own on the Cluster a node of
// which u names, closed when the test ends.
func newClusterAt(tb testing.TB, u string) *redis.ClusterClient {
	tb.Helper()
	o, err := redis.ParseClusterURL(strings.TrimSuffix(u, "/0"))
	if err != nil {
		tb.Fatalf("GATECOUNT_TEST_REDIS_CLUSTER_URL: %v", err)
	}
	if err := clusterDown(tb, o); err != nil {
		clusterMissing(tb, err)
	}
	o.ContextTimeoutEnabled = true
	o.MaxRetries = -1
	o.PoolSize = 64
	c := redis.NewClusterClient(o)
	tb.Cleanup(func() { c.Close() })
	return c
}

// failoverPorts are the ports of the Cluster whose masters the failover
// tests stop: a Cluster of their own, which .ci/redis-cluster.sh starts,
// so that the other tests' Cluster never loses a master.
const failoverPorts = "7010 7011 7012"

// failoverURL starts the failover tests' Cluster unless it is running,
// and returns the URL of one of its nodes.
func failoverURL(tb testing.TB) string {
	tb.Helper()
	failoverOnce.Do(func() {
		if _, err := exec.LookPath("redis-server"); err != nil {
			failoverErr = err
			return
		}
		script, err := filepath.Abs("../../.ci/redis-cluster.sh")
		if err != nil {
			failoverErr = err
			return
		}
		cmd := exec.Command(script)
		cmd.Env = append(os.Environ(), "REDIS_CLUSTER_PORTS="+failoverPorts, "REDIS_CLUSTER_DIR=/tmp/gatecount-redis-cluster-failover")
		if out, err := cmd.CombinedOutput(); err != nil {
			failoverErr = fmt.Errorf("%s: %v\n%s", script, err, out)
		}
	})
	if failoverErr != nil {
		clusterMissing(tb, failoverErr)
	}
	p, _, _ := strings.Cut(failoverPorts, " ")
	return "redis://127.0.0.1:" + p + "/0"
}

var (
	failoverOnce sync.Once
	failoverErr  error
)

func cluster(tb testing.TB) redis.UniversalClient { return newCluster(tb) }

// TestClusterContract runs the contract suite on a Redis Cluster.
func TestClusterContract(t *testing.T) { contract(t, cluster) }

// TestClusterExactness runs the exactness test on a Redis Cluster.
func TestClusterExactness(t *testing.T) { exactness(t, cluster) }

// masterOf returns the address of the master serving key's slot.
func masterOf(t testing.TB, c *redis.ClusterClient, key string) string {
	t.Helper()
	slot, err := c.ClusterKeySlot(t.Context(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range shards(t, c) {
		for _, r := range sh.Slots {
			if r.Start <= slot && slot <= r.End {
				return masterAddr(sh)
			}
		}
	}
	t.Fatalf("no master serves slot %d", slot)
	return ""
}

// shards returns the Cluster's shards.
func shards(t testing.TB, c *redis.ClusterClient) []redis.ClusterShard {
	t.Helper()
	sh, err := c.ClusterShards(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return sh
}

// masterAddr returns the address of a shard's master.
func masterAddr(sh redis.ClusterShard) string {
	for _, n := range sh.Nodes {
		if n.Role == "master" {
			return n.IP + ":" + strconv.FormatInt(n.Port, 10)
		}
	}
	return ""
}

// liveIndexes returns the live index of every handle under the secret's
// fingerprint fp, by the master that holds it.
func liveIndexes(t testing.TB, c *redis.ClusterClient, fp string) map[string]string {
	t.Helper()
	var mu sync.Mutex
	out := map[string]string{}
	err := c.ForEachMaster(t.Context(), func(ctx context.Context, m *redis.Client) error {
		it := m.Scan(ctx, 0, "gatecount:{*}:"+fp+":ends", 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			out[it.Val()] = m.Options().Addr
			mu.Unlock()
		}
		return it.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestClusterOpenURL: a URL naming any node of a Cluster opens a cluster
// client; so does the form with more seeds, even when the first is down.
// Different limiters land on different masters, each limiter's keys on one
// slot. A Cluster URL naming a database other than 0 is refused.
func TestClusterOpenURL(t *testing.T) {
	c := newCluster(t)
	node := strings.TrimSuffix(strings.TrimPrefix(clusterURL(), "redis://"), "/0")
	for _, u := range []string{
		clusterURL(),
		"redis://127.0.0.1:1?addr=" + node, // the first seed is down
	} {
		secret := newSecret()
		s, err := redisstore.OpenURL(t.Context(), u, redisstore.Options{Secret: secret})
		if err != nil {
			t.Fatalf("OpenURL(%q): %v", u, err)
		}
		b := s.Backend().(*redisstore.Backend)
		caps := []store.Budget{{Limit: 2, Window: time.Minute}, {Limit: 2, Window: time.Minute}}
		for i := range 12 {
			h := handle(t, s, "limiter-"+strconv.Itoa(i))
			for range 3 {
				if _, err := h.Count(t.Context(), []string{"alice", "10.0.0.1"}, caps, 1); err != nil {
					t.Fatalf("OpenURL(%q): Count: %v", u, err)
				}
			}
		}
		masters := map[string]bool{}
		for _, m := range liveIndexes(t, c, b.Fingerprint()) {
			masters[m] = true
		}
		if len(masters) < 2 {
			t.Errorf("OpenURL(%q): twelve limiters all live on %v; want them spread over the masters", u, masters)
		}
		s.Close()
	}
	for _, bad := range []string{
		strings.TrimSuffix(clusterURL(), "/0") + "/3",
		"redis://" + node + "/2?addr=" + node,
	} {
		if _, err := redisstore.OpenURL(t.Context(), bad, redisstore.Options{Secret: newSecret()}); !errors.Is(err, redisstore.ErrURL) {
			t.Errorf("OpenURL(%q): %v, want %v (a Cluster has only database 0)", bad, err, redisstore.ErrURL)
		}
	}
}

// TestClusterSignIn: the sign-in guard's attempts, three keys counted in
// one step, on two instances sharing a Cluster: 200 concurrent wrong
// passwords for one account reach the handler exactly 5 times, and 100
// guesses from 100 addresses exactly 20 (the per-account budget).
func TestClusterSignIn(t *testing.T) {
	secret := newSecret()
	proxies, err := keyfunc.ParseNetworks("127.0.0.1/32")
	if err != nil {
		t.Fatal(err)
	}
	var checks atomic.Int64
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		checks.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
	})
	var servers []http.Handler
	for range 2 {
		s := open(t, newCluster(t), redisstore.Options{Secret: secret, Store: store.Options{MaxInFlight: 256, Logger: quiet}})
		g, err := middleware.SignIn(handle(t, s, "signin:"), middleware.SignInOptions{IP: keyfunc.IPOptions{TrustedProxies: proxies}, Logger: quiet, Device: middleware.DeviceOptions{Secret: secret}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		servers = append(servers, g.Wrap(app))
	}
	var unavailable atomic.Int64
	// Each guess tries a password of its own, as a guesser does: one
	// password on one account from many clients at once counts once per
	// password, but may be refused by its count until the repeats are
	// given back (middleware/DESIGN.md, "Password spraying").
	login := func(h http.Handler, ip, user string, guess int) {
		form := url.Values{"username": {user}, "password": {"wrong-" + strconv.Itoa(guess)}}.Encode()
		r := httptest.NewRequest("POST", "/login", strings.NewReader(form))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.RemoteAddr = "127.0.0.1:4000"
		r.Header.Set("X-Forwarded-For", ip)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code == http.StatusServiceUnavailable {
			unavailable.Add(1)
		}
	}
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() { login(servers[i%2], "192.0.2.1", "alice", i) })
	}
	wg.Wait()
	if n := checks.Load(); n != 5 {
		t.Errorf("%d of 200 concurrent wrong passwords reached the check, want 5", n)
	}
	checks.Store(0)
	for i := range 100 {
		wg.Go(func() { login(servers[i%2], "203.0.113."+strconv.Itoa(i), "carol", i) })
	}
	wg.Wait()
	if n := checks.Load(); n != 20 {
		t.Errorf("%d of 100 guesses from 100 addresses reached the check, want 20", n)
	}
	if n := unavailable.Load(); n != 0 {
		t.Errorf("%d attempts answered 503", n)
	}
}

// TestClusterFailover stops one master of the Cluster: a limiter whose
// keys live on another master keeps answering allowed and refused exactly
// as before, the stopped master's limiter is answered unavailable, and it
// counts again once the master is back. The master is restarted by
// .ci/redis-cluster.sh, which started it, on a Cluster of its own.
func TestClusterFailover(t *testing.T) {
	u := failoverURL(t)
	c := newClusterAt(t, u)
	ctx := t.Context()
	secret := newSecret()
	so := store.Options{
		Deadline:    time.Second,
		MaxInFlight: 64,
		Breaker:     store.BreakerOptions{Failures: 3, Cooldown: 100 * time.Millisecond},
		Logger:      quiet,
	}
	var stores []*store.Store
	for range 2 {
		stores = append(stores, open(t, newClusterAt(t, u), redisstore.Options{Secret: secret, Store: so}))
	}
	fp := stores[0].Backend().(*redisstore.Backend).Fingerprint()
	tagsAt := masterOf(t, c, "gatecount:{"+fp+"}:tags")
	placed := map[*store.Handle]string{}
	masterOfHandle := func(h *store.Handle) string { return placed[h] }
	// Find a limiter on a master that does not hold the list of tags (the
	// victim), and one on another master: each new limiter's live index is
	// the one that was not there before its first count.
	caps := []store.Budget{{Limit: 1000, Window: time.Hour}}
	var victim string
	var healthy, victims [2]*store.Handle
	known := liveIndexes(t, c, fp)
	for i := 0; i < 64 && (victims[0] == nil || healthy[0] == nil); i++ {
		p := randomName("failover")
		h := handle(t, stores[0], p)
		if _, err := h.Count(ctx, []string{"warm"}, caps, 1); err != nil {
			t.Fatal(err)
		}
		at := ""
		for idx, m := range liveIndexes(t, c, fp) {
			if _, ok := known[idx]; !ok {
				at, known[idx] = m, m
			}
		}
		switch {
		case at == "":
			t.Fatalf("no new live index for %s", p)
		case victims[0] == nil && at != tagsAt && (healthy[0] == nil || at != masterOfHandle(healthy[0])):
			victim = at
			victims = [2]*store.Handle{h, handle(t, stores[1], p)}
		case healthy[0] == nil && at != victim:
			healthy = [2]*store.Handle{h, handle(t, stores[1], p)}
		}
		placed[h] = at
	}
	if victims[0] == nil || healthy[0] == nil {
		t.Fatalf("could not place two limiters on two masters")
	}
	t.Logf("stopping %s; the healthy limiter lives on %s, the list of tags on %s", victim, placed[healthy[0]], tagsAt)
	// burst counts 40 attempts on a fresh key of budget 30, over both
	// instances, and answers how many were allowed, refused and answered
	// unavailable.
	burst := func(hs [2]*store.Handle, k string) (allowed, refused, unavailable int64, reasons map[store.Reason]int) {
		key := []string{k}
		budget := []store.Budget{{Limit: 30, Window: time.Hour}}
		var a, r, u atomic.Int64
		var mu sync.Mutex
		reasons = map[store.Reason]int{}
		var wg sync.WaitGroup
		for i := range 40 {
			wg.Go(func() {
				tl, err := hs[i%2].Count(ctx, key, budget, 1)
				switch {
				case err != nil:
					u.Add(1)
					mu.Lock()
					reasons[store.ReasonOf(err)]++
					mu.Unlock()
				case tl.Allowed:
					a.Add(1)
				default:
					r.Add(1)
				}
			})
		}
		wg.Wait()
		return a.Load(), r.Load(), u.Load(), reasons
	}
	for _, hs := range [][2]*store.Handle{healthy, victims} {
		if a, r, u, _ := burst(hs, "before"); a != 30 || r != 10 || u != 0 {
			t.Fatalf("before the stop: %d allowed, %d refused, %d unavailable; want 30, 10, 0", a, r, u)
		}
	}

	var others []string
	for _, sh := range shards(t, c) {
		if m := masterAddr(sh); m != victim {
			others = append(others, m)
		}
	}
	restart := stopNode(t, c, victim)
	var victimAnswered int64
	for i := range 20 {
		// Calls to both limiters, interleaved: the stopped master's
		// failures must not refuse the healthy limiter.
		var wg sync.WaitGroup
		var va, vr, vu int64
		var vreasons map[store.Reason]int
		wg.Go(func() { va, vr, vu, vreasons = burst(victims, "during-"+strconv.Itoa(i)) })
		a, r, u, reasons := burst(healthy, "during-"+strconv.Itoa(i))
		wg.Wait()
		victimAnswered += va + vr
		if a != 30 || r != 10 || u != 0 {
			t.Errorf("burst %d with %s stopped: the limiter on a healthy master answered %d allowed, %d refused, %d unavailable %v; want 30, 10, 0",
				i, victim, a, r, u, reasons)
		}
		if i == 0 {
			t.Logf("the stopped master's limiter: %d allowed, %d refused, %d unavailable %v", va, vr, vu, vreasons)
		}
	}
	if victimAnswered != 0 {
		t.Errorf("the limiter on the stopped master answered %d attempts allowed or refused", victimAnswered)
	}
	// A new instance starts while the master is down, from seeds that
	// name it first, and counts on the healthy master with the others.
	seeds := "redis://" + victim + "?addr=" + strings.Join(others, "&addr=")
	s3, err := redisstore.OpenURL(ctx, seeds, redisstore.Options{Secret: secret, Store: so})
	if err != nil {
		t.Fatalf("OpenURL(%q) with %s stopped: %v", seeds, victim, err)
	}
	defer s3.Close()
	key := []string{"during-0"} // its budget is spent
	if tl, err := handle(t, s3, healthy[0].Prefix()).Count(ctx, key, []store.Budget{{Limit: 30, Window: time.Hour}}, 1); err != nil || tl.Allowed || tl.Counts[0] != 30 {
		t.Errorf("a new instance, on the healthy master's spent key: %+v, %v; want refused at 30", tl, err)
	}
	if _, err := handle(t, s3, victims[0].Prefix()).Count(ctx, key, caps, 1); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("a new instance, on the stopped master: %v, want unavailable", err)
	}

	began := time.Now()
	restart()
	t.Logf("the master is back after %v", time.Since(began).Round(time.Millisecond))
	recovered := false
	for i := 0; i < 200 && !recovered; i++ {
		_, err := victims[i%2].Count(ctx, []string{"probe"}, caps, 1)
		recovered = err == nil
		if !recovered {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if !recovered {
		t.Fatalf("the limiter on %s did not recover within 200 attempts after it came back", victim)
	}
	t.Logf("its limiter counts again %v after the restart began", time.Since(began).Round(time.Millisecond))
	for _, hs := range [][2]*store.Handle{healthy, victims} {
		// Both instances must have recovered: a burst is split over them.
		for i := 0; i < 200; i++ {
			if _, err := hs[1].Count(ctx, []string{"probe"}, caps, 1); err == nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if a, r, u, reasons := burst(hs, "after"); a != 30 || r != 10 || u != 0 {
			t.Errorf("after the restart: %d allowed, %d refused, %d unavailable %v; want 30, 10, 0", a, r, u, reasons)
		}
	}
}

// stopNode stops the Cluster node at addr and returns what starts it again
// and waits until the Cluster is healthy; the test's end starts it again
// too, if the test did not.
func stopNode(t *testing.T, c *redis.ClusterClient, addr string) (restart func()) {
	t.Helper()
	n := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer n.Close()
	cfg, err := n.ConfigGet(t.Context(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	dir, file := cfg["dir"], cfg["cluster-config-file"]
	_, port, _ := strings.Cut(addr, ":")
	if file != filepath.Join(dir, "nodes-"+port+".conf") && file != "nodes-"+port+".conf" {
		t.Fatalf("the node at %s was not started by .ci/redis-cluster.sh (cluster-config-file %s in %s): it could not be restarted", addr, file, dir)
	}
	ports := ports(t, c)
	script, err := filepath.Abs("../../.ci/redis-cluster.sh")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.ShutdownNoSave(t.Context()).Err(); err != nil && !strings.Contains(err.Error(), "EOF") && !errors.Is(err, io.EOF) {
		// SHUTDOWN answers nothing: the connection closes.
		t.Logf("SHUTDOWN NOSAVE on %s: %v", addr, err)
	}
	var once sync.Once
	restart = func() {
		once.Do(func() {
			cmd := exec.Command(script)
			cmd.Env = append(os.Environ(), "REDIS_CLUSTER_PORTS="+ports, "REDIS_CLUSTER_DIR="+dir)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("restarting %s with %s: %v\n%s", addr, script, err, out)
			}
		})
	}
	t.Cleanup(restart)
	return restart
}

// ports returns the ports of the Cluster's masters, for
// .ci/redis-cluster.sh.
func ports(t *testing.T, c *redis.ClusterClient) string {
	t.Helper()
	var ps []string
	for _, sh := range shards(t, c) {
		_, p, _ := strings.Cut(masterAddr(sh), ":")
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return strings.Join(slices.Compact(ps), " ")
}
