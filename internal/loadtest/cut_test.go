package loadtest

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gatecount/gatecount/internal/faultproxy"
	"github.com/gatecount/gatecount/internal/servicetest"
	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/postgres"
)

// The store's connection is cut (or black-holed) under load for 10 s (2 s
// and 5 s in the short run), under an in-process server built as the example's
// POST /execute is: PerCaller over PostgreSQL, reached through a fault
// proxy. Every request is still answered — 200 counted in process memory
// (the Local policy) or 503 — never left hanging, the calls in flight in
// the store never pass the guard's cap, and once the connection is back,
// counting in the database resumes by itself.
func TestStoreCut(t *testing.T) {
	url := servicetest.PostgresURL(t)
	if err := migrate(context.Background(), serverBin(t), url); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		fault func(*faultproxy.Proxy)
		// long enough, in the short run, for calls to outlive the guard's
		// deadline and new ones to pile up behind them
		short time.Duration
	}{
		{"cut", (*faultproxy.Proxy).Cut, 2 * time.Second},
		{"black hole", (*faultproxy.Proxy).BlackHole, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) { testStoreFault(t, url, tc.fault, pick(tc.short, 10*time.Second)) })
	}
}

const cutMaxInFlight = 16

func testStoreFault(t *testing.T, url string, fault func(*faultproxy.Proxy), length time.Duration) {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.New(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	host, port, _ := net.SplitHostPort(p.Addr())
	cfg.ConnConfig.Host = host
	portN, _ := strconv.Atoi(port)
	cfg.ConnConfig.Port = uint16(portN)
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	secret := NewSecret()
	quiet := slog.New(slog.DiscardHandler)
	so := store.Options{Logger: quiet, MaxInFlight: cutMaxInFlight}.WithDefaults()
	pb, err := postgres.NewBackend(ctx, pool, postgres.Options{Secret: []byte(secret), Store: so})
	if err != nil {
		t.Fatal(err)
	}
	running := &runningBackend{Backend: pb}
	s := store.New(running, so)
	defer s.Close()
	h, err := s.Handle("execute:")
	if err != nil {
		t.Fatal(err)
	}
	mw, err := middleware.New(h, limiter.Budget{Limit: limiter.MaxLimit, Window: time.Minute}, middleware.Options{Name: "execute", Key: keyfunc.CallerID, KeyErrorStatus: http.StatusUnauthorized, Unavailable: limiter.Local, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Close()
	callers := NewCallers(9)
	load, probe := callers[:8], callers[8]
	srv := httptest.NewServer(authenticate(callers, mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("done\n"))
	}))))
	defer srv.Close()

	// Watch the guard's count of calls in flight for the whole test, for the
	// report: it includes, for an instant, the calls it turns away.
	var maxInFlight atomic.Int64
	stop := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() {
		tick := time.NewTicker(200 * time.Microsecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if n := int64(s.InFlight()); n > maxInFlight.Load() {
					maxInFlight.Store(n)
				}
			}
		}
	})
	defer func() { close(stop); watch.Wait() }()

	// Fewer clients than the cap: a healthy store is never overloaded, and
	// only calls left running past their deadline can fill it.
	cfgLoad := LoadConfig{Targets: []string{srv.URL}, Callers: load, Clients: cutMaxInFlight - 4, Timeout: time.Minute}
	before := cfgLoad
	before.Requests = 500
	res, err := Run(ctx, before)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status[http.StatusOK] != 500 {
		t.Fatalf("before the fault: %v %v, want only 200", res.Status, res.Errors)
	}
	for i := 0; s.Members() == 0; i++ { // counting alone needs the fleet counted
		if i == 500 {
			t.Fatal("the store did not count its members within 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}

	fault(p)
	during := cfgLoad
	during.Duration = length
	during.Clients = 3 * cutMaxInFlight // more than the cap: calls pile up against it
	during.Requests = 1 << 30
	res, err = Run(ctx, during)
	p.Restore()
	if err != nil {
		t.Fatal(err)
	}
	for kind, n := range res.Errors {
		if kind != "5xx 503 Service Unavailable" {
			t.Errorf("during the fault, %d requests failed as %q: every one must be answered 200 or 503", n, kind)
		}
	}
	if n := res.Status[http.StatusTooManyRequests]; n > 0 {
		t.Errorf("during the fault, %d answers 429 under a budget no caller can spend", n)
	}
	if res.Requests == 0 || res.Status[http.StatusOK] == 0 {
		t.Errorf("during the fault: %v: want requests admitted by the Local policy", res.Status)
	}
	t.Logf("during the fault (%v): %d requests, %v; latency p50 %v p99 %v max %v; at most %d calls running in the backend (cap %d; InFlight read at most %d)",
		during.Duration, res.Requests, res.Status, res.Percentile(0.5), res.Percentile(0.99), res.Percentile(1),
		running.max.Load(), cutMaxInFlight, maxInFlight.Load())
	if n := running.max.Load(); n > cutMaxInFlight {
		t.Errorf("%d calls running in the backend at once, over the cap of %d", n, cutMaxInFlight)
	}

	// Counting in the database resumes by itself: a request of a caller
	// never seen before is soon counted there.
	client := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: time.Minute}
	defer client.CloseIdleConnections()
	give := time.Now().Add(time.Minute) // a bound on the test, not a timed assertion
	sent := int64(0)
	for {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/execute", nil)
		req.Header.Set("Authorization", "Bearer "+probe.Token)
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			sent++
		}
		if n := readCounts(t, url, secret, []Caller{probe})[0]; n > 0 {
			t.Logf("counting in the database again after %d probes (%d admitted, %d counted there)", sent, sent, n)
			break
		}
		if time.Now().After(give) {
			t.Fatalf("a minute after the fault ended, %d requests of a new caller were admitted and none is counted in the database", sent)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// authenticate is the example's bearer-token authentication, for the
// in-process server.
func authenticate(callers []Caller, next http.Handler) http.Handler {
	byToken := map[string]string{}
	for _, c := range callers {
		byToken[c.Token] = c.Name
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		caller, ok := byToken[token]
		if !ok {
			http.Error(w, "unknown token", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(keyfunc.WithCallerID(r.Context(), caller)))
	})
}

// runningBackend counts the calls running in a PostgreSQL backend at once,
// which the guard's cap bounds.
type runningBackend struct {
	*postgres.Backend
	now, max atomic.Int64
}

func (b *runningBackend) enter() {
	n := b.now.Add(1)
	for m := b.max.Load(); n > m && !b.max.CompareAndSwap(m, n); m = b.max.Load() {
	}
}

func (b *runningBackend) Update(ctx context.Context, prefix string, keys []string, apply store.ApplyFunc) error {
	b.enter()
	defer b.now.Add(-1)
	return b.Backend.Update(ctx, prefix, keys, apply)
}

func (b *runningBackend) Read(ctx context.Context, prefix string, keys []string) ([]store.Entry, error) {
	b.enter()
	defer b.now.Add(-1)
	return b.Backend.Read(ctx, prefix, keys)
}

func (b *runningBackend) Count(ctx context.Context, prefix string, keys []string, caps []store.Budget, n int64, t *store.Tally) error {
	b.enter()
	defer b.now.Add(-1)
	return b.Backend.Count(ctx, prefix, keys, caps, n, t)
}

func (b *runningBackend) Sweep(ctx context.Context) (int, error) {
	b.enter()
	defer b.now.Add(-1)
	return b.Backend.Sweep(ctx)
}
