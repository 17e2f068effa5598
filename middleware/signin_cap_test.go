package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatecount/gatecount/internal/clock"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
)

// outOfTheWay are windowed budgets no test here spends, so that only the
// cap and the delays refuse.
var outOfTheWay = middleware.SignInOptions{
	AccountIPFailures: limiter.Budget{Limit: 1_000_000, Window: 15 * time.Minute},
	AccountFailures:   limiter.Budget{Limit: 1_000_000, Window: time.Hour},
	IPAttempts:        limiter.Budget{Limit: 1_000_000, Window: time.Hour},
	Device:            middleware.DeviceOptions{Secret: deviceSecret},
}

// events collects a guard's events.
type events struct {
	mu   sync.Mutex
	list []middleware.Event
}

func (e *events) on(ev middleware.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, ev)
}

func (e *events) of(kind middleware.EventKind) []middleware.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []middleware.Event
	for _, ev := range e.list {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// guessAddr is the i-th address of a guesser spread over many.
func guessAddr(i int) string { return fmt.Sprintf("198.18.%d.%d", i/250, i%250+1) }

func TestSignInConsecutiveCap(t *testing.T) {
	const limit = 10
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		free func(g *middleware.SignInGuard) error // lets alice in again
		kind middleware.EventKind
	}{
		{"Recovered", func(g *middleware.SignInGuard) error {
			return g.Recovered(ctx, "Alice", netip.MustParseAddr("203.0.113.3"))
		}, middleware.EventRecovered},
		{"Unlock", func(g *middleware.SignInGuard) error { return g.Unlock(ctx, "alice") }, middleware.EventUnlocked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := outOfTheWay
			o.ConsecutiveFailures = limit
			o.Delay.After = limit // no delays
			var ev events
			o.OnEvent = ev.on
			g, p, h := signIn(t, nil, o)
			alice := func(ip, pw string) *httptest.ResponseRecorder { return post(h, ip, formCT, form("alice", pw)) }
			device := deviceCookie(t, alice("203.0.113.1", "right"))

			// A guesser over 500 addresses, all at once: exactly the cap
			// reaches the password check.
			p.checks.Store(0)
			var wg sync.WaitGroup
			for i := range 500 {
				wg.Add(1)
				go func() { defer wg.Done(); alice(guessAddr(i), "wrong") }()
			}
			wg.Wait()
			if n := p.checks.Load(); n != limit {
				t.Fatalf("%d of 500 guesses reached the check, want %d", n, limit)
			}
			refused := func(when string) {
				t.Helper()
				if w := alice("203.0.113.2", "right"); w.Code != 429 || retryAfter(t, w) < 300*24*3600 {
					t.Fatalf("alice without her device %s: %d Retry-After %q, want 429 until unlocked", when, w.Code, w.Header().Get("Retry-After"))
				}
			}
			refused("at the cap")
			if got := ev.of(middleware.EventCapReached); len(got) != 1 || got[0].Account != "alice" || got[0].Failures != limit || !got[0].Addr.IsValid() {
				t.Fatalf("cap events %+v, want one for alice with the address that tipped it", got)
			}
			if s, err := g.Show(ctx, "alice"); err != nil || !s.Refused || s.Budgets[1].Budget != "login-consecutive" || s.Budgets[1].Used != limit {
				t.Fatalf("Show = %+v, %v; want alice refused by login-consecutive", s, err)
			}

			// Her device signs in, twice; the cap stays.
			for range 2 {
				if w := post(h, "203.0.113.50", formCT, form("alice", "right"), device); w.Code != 200 {
					t.Fatalf("alice from her device at the cap: %d, want 200", w.Code)
				}
			}
			if got := ev.of(middleware.EventKnownDevice); len(got) != 2 || got[0].Account != "alice" || got[0].Addr != netip.MustParseAddr("203.0.113.50") {
				t.Fatalf("known-device events %+v, want one per sign-in", got)
			}
			refused("after her device signed in")

			if err := tc.free(g); err != nil {
				t.Fatal(err)
			}
			if got := ev.of(tc.kind); len(got) != 1 || got[0].Account != "alice" {
				t.Fatalf("%s events %+v, want one for alice", tc.kind, got)
			}
			if w := alice("203.0.113.3", "right"); w.Code != 200 {
				t.Fatalf("alice without her device after %s: %d, want 200", tc.name, w.Code)
			}
		})
	}
}

const formCT = "application/x-www-form-urlencoded"

// A success, from any client, restarts the count.
func TestSignInSuccessRestartsConsecutive(t *testing.T) {
	const limit = 5
	o := outOfTheWay
	o.ConsecutiveFailures, o.Delay.After = limit, limit
	_, p, h := signIn(t, nil, o)
	device := deviceCookie(t, post(h, "203.0.113.9", formCT, form("alice", "right")))
	for round, cookies := range [][]*http.Cookie{nil, nil, {device}} {
		for i := range limit - 1 {
			if w := post(h, guessAddr(i), formCT, form("alice", "wrong")); w.Code != 401 {
				t.Fatalf("round %d guess %d: %d", round, i, w.Code)
			}
		}
		if w := post(h, fmt.Sprintf("203.0.113.%d", round), formCT, form("alice", "right"), cookies...); w.Code != 200 {
			t.Fatalf("round %d: alice %d, want 200 after %d failures", round, w.Code, limit-1)
		}
	}
	p.checks.Store(0)
	for i := range limit + 3 {
		post(h, guessAddr(100+i), formCT, form("alice", "wrong"))
	}
	if n := p.checks.Load(); n != limit {
		t.Fatalf("after a success, %d guesses reached the check, want %d", n, limit)
	}
}

func TestSignInConsecutiveAboveNIST(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want error
	}{
		{100, nil}, {1, nil}, {0, nil}, {101, middleware.ErrAboveNIST}, {-1, middleware.ErrAboveNIST},
	} {
		g, err := middleware.SignIn(handle(t, memStore(t, nil), "signin:"), middleware.SignInOptions{ConsecutiveFailures: tc.n, Logger: quiet})
		if err == nil {
			g.Close()
		}
		if !errors.Is(err, tc.want) || (tc.want != nil && !errors.Is(err, limiter.ErrInvalidBudget)) {
			t.Errorf("ConsecutiveFailures %d: %v, want %v", tc.n, err, tc.want)
		}
	}
}

// Before the threshold nothing waits; after it, each refusal's Retry-After
// is the documented ladder, and never early.
func TestSignInDelayLadder(t *testing.T) {
	clk := clock.NewFake(t0)
	o := outOfTheWay
	o.Delay = middleware.Delay{After: 3, First: 30 * time.Second, Max: 4 * time.Minute}
	var ev events
	o.OnEvent = ev.on
	_, p, h := signIn(t, clk, o)
	guess := func(i int) *httptest.ResponseRecorder { return post(h, guessAddr(i), formCT, form("alice", "wrong")) }
	for i := range 3 {
		if w := guess(i); w.Code != 401 || w.Header().Get("Retry-After") != "" {
			t.Fatalf("attempt %d, before the threshold: %d Retry-After %q", i+1, w.Code, w.Header().Get("Retry-After"))
		}
	}
	// The k-th attempt waits min(30s × 2^(k-4), 4m) after the one before.
	for k := 4; k <= 9; k++ {
		want := min(30<<(k-4), 240)
		w := guess(k)
		if w.Code != 429 || retryAfter(t, w) != want || !strings.Contains(w.Header().Get("RateLimit"), `"login-delay"`) {
			t.Fatalf("attempt %d at once: %d Retry-After %q RateLimit %q, want 429 after %ds by login-delay",
				k, w.Code, w.Header().Get("Retry-After"), w.Header().Get("RateLimit"), want)
		}
		clk.Advance(time.Duration(want-1) * time.Second)
		if w := guess(k); w.Code != 429 || retryAfter(t, w) != 1 {
			t.Fatalf("attempt %d a second early: %d Retry-After %q, want 429 with 1", k, w.Code, w.Header().Get("Retry-After"))
		}
		clk.Advance(time.Second)
		before := p.checks.Load()
		if w := guess(k); w.Code != 401 || p.checks.Load() != before+1 {
			t.Fatalf("attempt %d after its wait: %d, want it checked", k, w.Code)
		}
	}
	// Each delay imposed is one event, never one per refusal.
	if got := ev.of(middleware.EventDelayed); len(got) != 7 {
		t.Fatalf("%d delay events, want 7 (attempts 3 to 9)", len(got))
	}
}

// A flood of wrong passwords for one account, which has signed in, makes
// one "budget spent" event per window, and one cap event.
func TestSignInEventsOfAFlood(t *testing.T) {
	clk := clock.NewFake(t0)
	o := outOfTheWay
	o.AccountFailures = signInDefaults.AccountFailures // 20 per hour
	o.Delay.After = 100                                // no delays
	var ev events
	o.OnEvent = ev.on
	_, p, h := signIn(t, clk, o)
	if w := post(h, "203.0.113.1", formCT, form("alice", "right")); w.Code != 200 {
		t.Fatalf("alice signs in: %d", w.Code)
	}
	p.checks.Store(0)
	const flood, hours = 10_000, 7
	var wg sync.WaitGroup
	work := make(chan int)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				post(h, guessAddr(i%500), formCT, form("alice", "wrong"))
			}
		}()
	}
	for i := range flood {
		if i > 0 && i%(flood/hours+1) == 0 {
			// Let the hour's attempts land, then start the next.
			close(work)
			wg.Wait()
			clk.Advance(time.Hour)
			work = make(chan int)
			for range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range work {
						post(h, guessAddr(i%500), formCT, form("alice", "wrong"))
					}
				}()
			}
		}
		work <- i
	}
	close(work)
	wg.Wait()
	if n := p.checks.Load(); n != 100 {
		t.Fatalf("%d guesses reached the check, want 100: 20 an hour to the cap", n)
	}
	spent := ev.of(middleware.EventBudgetSpent)
	var ends []time.Time
	for _, e := range spent {
		if e.Account != "alice" || e.Budget != "login-account" || e.Failures != 20 || e.Until.IsZero() || !e.Addr.IsValid() {
			t.Errorf("budget event %+v", e)
		}
		ends = append(ends, e.Until)
	}
	slices.SortFunc(ends, time.Time.Compare)
	if len(spent) != 5 || len(slices.Compact(ends)) != 5 {
		t.Fatalf("%d budget events, ending %v; want one in each of the 5 hours to the cap", len(spent), ends)
	}
	if got := ev.of(middleware.EventCapReached); len(got) != 1 {
		t.Fatalf("%d cap events, want 1", len(got))
	}
}

// Known and unknown accounts are answered byte for byte alike, through
// delays and the cap.
func TestSignInCapUnknownAccountAlike(t *testing.T) {
	type answer struct {
		status int
		header http.Header
		body   string
	}
	run := func(account string) []answer {
		clk := clock.NewFake(t0)
		o := outOfTheWay
		o.ConsecutiveFailures = 8
		o.Delay = middleware.Delay{After: 3}
		_, _, h := signIn(t, clk, o)
		var out []answer
		for i := range 30 {
			w := post(h, guessAddr(i), formCT, form(account, "wrong"))
			out = append(out, answer{w.Code, w.Header(), w.Body.String()})
			if i%3 == 2 { // wait out some delays, not all
				clk.Advance(time.Minute)
			}
		}
		return out
	}
	known, unknown := run("alice"), run("nobody")
	var refused, delayed bool
	for i := range known {
		if !reflect.DeepEqual(known[i], unknown[i]) {
			t.Fatalf("attempt %d: alice %+v, nobody %+v", i+1, known[i], unknown[i])
		}
		refused = refused || strings.Contains(known[i].header.Get("RateLimit"), "login-consecutive")
		delayed = delayed || strings.Contains(known[i].header.Get("RateLimit"), "login-delay")
	}
	if !refused || !delayed {
		t.Fatalf("the sequence met the cap %v and a delay %v, want both", refused, delayed)
	}
}
