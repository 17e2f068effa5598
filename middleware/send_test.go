package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
)

// mailer is a password-reset handler that "sends" to known addresses.
type mailer struct{ sent atomic.Int64 }

func (m *mailer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if dest, _ := middleware.Account(r); dest == "alice@example.com" {
		m.sent.Add(1)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	w.Write([]byte(middleware.DefaultAcceptedBody))
}

func reset(h http.Handler, ip, email string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", "/password-reset", strings.NewReader("email="+email))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = ip + ":5000"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestSendSilent(t *testing.T) {
	s := memStore(t, nil)
	g, err := middleware.Send(handle(t, s, "reset:"), middleware.SendOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	m := &mailer{}
	h := g.Wrap(m)
	var first []byte
	for i := range 5 {
		for _, email := range []string{"Alice@Example.COM ", "nobody@example.com"} {
			w := reset(h, "192.0.2.1", email)
			if w.Code != 202 || w.Header().Get("RateLimit") != "" {
				t.Fatalf("%s, request %d: %d %v", email, i+1, w.Code, w.Header())
			}
			if first == nil {
				first = dump(w)
			} else if string(dump(w)) != string(first) {
				t.Fatalf("answers differ:\n%s\n%s", first, dump(w))
			}
		}
	}
	if m.sent.Load() != 3 {
		t.Fatalf("sent %d times, want the budget of 3", m.sent.Load())
	}
	// Another destination is unaffected (another IP, as this one has spent
	// 10 of its 20).
	m2 := &mailer{}
	if reset(g.Wrap(m2), "192.0.2.2", "alice@example.org").Code != 202 {
		t.Fatal("other destination")
	}
	// A malformed address is answered the same, and sends nothing.
	if w := reset(h, "192.0.2.3", "not an address"); string(dump(w)) != string(first) {
		t.Fatalf("malformed: %s", dump(w))
	}
}

func TestSendPerIP(t *testing.T) {
	s := memStore(t, nil)
	g, _ := middleware.Send(handle(t, s, "reset:"), middleware.SendOptions{Logger: quiet, PerIP: limiter.Budget{Limit: 4, Window: time.Hour}})
	defer g.Close()
	m := &mailer{}
	h := g.Wrap(m)
	for range 10 {
		reset(h, "192.0.2.1", "alice@example.com")
		reset(h, "192.0.2.1", "x@example.com")
	}
	if m.sent.Load() != 2 {
		t.Fatalf("sent %d", m.sent.Load())
	}
}

func TestSendReveal(t *testing.T) {
	s := memStore(t, nil)
	g, _ := middleware.Send(handle(t, s, "reset:"), middleware.SendOptions{Logger: quiet, Reveal: true, PerDestination: limiter.Budget{Limit: 1, Window: time.Hour}})
	defer g.Close()
	h := g.Wrap(&mailer{})
	if w := reset(h, "192.0.2.1", "alice@example.com"); w.Code != 202 || w.Header().Get("RateLimit") == "" {
		t.Fatalf("first: %d %v", w.Code, w.Header())
	}
	if w := reset(h, "192.0.2.1", "alice@example.com"); w.Code != 429 || w.Header().Get("Retry-After") == "" {
		t.Fatalf("second: %d", w.Code)
	}
	if w := reset(h, "192.0.2.1", "junk"); w.Code != 400 {
		t.Fatalf("malformed: %d", w.Code)
	}
}
