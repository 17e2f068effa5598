// Command outside is an app of its own module, as any app outside the
// gatecount repository is, that uses gatecount's short forms:
//
//	GET  /status, /version   chi route group, 100 per minute per client IP (one line)
//	GET  /legacy/report      gorilla/mux route, 10 per minute per client IP (one line)
//	POST /api                per user, 30 per minute, on the store the environment chooses
//
// It reads gatecount's environment (RATE_LIMIT_STORE, DATABASE_URL,
// RATE_LIMIT_STORE_URL, GATECOUNT_SECRET, TRUSTED_PROXIES…) and listens on
// ADDR (default 127.0.0.1:8090). A request's user is the X-User header: a
// stand-in for real authentication.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/gorilla/mux"

	"github.com/gatecount/gatecount"
	"github.com/gatecount/gatecount/keyfunc"

	// The stores the environment may choose: each links its driver and
	// registers its URL schemes. Import only the ones you use.
	_ "github.com/gatecount/gatecount/store/postgres"
	_ "github.com/gatecount/gatecount/store/redis"
	_ "github.com/gatecount/gatecount/store/sqlite"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	h, closeApp, err := app(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer closeApp()
	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = "127.0.0.1:8090"
	}
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Shutdown(context.Background())
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// app builds the routes, and what closes them.
func app(ctx context.Context) (http.Handler, func() error, error) {
	r := chi.NewRouter()

	// A chi route group per client IP: one line, in memory.
	r.Group(func(r chi.Router) {
		r.Use(gatecount.LimitByIP(100, time.Minute))
		r.Get("/status", text("ok"))
		r.Get("/version", text("1.0"))
	})

	// A gorilla/mux route per client IP: one line, in memory.
	legacy := mux.NewRouter()
	legacy.Handle("/legacy/report", gatecount.LimitByIP(10, time.Minute)(text("report"))).Methods("GET")
	r.Handle("/legacy/*", legacy)

	// A per-user route on the shared store the environment chooses.
	limits, err := gatecount.FromEnv(ctx)
	if err != nil {
		return nil, nil, err
	}
	r.With(authenticate, limits.PerCaller("api", 30, time.Minute)).Post("/api", text("done"))

	// The one-line forms answer 500 for a limiter they could not build;
	// refusing to start says so sooner.
	if err := errors.Join(gatecount.InMemory().Err(), limits.Err()); err != nil {
		limits.Close()
		return nil, nil, err
	}
	return r, limits.Close, nil
}

// authenticate stands for the app's authentication: it names the caller
// with keyfunc.WithCallerID, and answers 401 without one.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user := r.Header.Get("X-User")
		if user == "" {
			http.Error(w, "who are you?", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(keyfunc.WithCallerID(r.Context(), user)))
	})
}

func text(s string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, s) }
}
