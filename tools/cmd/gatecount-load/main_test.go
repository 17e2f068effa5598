package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gatecount/gatecount/internal/loadtest"
	"github.com/gatecount/gatecount/internal/servicetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
		want func(options) bool
	}{
		{nil, true, func(o options) bool {
			return o.store == loadtest.Memory && o.servers == 2 && o.clients == 64 && o.duration == 10*time.Second &&
				o.requests == 20000 && o.callers == 20 && o.budget == 30 && o.databaseURL == loadtest.DefaultPostgresURL
		}},
		{[]string{"-store", "postgres", "-servers", "3", "-duration", "2s"}, true, func(o options) bool {
			return o.store == loadtest.Postgres && o.servers == 3 && o.duration == 2*time.Second
		}},
		{[]string{"-burst", "500", "-rounds", "3"}, true, func(o options) bool { return o.burst == 500 && o.rounds == 3 }},
		{[]string{"-burst", "-1"}, false, nil},
		{[]string{"-burst", "10", "-rounds", "0"}, false, nil},
		{[]string{"-store", "mysql"}, false, nil},
		{[]string{"-servers", "0"}, false, nil},
		{[]string{"-duration", "0s"}, false, nil},
		{[]string{"-budget", "-1"}, false, nil},
		{[]string{"extra"}, false, nil},
		{[]string{"-nosuchflag"}, false, nil},
	} {
		o, err := parse(tc.args, io.Discard)
		if (err == nil) != tc.ok {
			t.Errorf("parse(%q): %v, want ok=%v", tc.args, err, tc.ok)
			continue
		}
		if tc.want != nil && !tc.want(o) {
			t.Errorf("parse(%q) = %+v", tc.args, o)
		}
	}
	if code := run(context.Background(), []string{"-store", "mysql"}, io.Discard, io.Discard); code != 2 {
		t.Errorf("exit status %d for a usage error, want 2", code)
	}
}

// The command end to end, over the memory store: each of two servers admits
// each caller exactly the budget, and the report says so.
func TestRunMemory(t *testing.T) {
	var stdout, stderr strings.Builder
	code := run(context.Background(), []string{"-store", "memory", "-servers", "2", "-callers", "3", "-budget", "5",
		"-requests", "300", "-clients", "8"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	for _, want := range []string{
		"store       memory (not shared), 2 servers",
		"requests    300 in",
		"statuses    200: 30  429: 270",
		"expected 10 per window = budget 5 × 2 servers",
		"admitted   10 (server-1 5, server-2 5)",
		"errors      none",
		"budgets     exact",
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, stdout.String())
		}
	}
}

// The burst mode end to end, over the memory store and PostgreSQL: each
// round's fresh caller is admitted exactly the budget (on each of two
// servers for the memory store, across both for PostgreSQL), every other
// request is refused with 429, and the report says so.
func TestRunBurst(t *testing.T) {
	bin, err := loadtest.Build(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		store, budget, admitted, refused string
	}{
		{"memory", "5", "200: 10", "429: 490"},
		{"postgres", "30", "200: 30", "429: 470"},
	} {
		t.Run(tc.store, func(t *testing.T) {
			args := []string{"-server-bin", bin, "-store", tc.store, "-servers", "2", "-budget", tc.budget, "-burst", "500", "-rounds", "2"}
			if tc.store == "postgres" {
				args = append(args, "-database-url", servicetest.PostgresURL(t))
			}
			var stdout, stderr strings.Builder
			if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
				t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
			}
			for _, want := range []string{
				"burst       2 rounds of 500 concurrent POST /execute, one fresh caller each, split over 2 servers",
				"round 1     caller-000  500 answered:  " + tc.admitted + "  " + tc.refused + "  in ",
				"round 2     caller-001  500 answered:  " + tc.admitted + "  " + tc.refused + "  in ",
				"bursts      exact",
			} {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("report lacks %q:\n%s", want, stdout.String())
				}
			}
		})
	}
}
