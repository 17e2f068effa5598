package demotest

import (
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gatecount/gatecount/examples/internal/demo"
)

// CheckVerify checks POST /verify end to end. 200 concurrent wrong codes
// for alice reach the check exactly the code guard's budget for one address
// (5). A stranger's wrong codes for an unknown address are answered alike.
// The code POST /password-reset logged then verifies once from another
// address, and never again.
func CheckVerify(t *testing.T, routes Routes) {
	logs := &Logs{}
	env := map[string]string{"TRUSTED_PROXIES": "127.0.0.1/32", "DEMO_USERS": AttackEnv["DEMO_USERS"]}
	s := StartLogged(t, routes, env, slog.New(slog.NewTextHandler(logs, nil)))
	Post(t, s.URL+"/password-reset", "192.0.2.150", url.Values{"email": {"alice@example.com"}})
	sent := logs.Lines(demo.KindResetSent)
	_, code, ok := strings.Cut(strings.Join(sent, ""), " code=")
	if len(sent) != 1 || !ok || code == "" {
		t.Fatalf("no code logged: %q", sent)
	}
	code = strings.Fields(code)[0]

	var wg sync.WaitGroup
	var refused atomic.Int64
	for range 200 {
		wg.Go(func() {
			resp, _ := Post(t, s.URL+"/verify", "192.0.2.151", url.Values{"email": {"alice@example.com"}, "code": {"wrong"}})
			if resp.StatusCode == 429 {
				refused.Add(1)
			}
		})
	}
	wg.Wait()
	if n := s.App.CodeChecks(); n != 5 || refused.Load() != 195 {
		t.Fatalf("%d of 200 concurrent wrong codes reached the check, %d refused; want 5 and 195", n, refused.Load())
	}
	known, kbody := Post(t, s.URL+"/verify", "192.0.2.152", url.Values{"email": {"alice@example.com"}, "code": {"wrong"}})
	unknown, ubody := Post(t, s.URL+"/verify", "192.0.2.153", url.Values{"email": {"ghost@example.com"}, "code": {"wrong"}})
	if known.StatusCode != 401 || unknown.StatusCode != 401 || kbody != ubody {
		t.Fatalf("wrong code: alice %d %q, unknown %d %q; want the same 401", known.StatusCode, kbody, unknown.StatusCode, ubody)
	}
	for i, want := range []int{200, 401} {
		if resp, body := Post(t, s.URL+"/verify", "192.0.2.154", url.Values{"email": {"Alice@Example.com"}, "code": {code}}); resp.StatusCode != want {
			t.Fatalf("the logged code, use %d: %d %s, want %d", i+1, resp.StatusCode, body, want)
		}
	}
}
