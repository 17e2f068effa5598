package middleware_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
)

// ok is the handler measured: like most handlers it sets a content type,
// which gives its response header map its first entries.
var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	w.Write([]byte("ok\n"))
})

// reusedWriter is one ResponseWriter for every request of a benchmark, its
// header map cleared but kept between requests, so that what is measured is
// the middleware's cost and not a recorder's.
type reusedWriter struct {
	h      http.Header
	status int
}

func (w *reusedWriter) Header() http.Header { return w.h }

func (w *reusedWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *reusedWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return len(b), nil
}

// benchRequest is the request every benchmark serves.
func benchRequest() *http.Request {
	r := httptest.NewRequest("GET", "/health", nil)
	r.RemoteAddr = "192.0.2.7:41000"
	return r
}

// benchServe serves one request again and again on one writer, each
// answered with status want.
func benchServe(b *testing.B, h http.Handler, want int) {
	r := benchRequest()
	w := &reusedWriter{h: make(http.Header)}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		w.status = 0
		h.ServeHTTP(w, r)
		if w.status != want {
			b.Fatalf("status %d, want %d", w.status, want)
		}
	}
}

// BenchmarkBareHandler is the yardstick: the handler with no middleware.
func BenchmarkBareHandler(b *testing.B) { benchServe(b, ok, http.StatusOK) }

// BenchmarkPerIPAllowed is an allowed request through PerIP on the memory
// store, headers included: its time less BareHandler's is the middleware's
// added cost.
func BenchmarkPerIPAllowed(b *testing.B) {
	s := memStore(b, nil)
	m, err := perIP(handle(b, s, "health:"), limiter.Budget{Limit: limiter.MaxLimit, Window: time.Hour}, middleware.Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	benchServe(b, m.Wrap(ok), http.StatusOK)
}

// BenchmarkPerIPRefused is a refused request through PerIP on the memory
// store: the answer an attacker over budget gets, fields and 429 included.
func BenchmarkPerIPRefused(b *testing.B) {
	s := memStore(b, nil)
	m, err := perIP(handle(b, s, "health:"), limiter.Budget{Limit: 1, Window: time.Hour}, middleware.Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	h := m.Wrap(ok)
	h.ServeHTTP(httptest.NewRecorder(), benchRequest()) // spends the budget
	benchServe(b, h, http.StatusTooManyRequests)
}

// BenchmarkLimiterAttempt is the limiter's share of PerIPAllowed: the same
// attempt on the same store, without HTTP. PerIPAllowed less BareHandler
// less this is the middleware's own cost.
func BenchmarkLimiterAttempt(b *testing.B) {
	s := memStore(b, nil)
	l, err := limiter.New(handle(b, s, "health:"), limiter.Options{Name: "ip", Budget: limiter.Budget{Limit: limiter.MaxLimit, Window: time.Hour}, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if d, err := l.Attempt(ctx, "192.0.2.7"); err != nil || !d.Allowed {
			b.Fatalf("%v %v", d.Allowed, err)
		}
	}
}

// BenchmarkSignInSuccess is one successful sign-in through SignIn, on the
// memory store, with the count of failures per password off and on: what
// the password's bucket (an HMAC), its two keys and their credit cost.
func BenchmarkSignInSuccess(b *testing.B) {
	for _, tc := range []struct {
		name  string
		spray middleware.SprayOptions
	}{
		{"spray-off", middleware.SprayOptions{Off: true}},
		{"spray-on", middleware.SprayOptions{}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			g, err := middleware.SignIn(handle(b, memStore(b, nil), "signin:"), middleware.SignInOptions{
				Logger: quiet, Spray: tc.spray, Device: middleware.DeviceOptions{Off: true},
				IPAttempts:      limiter.Budget{Limit: limiter.MaxLimit, Window: time.Hour}, // every attempt counts here
				NetworkAttempts: limiter.Budget{Limit: limiter.MaxLimit, Window: time.Hour},
			})
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			h := g.Wrap(ok)
			const body = "username=alice&password=correct+horse+battery+staple"
			w := &reusedWriter{h: make(http.Header)}
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest("POST", "/login", strings.NewReader(body))
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				r.RemoteAddr = "192.0.2.7:41000"
				clear(w.h)
				w.status = 0
				h.ServeHTTP(w, r)
				if w.status != http.StatusOK {
					b.Fatalf("status %d", w.status)
				}
			}
		})
	}
}

// BenchmarkSignInKnownDevice is one successful sign-in through SignIn from
// a known device, on the memory store: its one store update charges the
// device's keys and reads the account's last recovery.
func BenchmarkSignInKnownDevice(b *testing.B) {
	g, err := middleware.SignIn(handle(b, memStore(b, nil), "signin:"), middleware.SignInOptions{
		Logger: quiet, Spray: middleware.SprayOptions{Off: true}, Device: middleware.DeviceOptions{Secret: deviceSecret},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	h := g.Wrap(ok)
	const body = "username=alice&password=correct+horse+battery+staple"
	serve := func(w *reusedWriter, c *http.Cookie) {
		r := httptest.NewRequest("POST", "/login", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.RemoteAddr = "192.0.2.7:41000"
		if c != nil {
			r.AddCookie(c)
		}
		clear(w.h)
		w.status = 0
		h.ServeHTTP(w, r)
		if w.status != http.StatusOK {
			b.Fatalf("status %d", w.status)
		}
	}
	w := &reusedWriter{h: make(http.Header)}
	serve(w, nil)
	device := (&http.Response{Header: w.h}).Cookies()[0]
	b.ReportAllocs()
	for b.Loop() {
		serve(w, device)
	}
}
