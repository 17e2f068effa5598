package loadtest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// CheckBurst passes exactly the budget admitted and the rest refused, and
// fails anything else: too many or too few admitted, a 503, a failed
// request, a burst not wholly answered.
func TestCheckBurst(t *testing.T) {
	shared, memory := Expect{Budget: 30, Shared: true}, Expect{Budget: 30}
	for _, tc := range []struct {
		name    string
		e       Expect
		targets int
		res     Result
		ok      bool
	}{
		{"exact", shared, 2, Result{Requests: 500, Status: map[int]int{200: 30, 429: 470}}, true},
		{"over", shared, 2, Result{Requests: 500, Status: map[int]int{200: 31, 429: 469}}, false},
		{"under", shared, 2, Result{Requests: 500, Status: map[int]int{200: 29, 429: 471}}, false},
		{"a 503", shared, 2, Result{Requests: 500, Status: map[int]int{200: 30, 429: 469, 503: 1},
			Errors: map[string]int{"5xx 503 Service Unavailable": 1}}, false},
		{"a failed request", shared, 2, Result{Requests: 500, Status: map[int]int{200: 30, 429: 469},
			Errors: map[string]int{"timeout": 1}}, false},
		{"not all answered", shared, 2, Result{Requests: 499, Status: map[int]int{200: 30, 429: 469}}, false},
		{"fewer than the budget", shared, 1, Result{Requests: 10, Status: map[int]int{200: 10}}, true},
		{"memory, the budget on each server", memory, 2, Result{Requests: 500, Status: map[int]int{200: 60, 429: 440}}, true},
		{"memory, only the budget", memory, 2, Result{Requests: 500, Status: map[int]int{200: 30, 429: 470}}, false},
		{"memory, a server sent fewer", memory, 2, Result{Requests: 41, Status: map[int]int{200: 50}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.res.Targets = make([]string, tc.targets)
			n := tc.res.Requests
			if tc.name == "not all answered" {
				n = 500
			}
			err := tc.res.CheckBurst(tc.e, n)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrBurst)) {
				t.Errorf("CheckBurst: %v, want ok=%v", err, tc.ok)
			}
		})
	}
	r := Result{Targets: make([]string, 2)}
	for _, c := range []struct{ n, want int }{
		{41, 41}, // 21 to one server, 20 to the other: each under the budget
		{61, 60}, // 31 and 30
		{71, 60}, // 36 and 35: the budget on each
	} {
		if got := r.BurstWant(Expect{Budget: 30}, c.n); got != c.want {
			t.Errorf("BurstWant on the memory store, %d requests over 2 servers: %d, want %d", c.n, got, c.want)
		}
	}
}

// Burst sends every request at once, all to one caller, in turn to each
// target.
func TestBurst(t *testing.T) {
	const n = 40
	var mu sync.Mutex
	inFlight, most, seen := 0, 0, map[string]int{}
	release := make(chan struct{})
	h := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			inFlight++
			most = max(most, inFlight)
			seen[name+" "+r.Header.Get("Authorization")]++
			if inFlight == n {
				close(release)
			}
			mu.Unlock()
			<-release // answered once all n are in flight together
			mu.Lock()
			inFlight--
			mu.Unlock()
			w.Header().Set("RateLimit", `"execute";r=0;t=60`)
			w.WriteHeader(http.StatusTooManyRequests)
		})
	}
	a, b := httptest.NewServer(h("a")), httptest.NewServer(h("b"))
	defer a.Close()
	defer b.Close()
	caller := NewCallers(1)[0]
	res, err := Burst(context.Background(), []string{a.URL, b.URL}, caller, n)
	if err != nil {
		t.Fatal(err)
	}
	if most != n {
		t.Errorf("at most %d requests in flight at once, want all %d", most, n)
	}
	want := fmt.Sprintf("map[a Bearer %s:%d b Bearer %s:%d]", caller.Token, n/2, caller.Token, n/2)
	if got := fmt.Sprint(seen); got != want {
		t.Errorf("requests seen %s, want %s", got, want)
	}
	if err := res.CheckBurst(Expect{Budget: 0, Shared: true}, n); err != nil {
		t.Error(err)
	}
	if !strings.HasPrefix(res.BurstSummary(), "40 answered:  429: 40") {
		t.Errorf("summary %q", res.BurstSummary())
	}
	if _, err := Burst(context.Background(), []string{a.URL}, caller, 0); !errors.Is(err, ErrUsage) {
		t.Errorf("a burst of 0: %v, want ErrUsage", err)
	}
}
