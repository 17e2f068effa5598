package main

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/gatecount/gatecount"
	"github.com/gatecount/gatecount/keyfunc"
	_ "github.com/gatecount/gatecount/store/postgres" // or store/sqlite, store/redis
)

// The quick start from the environment, on a chi router: FromEnv opens the
// store the environment chooses (here none is named, so memory) and trusts
// the proxies it names.
func Example_fromEnv() {
	// authenticate stands for your authentication: it names the caller with
	// keyfunc.WithCallerID, which PerCaller counts by.
	authenticate := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := keyfunc.WithCallerID(r.Context(), r.Header.Get("X-User"))
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
	api := func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "done") }
	search := func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "results") }

	limits, err := gatecount.FromEnv(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	defer limits.Close()
	r := chi.NewRouter()
	r.With(authenticate, limits.PerCaller("api", 30, time.Minute)).Post("/api", api)
	r.With(limits.PerIP("search", 100, time.Minute)).Get("/search", search)
	if err := limits.Err(); err != nil { // a budget out of range, a name used twice
		log.Fatal(err)
	}

	for i := 1; i <= 31; i++ {
		req := httptest.NewRequest("POST", "/api", nil)
		req.Header.Set("X-User", "alice")
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		if i >= 30 {
			fmt.Printf("alice's request %d: %d %s\n", i, w.Code, w.Header().Get("RateLimit"))
		}
	}
	// Output:
	// alice's request 30: 200 "api";r=0;t=60
	// alice's request 31: 429 "api";r=0;t=60
}
