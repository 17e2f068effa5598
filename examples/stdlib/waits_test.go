package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatecount/gatecount/examples/internal/demotest"
	"github.com/gatecount/gatecount/internal/loadtest"
	"github.com/gatecount/gatecount/internal/servicetest"
)

// The tests of this file are floods whose clients do not wait: a request
// waits for a busy store only as long as its client and its deadline do.
// They are long (servicetest.Long): they run with GATECOUNT_LONG=1.

// residentSet returns the memory process pid holds, as an operator sees
// it: its resident set (VmRSS).
func residentSet(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("the resident set of a process is read from /proc: %v", err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS of process %d: %q", pid, v)
			}
			return kb << 10
		}
	}
	t.Fatalf("process %d tells no VmRSS", pid)
	return 0
}

// storeStats returns the Stats of the store the example server whose
// /debug/vars is at debug publishes (metrics' stores.limits).
func storeStats(t *testing.T, debug string) (queued, inFlight int) {
	t.Helper()
	res, err := http.Get(debug + "/debug/vars")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var vars struct {
		Gatecount struct {
			Stores struct {
				Limits struct {
					Queued   int `json:"queued"`
					InFlight int `json:"in_flight"`
				} `json:"limits"`
			} `json:"stores"`
		} `json:"gatecount"`
	}
	if err := json.NewDecoder(res.Body).Decode(&vars); err != nil {
		t.Fatal(err)
	}
	return vars.Gatecount.Stores.Limits.Queued, vars.Gatecount.Stores.Limits.InFlight
}

// freeAddr returns a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// peaks are the most goroutines of the process, and calls queued for a
// server's store, that watch saw.
type peaks struct {
	goroutines, queue int
	done              chan struct{}
}

// watch samples the process and s's store every 50 ms until stop is closed.
func watch(s *demotest.Server, stop <-chan struct{}) *peaks {
	p := &peaks{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			p.goroutines = max(p.goroutines, runtime.NumGoroutine())
			p.queue = max(p.queue, s.App.Store.Store.Stats().Queued)
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return p
}

// dropFlood writes POST /login with a fresh account, password and IPv6
// /64 (as freshNet) to addr from sockets connections at once, rate
// requests a second in all, for d, each connection closed as soon as its
// request is written: clients that never wait for an answer. It returns
// how many requests it wrote.
func dropFlood(addr string, sockets, rate int, d time.Duration) int64 {
	var sent atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	every := time.Duration(sockets) * time.Second / time.Duration(rate) // each socket's pace
	for c := range sockets {
		wg.Go(func() {
			next := time.Now().Add(time.Duration(c) * every / time.Duration(sockets))
			for i := c; time.Now().Before(end); i += sockets {
				if wait := time.Until(next); wait > 0 {
					time.Sleep(wait)
				}
				next = next.Add(every)
				conn, err := net.Dial("tcp", addr)
				if err != nil {
					continue
				}
				body := url.Values{"username": {"d" + strconv.Itoa(i)}, "password": {"x" + strconv.Itoa(i)}}.Encode()
				fmt.Fprintf(conn, "POST /login HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: %s\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n%s",
					freshNet(i), len(body), body)
				conn.Close() // gone before any answer
				sent.Add(1)
			}
		})
	}
	wg.Wait()
	return sent.Load()
}

// A flood of requests written and dropped at once waits for nobody. One
// server process (built without the race detector) on PostgreSQL; 100
// sockets write 2,500 POST /login a second for 15 s, each with a fresh
// account, password and /64, and close at once; meanwhile bob signs in
// with his right password from addresses of his own. The store's queue
// stays within RATE_LIMIT_STORE_MAX_QUEUED and is empty once the server
// has worked through what it accepted, and every one of bob's sign-ins
// answers 200: his budget is never spent by attempts nobody waits for.
// The server's resident memory, idle and at its peak, is logged.
func TestDroppedRequestsFlood(t *testing.T) {
	servicetest.Long(t)
	const (
		sockets   = 100
		rate      = 2500
		floodIn   = 15 * time.Second
		maxQueued = 16384 // RATE_LIMIT_STORE_MAX_QUEUED's default
	)
	debug := freeAddr(t)
	cl := cluster(t, loadtest.Postgres, 1, loadtest.NewCallers(1), 30, "TRUSTED_PROXIES=127.0.0.1/32", "DEBUG_ADDR="+debug)
	urls, pid := cl.URLs(), cl.Servers[0].Pid()
	debug = "http://" + debug
	// warm: bob signs in, the pools open
	run(t, loadtest.LoadConfig{Targets: urls, Callers: loadtest.NewCallers(1), Clients: 2, Requests: 20, Duration: time.Minute,
		Request: formFrom("/login", freshV4("10.20.%d.%d"), bobSignsIn)})
	time.Sleep(time.Second) // settled
	idle := residentSet(t, pid)
	var memory, firstHalf uint64 // the peak, and the peak over the flood's first half
	var queue int
	half := time.Now().Add(floodIn / 2)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			memory = max(memory, residentSet(t, pid))
			if time.Now().Before(half) {
				firstHalf = memory
			}
			q, _ := storeStats(t, debug)
			queue = max(queue, q)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	var sent int64
	var wg sync.WaitGroup
	wg.Go(func() { sent = dropFlood(strings.TrimPrefix(urls[0], "http://"), sockets, rate, floodIn) })
	bob := run(t, loadtest.LoadConfig{
		Targets: urls, Callers: loadtest.NewCallers(1), Clients: 1, Duration: floodIn, Requests: 100000, Timeout: time.Minute,
		Request: formFrom("/login", freshV4("10.21.%d.%d"), bobSignsIn),
	})
	wg.Wait()
	close(stop)
	<-sampled
	after, _ := storeStats(t, debug)
	// The server works through what it accepted before it is stopped: no
	// call queued nor in flight twice in a row, within 30 s.
	drained := time.Now()
	for idle := 0; idle < 2; time.Sleep(100 * time.Millisecond) {
		if q, f := storeStats(t, debug); q == 0 && f == 0 {
			idle++
		} else {
			idle = 0
		}
		if time.Since(drained) > 30*time.Second {
			t.Fatal("the server's store still had calls queued or in flight 30 s after the flood")
		}
	}
	t.Logf("%d requests written and dropped from %d sockets over %v", sent, sockets, floodIn)
	t.Logf("the server's resident memory: idle %.1f MB, at most %.1f MB over the flood's first half, %.1f MB in all (%.2f× idle); at most %d calls queued for the store (bound %d), %d once it ended",
		mb(idle), mb(firstHalf), mb(memory), float64(memory)/float64(idle), queue, maxQueued, after)
	t.Logf("bob's sign-ins during the flood: %d answered %v, errors %v", bob.Requests, bob.Status, bob.Errors)
	if sent < rate*int64(floodIn/time.Second)/4 {
		t.Errorf("only %d requests written in %v, want at least a quarter of %d a second: the scenario tests little", sent, floodIn, rate)
	}
	if queue > maxQueued {
		t.Errorf("%d calls queued for the store, want at most RATE_LIMIT_STORE_MAX_QUEUED (%d)", queue, maxQueued)
	}
	if o := others(bob, http.StatusOK); len(o) > 0 || bob.Requests == 0 {
		t.Errorf("bob's sign-ins during the flood: %d answered %v, want every one 200 (other statuses %v; 0 is no answer; errors %v)", bob.Requests, bob.Status, o, bob.Errors)
	}
}

// mb is n bytes in megabytes.
func mb(n uint64) float64 { return float64(n) / (1 << 20) }

// A slow store is waited for within each request's deadline, and only while
// its client waits. One server on PostgreSQL behind a link that holds
// every chunk of bytes 200 ms each way; 500 connections flood a route with
// fresh keys for 10 s, and hang up when it ends; meanwhile bob signs in
// with his right password from addresses of his own. The flood is on POST
// /password-reset, bob a bystander on another limiter; then on POST
// /login, bob on the flooded route with his device cookie. Every one of
// bob's sign-ins answers 200, within the request's deadline (the server
// answers 429 past it), and 5 s after the flood no call is left waiting
// for the store.
func TestSlowStoreFlood(t *testing.T) {
	servicetest.Long(t)
	const (
		clients = 500
		floodIn = 10 * time.Second
		slow    = 200 * time.Millisecond
		// after is how long after the flood the store's queue must be empty
		after = 5 * time.Second
	)
	for _, route := range []struct {
		path string
		form func(i int) url.Values
		// device: bob signs in with his device cookie
		device bool
	}{
		{"/password-reset", func(i int) url.Values { return url.Values{"email": {"u" + strconv.Itoa(i) + "@example.com"}} }, false},
		{"/login", func(i int) url.Values {
			return url.Values{"username": {"u" + strconv.Itoa(i)}, "password": {"x" + strconv.Itoa(i)}}
		}, true},
	} {
		t.Run(strings.TrimPrefix(route.path, "/"), func(t *testing.T) {
			env := storeEnv(t, "postgres", "TRUSTED_PROXIES=127.0.0.1/32")
			proxy, through := proxied(t, env["DATABASE_URL"])
			// the pool holds as many connections as the guard lets calls
			// in: each call holds one a round trip of 400 ms
			env["DATABASE_URL"] = through + "&pool_max_conns=64"
			if !strings.Contains(through, "?") {
				env["DATABASE_URL"] = through + "?pool_max_conns=64"
			}
			servers, urls := startFleet(t, 1, env)
			s := servers[0]
			bobs := formFrom("/login", freshV4("10.22.%d.%d"), bobSignsIn)
			if route.device {
				bobs = withCookie(bobs, deviceOf(t, s, "bob", "battery-staple"))
			}
			proxy.Delay(slow)
			before := counters(s)
			stop := make(chan struct{})
			p := watch(s, stop)
			ctx, hangUp := context.WithTimeout(context.Background(), floodIn)
			defer hangUp()
			var flood *loadtest.Result
			var err error
			var wg sync.WaitGroup
			wg.Go(func() {
				// the clients hang up when the flood ends, whatever they wait for
				flood, err = loadtest.Run(ctx, loadtest.LoadConfig{
					Targets: urls, Callers: loadtest.NewCallers(1), Clients: clients, Duration: floodIn, Requests: 1 << 20, Timeout: time.Minute,
					Request: formFrom(route.path, freshNet, route.form),
				})
			})
			bob := run(t, loadtest.LoadConfig{
				Targets: urls, Callers: loadtest.NewCallers(1), Clients: 1, Duration: floodIn, Requests: 100000, Timeout: time.Minute,
				Request: bobs,
			})
			wg.Wait()
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(after)
			st := s.App.Store.Store.Stats()
			close(stop)
			<-p.done
			_, figures := since(before, counters(s))
			t.Logf("flood of %s from %d connections over a link slowed %v each way: %d answered %v; meanwhile %s",
				route.path, clients, slow, flood.Requests, flood.Status, figures)
			t.Logf("at most %d calls queued for the store, %d goroutines; %v after the flood %d queued, %d in flight",
				p.queue, p.goroutines, after, st.Queued, st.InFlight)
			t.Logf("bob's sign-ins during the flood: %d answered %v, errors %v", bob.Requests, bob.Status, bob.Errors)
			if d, _ := since(before, counters(s)); saturated(d) == 0 {
				t.Errorf("no store call waited during the flood: the scenario tests nothing")
			}
			if p.queue > st.MaxQueued {
				t.Errorf("%d calls queued for the store, want at most RATE_LIMIT_STORE_MAX_QUEUED (%d)", p.queue, st.MaxQueued)
			}
			if st.Queued != 0 {
				t.Errorf("%d calls still queued for the store %v after the flood, want 0", st.Queued, after)
			}
			if o := others(bob, http.StatusOK); len(o) > 0 || bob.Requests == 0 {
				t.Errorf("bob's sign-ins during the flood: %d answered %v, want every one 200 (other statuses %v; 0 is no answer; errors %v)", bob.Requests, bob.Status, o, bob.Errors)
			}
		})
	}
}
