package demotest

import (
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
)

// NewSecret returns a GATECOUNT_SECRET of its own for one test, so that its
// counts never meet another run's in a shared store.
func NewSecret() string {
	b := make([]byte, 32)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// CheckShared checks that two servers over one shared store share every
// budget exactly. They start with RATE_LIMIT_EXECUTE_PER_MINUTE=30 and the
// default sign-in budgets. Concurrent requests split across both admit
// exactly the budget. Concurrent wrong passwords for one account reach the
// password check exactly as often as the failures budget allows.
func CheckShared(t *testing.T, a, b *Server) {
	servers := []*Server{a, b}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if res, _ := Do(t, "POST", servers[i%2].URL+"/execute", "alice-token"); res.StatusCode == 200 {
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := admitted.Load(); n != 30 {
		t.Errorf("%d of 100 requests over two servers admitted, want the budget of 30", n)
	}
	if n := a.App.Executions("alice") + b.App.Executions("alice"); n != 30 {
		t.Errorf("work done %d times over two servers, want 30", n)
	}
	checks := a.App.PasswordChecks() + b.App.PasswordChecks()
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			Post(t, servers[i%2].URL+"/login", "192.0.2.77", url.Values{"username": {"alice"}, "password": {"wrong"}})
		}()
	}
	wg.Wait()
	if n := a.App.PasswordChecks() + b.App.PasswordChecks() - checks; n != 5 {
		t.Errorf("%d of 200 concurrent wrong passwords over two servers reached the check, want 5", n)
	}
}
