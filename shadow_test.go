package gatecount_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/gatecount/gatecount"
)

// FromEnv applies RATE_LIMIT_SHADOW to the limiters it names, and the
// exempt and blocked networks to every limiter; Skip sets one route apart.
func TestFromEnvShadowAndNetworks(t *testing.T) {
	noLeaks(t)
	env := map[string]string{
		"RATE_LIMIT_SINGLE_INSTANCE": "true",
		"RATE_LIMIT_SHADOW":          "api",
		"RATE_LIMIT_EXEMPT_NETWORKS": "198.51.100.0/24",
		"RATE_LIMIT_BLOCK_NETWORKS":  "192.0.2.0/24",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	l, err := gatecount.FromEnv(context.Background(), gatecount.WithLookup(lookup), gatecount.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if !l.ShadowOn("api") || l.ShadowOn("health") || len(l.Networks().Block) != 1 {
		t.Errorf("ShadowOn(api) %v, ShadowOn(health) %v, Networks %+v", l.ShadowOn("api"), l.ShadowOn("health"), l.Networks())
	}
	api, health := &counting{}, &counting{}
	apiH := l.PerCaller("api", 2, time.Minute)(api)
	healthH := l.PerIP("health", 2, time.Minute, gatecount.Skip(func(r *http.Request) bool { return r.Header.Get("X-Checker") != "" }))(health)
	for range 4 {
		if w := get(apiH, "203.0.113.1", "alice"); w.Code != 200 || w.Header().Get("RateLimit") != "" {
			t.Errorf("api in shadow: %d, RateLimit %q", w.Code, w.Header().Get("RateLimit"))
		}
	}
	codes := func(h http.Handler, ip string, n int, checker bool) []int {
		var out []int
		for range n {
			w := httptest.NewRecorder()
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = ip + ":1234"
			if checker {
				r.Header.Set("X-Checker", "1")
			}
			h.ServeHTTP(w, r)
			out = append(out, w.Code)
		}
		return out
	}
	for _, tc := range []struct {
		ip      string
		checker bool
		want    []int
	}{
		{"203.0.113.1", false, []int{200, 200, 429}},
		{"203.0.113.1", true, []int{200, 200, 200}},   // skipped
		{"198.51.100.4", false, []int{200, 200, 200}}, // exempt
		{"192.0.2.1", false, []int{403, 403, 403}},    // blocked
		{"192.0.2.1", true, []int{403}},               // blocked before Skip
	} {
		if got := codes(healthH, tc.ip, len(tc.want), tc.checker); !slices.Equal(got, tc.want) {
			t.Errorf("health from %s (checker %v): %v, want %v", tc.ip, tc.checker, got, tc.want)
		}
	}
	if w := get(apiH, "192.0.2.1", "alice"); w.Code != 403 {
		t.Errorf("api from a blocked network: %d", w.Code)
	}
}
