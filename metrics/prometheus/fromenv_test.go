package prometheus_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gatecount/gatecount"
	"github.com/gatecount/gatecount/middleware"

	gcprom "github.com/gatecount/gatecount/metrics/prometheus"
)

// One option of gatecount.FromEnv attaches the collector to the limiters
// and guards it builds and to the store it opens: no detour through
// config.Open and gatecount.New.
func TestFromEnvWithObserver(t *testing.T) {
	c := gcprom.New("gatecount")
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	env := map[string]string{"RATE_LIMIT_SINGLE_INSTANCE": "true", "RATE_LIMIT_LOGIN_IP_ATTEMPTS": "1"}
	limits, err := gatecount.FromEnv(context.Background(),
		gatecount.WithLookup(func(k string) (string, bool) { v, ok := env[k]; return v, ok }),
		gatecount.WithObserver(c),
		gatecount.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer limits.Close()
	login := limits.SignIn(middleware.SignInOptions{})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 2 {
		r := httptest.NewRequest("POST", "/login", strings.NewReader(url.Values{"username": {"alice"}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.RemoteAddr = "198.51.100.7:1234"
		login.ServeHTTP(httptest.NewRecorder(), r)
	}
	want := `
# HELP gatecount_decisions_total Decisions of each limiter, by outcome.
# TYPE gatecount_decisions_total counter
gatecount_decisions_total{limiter="login",outcome="allowed"} 1
gatecount_decisions_total{limiter="login",outcome="denied"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "gatecount_decisions_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c, "gatecount_store_call_duration_seconds"); n == 0 {
		t.Fatal("no store call heard")
	}
}
