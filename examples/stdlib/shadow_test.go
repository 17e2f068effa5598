package main

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/gatecount/gatecount/examples/internal/demotest"
	"github.com/gatecount/gatecount/limiter"
)

// Issue 27's shadow acceptance: with RATE_LIMIT_SHADOW=true, 40 POST
// /execute for one caller (budget 30) all reach the handler, none carries a
// rate-limit field, and the metrics count 10 shadow refusals; with
// RATE_LIMIT_SHADOW=health, /execute still enforces.
func TestShadowAcceptance(t *testing.T) {
	for _, tc := range []struct {
		shadow                     string
		runs, shadowDenied, denied int64
		refused                    int // answers 429
	}{
		{"true", 40, 10, 0, 0},
		{"health", 30, 0, 10, 10},
	} {
		t.Run("RATE_LIMIT_SHADOW="+tc.shadow, func(t *testing.T) {
			logs := &demotest.Logs{}
			s := demotest.StartLogged(t, routes, map[string]string{"RATE_LIMIT_SHADOW": tc.shadow, "RATE_LIMIT_EXECUTE_PER_MINUTE": "30"},
				slog.New(slog.NewTextHandler(logs, nil)))
			before := counters(s)
			fields, refused := 0, 0
			for range 40 {
				res, _ := demotest.Do(t, "POST", s.URL+"/execute", "alice-token")
				for _, name := range []string{"RateLimit", "RateLimit-Policy", "Retry-After"} {
					if res.Header.Get(name) != "" {
						fields++
					}
				}
				switch res.StatusCode {
				case 200:
				case 429:
					refused++
				default:
					t.Fatalf("POST /execute: %d", res.StatusCode)
				}
			}
			d, figures := since(before, counters(s))
			t.Logf("metrics: %s", figures)
			if n := s.App.Executions("alice"); n != tc.runs {
				t.Errorf("the handler ran %d times, want %d", n, tc.runs)
			}
			if refused != tc.refused {
				t.Errorf("%d answers 429, want %d", refused, tc.refused)
			}
			if d["decisions.execute.shadow_denied"] != tc.shadowDenied || d["decisions.execute.denied"] != tc.denied || d["decisions.execute.allowed"] != 30 {
				t.Errorf("decisions of execute: %s; want 30 allowed, %d shadow_denied, %d denied", figures, tc.shadowDenied, tc.denied)
			}
			lines := strings.Count(logs.String(), "kind="+limiter.KindShadowDenied)
			if want := min(tc.shadowDenied, 1); int64(lines) != want || strings.Contains(logs.String(), "alice") {
				t.Errorf("%d shadow log lines, want %d (one per key per window, never naming it):\n%s", lines, want, logs)
			}
			if tc.shadow == "true" && fields != 0 {
				t.Errorf("%d rate-limit fields in shadow answers, want none", fields)
			}
			if tc.shadow != "true" && fields == 0 {
				t.Error("no rate-limit fields while /execute enforces")
			}
		})
	}
}

// RATE_LIMIT_BLOCK_NETWORKS answers every route 403; RATE_LIMIT_EXEMPT_NETWORKS
// lifts the per-address limit of /health, never a caller's on /execute.
func TestNetworks(t *testing.T) {
	blocked := demotest.Start(t, routes, map[string]string{"RATE_LIMIT_BLOCK_NETWORKS": "127.0.0.0/8, ::1"})
	for _, r := range []struct{ method, path, token string }{{"GET", "/health", ""}, {"POST", "/execute", "alice-token"}, {"POST", "/login", ""}, {"POST", "/password-reset", ""}} {
		if res, body := demotest.Do(t, r.method, blocked.URL+r.path, r.token); res.StatusCode != 403 {
			t.Errorf("%s %s from a blocked network: %d %s", r.method, r.path, res.StatusCode, body)
		}
	}
	if n := blocked.App.Executions("alice"); n != 0 {
		t.Errorf("a blocked request ran the handler %d times", n)
	}
	exempt := demotest.Start(t, routes, map[string]string{"RATE_LIMIT_EXEMPT_NETWORKS": "127.0.0.0/8, ::1",
		"RATE_LIMIT_HEALTH_PER_MINUTE": "2", "RATE_LIMIT_EXECUTE_PER_MINUTE": "3"})
	for i := range 5 {
		if res, _ := demotest.Do(t, "GET", exempt.URL+"/health", ""); res.StatusCode != 200 || res.Header.Get("RateLimit") != "" {
			t.Errorf("health check %d from an exempt network: %d, RateLimit %q", i+1, res.StatusCode, res.Header.Get("RateLimit"))
		}
	}
	var codes []int
	for range 4 {
		res, _ := demotest.Do(t, "POST", exempt.URL+"/execute", "alice-token")
		codes = append(codes, res.StatusCode)
	}
	if codes[2] != 200 || codes[3] != 429 {
		t.Errorf("/execute from an exempt network: %v, want the caller's budget of 3 to hold", codes)
	}
}
