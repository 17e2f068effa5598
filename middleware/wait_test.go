package middleware_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
)

// A request waiting for a busy store ends with an answer, never a cut
// connection, and its handler never runs for nobody. With the store's one
// slot held: a request whose deadline passes while it waits is answered
// 429 with Retry-After 1; one whose client hangs up while it waits gets
// nothing. Neither reaches the handler, nor is counted: once the store
// answers, the key still has its whole budget. (A full queue's answer is
// TestOverloadedBurstExact's, in package limiter.)
func TestBusyStoreAnswers(t *testing.T) {
	s, take, release := heldStore(t)
	proxies, _ := keyfunc.ParseNetworks("127.0.0.1/32")
	const budget = 3
	m, err := middleware.New(handle(t, s, "api:"), limiter.Budget{Limit: budget, Window: time.Minute},
		middleware.Options{Name: "api", Logger: quiet, IP: keyfunc.IPOptions{TrustedProxies: proxies}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	var ran atomic.Int64
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran.Add(1) }))
	request := func(ctx context.Context) *httptest.ResponseRecorder {
		r := httptest.NewRequestWithContext(ctx, "GET", "/", nil)
		r.RemoteAddr = "127.0.0.1:4000"
		r.Header.Set("X-Forwarded-For", "192.0.2.1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	take() // the store's one slot is held

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	w := request(ctx)
	cancel()
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" {
		t.Errorf("a request whose deadline passed waiting for the store: %d, Retry-After %q; want 429, 1", w.Code, w.Header().Get("Retry-After"))
	}

	ctx, cancel = context.WithCancel(context.Background())
	gone := make(chan *httptest.ResponseRecorder, 1)
	go func() { gone <- request(ctx) }()
	for i := 0; s.Queued() != 1; i++ {
		if i == 1000 {
			t.Fatal("the request did not wait for the store within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel() // the waiting request's client hangs up
	if w := <-gone; w.Code != http.StatusOK || w.Body.Len() != 0 || len(w.Header()) != 0 {
		t.Errorf("a request whose client hung up while it waited: %d %v %q, want nothing written", w.Code, w.Header(), w.Body)
	}
	if n := ran.Load(); n != 0 {
		t.Errorf("the handler ran %d times for requests the store never counted, want 0", n)
	}
	release()
	for i := range budget {
		if w := request(context.Background()); w.Code != http.StatusOK {
			t.Fatalf("request %d once the store answers: %d, want 200: the waits counted nothing", i+1, w.Code)
		}
	}
	if w := request(context.Background()); w.Code != http.StatusTooManyRequests {
		t.Errorf("request %d once the store answers: %d, want 429", budget+1, w.Code)
	}
}
