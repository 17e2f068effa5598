package middleware_test

import (
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store"
)

// Two limiters stacked on one route each keep their members in both
// RateLimit fields, on an admitted request and on a refused one, whichever
// of them refuses.
func TestStackedLimitersKeepEveryMember(t *testing.T) {
	s := memStore(t, nil)
	minute, err := perIP(handle(t, s, "minute:"), limiter.Budget{Limit: 10, Window: time.Minute}, middleware.Options{Name: "minute", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer minute.Close()
	day, err := perIP(handle(t, s, "day:"), limiter.Budget{Limit: 2, Window: 24 * time.Hour}, middleware.Options{Name: "day", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer day.Close()
	next := &counting{}
	h := minute.Wrap(day.Wrap(next))
	const policy = `"minute";q=10;w=60, "day";q=2;w=86400`
	for i, tc := range []struct {
		code int
		rl   string
	}{
		{200, `"minute";r=9;t=60, "day";r=1;t=86400`},
		{200, `"minute";r=8;t=60, "day";r=0;t=86400`},
		{429, `"minute";r=7;t=60, "day";r=0;t=86400`}, // the outer counted it; the inner refused
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != tc.code || w.Header().Get("RateLimit-Policy") != policy || w.Header().Get("RateLimit") != tc.rl {
			t.Fatalf("request %d: %d\nRateLimit-Policy: %s\nRateLimit: %s\nwant %d, %s, %s", i+1, w.Code,
				w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"), tc.code, policy, tc.rl)
		}
		if n := len(w.Header().Values("RateLimit")); n != 1 {
			t.Fatalf("request %d: %d RateLimit lines, want one list", i+1, n)
		}
	}
	if got := next.runs.Load(); got != 2 {
		t.Fatalf("handler ran %d times, want 2", got)
	}
}

// Two limiters of one store with the same name are refused: their fields,
// logs and metrics could not be told apart.
func TestSameNameOnOneStoreRefused(t *testing.T) {
	s := memStore(t, nil)
	b := limiter.Budget{Limit: 10, Window: time.Minute}
	first, err := perIP(handle(t, s, "a:"), b, middleware.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	_, err = perIP(handle(t, s, "b:"), b, middleware.Options{Logger: quiet})
	var ne *store.NameError
	if !errors.Is(err, store.ErrDuplicateName) || !errors.As(err, &ne) || ne.Name != "ip" || ne.First != "a:" || ne.Second != "b:" {
		t.Fatalf("second unnamed PerIP on one store: %v, want a *store.NameError for \"ip\"", err)
	}
	// Another store may use the name.
	other, err := perIP(handle(t, memStore(t, nil), "a:"), b, middleware.Options{Logger: quiet})
	if err != nil {
		t.Fatalf("the name on another store: %v", err)
	}
	other.Close()
}
