package middleware_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
)

// A request with a forwarding header that reaches a per-IP limiter trusting
// no proxy logs one warning, of its kind, however many such requests come;
// a limiter that trusts a proxy, or one with a key of its own, never warns.
func TestForwardedHeaderWithoutTrustedProxiesWarnsOnce(t *testing.T) {
	budget := limiter.Budget{Limit: 100, Window: time.Minute}
	trusted := keyfunc.IPOptions{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	for _, tc := range []struct {
		name   string
		build  func(t *testing.T, log *slog.Logger, h http.Handler) (http.Handler, func() error, error)
		header string
		warns  int
	}{
		{"New by address, X-Forwarded-For", byAddress(budget, keyfunc.IPOptions{}, nil), "X-Forwarded-For", 1},
		{"New by address, Forwarded", byAddress(budget, keyfunc.IPOptions{}, nil), "Forwarded", 1},
		{"New by address, no header", byAddress(budget, keyfunc.IPOptions{}, nil), "", 0},
		{"New by address trusting a proxy", byAddress(budget, trusted, nil), "X-Forwarded-For", 0},
		{"New by address with its own key", byAddress(budget, keyfunc.IPOptions{}, func(*http.Request) (string, error) { return "k", nil }), "X-Forwarded-For", 0},
		{"SignIn", func(t *testing.T, log *slog.Logger, h http.Handler) (http.Handler, func() error, error) {
			g, err := middleware.SignIn(handle(t, memStore(t, nil), "login:"), middleware.SignInOptions{Logger: log})
			if err != nil {
				return nil, nil, err
			}
			return g.Wrap(h), g.Close, nil
		}, "X-Forwarded-For", 1},
		{"Send", func(t *testing.T, log *slog.Logger, h http.Handler) (http.Handler, func() error, error) {
			g, err := middleware.Send(handle(t, memStore(t, nil), "reset:"), middleware.SendOptions{Logger: log})
			if err != nil {
				return nil, nil, err
			}
			return g.Wrap(h), g.Close, nil
		}, "Forwarded", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			h, closeFn, err := tc.build(t, slog.New(slog.NewTextHandler(&logs, nil)), &counting{})
			if err != nil {
				t.Fatal(err)
			}
			defer closeFn()
			for range 5 {
				r := httptest.NewRequest("POST", "/", strings.NewReader("username=alice&email=a@example.com"))
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				switch tc.header {
				case "X-Forwarded-For":
					r.Header.Set("X-Forwarded-For", "198.51.100.7")
				case "Forwarded":
					r.Header.Set("Forwarded", "for=198.51.100.7")
				}
				h.ServeHTTP(httptest.NewRecorder(), r)
			}
			got := strings.Count(logs.String(), "kind="+middleware.KindForwardedUntrusted)
			if got != tc.warns {
				t.Fatalf("%d warnings, want %d; logs:\n%s", got, tc.warns, logs.String())
			}
			if tc.warns > 0 && !strings.Contains(logs.String(), "header="+tc.header) {
				t.Fatalf("the warning does not name the header %s:\n%s", tc.header, logs.String())
			}
		})
	}
}

func byAddress(budget limiter.Budget, ip keyfunc.IPOptions, key keyfunc.Func) func(*testing.T, *slog.Logger, http.Handler) (http.Handler, func() error, error) {
	return func(t *testing.T, log *slog.Logger, h http.Handler) (http.Handler, func() error, error) {
		m, err := middleware.New(handle(t, memStore(t, nil), "ip:"), budget, middleware.Options{IP: ip, Key: key, Logger: log})
		if err != nil {
			return nil, nil, err
		}
		return m.Wrap(h), m.Close, nil
	}
}
