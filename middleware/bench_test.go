package middleware_test

import (
	"net/http"
	"net/http/httptest"
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

func benchServe(b *testing.B, h http.Handler) {
	r := httptest.NewRequest("GET", "/health", nil)
	r.RemoteAddr = "192.0.2.7:41000"
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d", w.Code)
		}
	}
}

// BenchmarkBareHandler is the yardstick: the handler with no middleware.
func BenchmarkBareHandler(b *testing.B) { benchServe(b, ok) }

// BenchmarkPerIPAllowed is an allowed request through PerIP on the memory
// store, headers included.
func BenchmarkPerIPAllowed(b *testing.B) {
	s := memStore(b, nil)
	m, err := middleware.PerIP(handle(b, s, "health:"), limiter.Budget{Limit: limiter.MaxLimit, Window: time.Hour}, middleware.Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	benchServe(b, m.Wrap(ok))
}
