// Command chi shows gatecount on a chi router: it builds each limiter from
// the environment with the front door, gatecount.FromEnv, and mounts it per
// route with r.With, or per route group with r.Use. It serves the core
// routes of examples/stdlib, with the same budgets:
//
//	POST /execute         per caller (Authorization: Bearer alice-token or bob-token), RATE_LIMIT_EXECUTE_PER_MINUTE
//	GET  /health, /ready  per client IP, one budget for both, RATE_LIMIT_HEALTH_PER_MINUTE
//	POST /login           the sign-in guard (username alice, password correct-horse), RATE_LIMIT_LOGIN_*
//	POST /password-reset  the send guard (email), silently, RATE_LIMIT_RESET_*
//
// The store, its secret and the trusted proxies are gatecount's variables
// (RATE_LIMIT_STORE, DATABASE_URL, RATE_LIMIT_STORE_URL, GATECOUNT_SECRET,
// TRUSTED_PROXIES…). It listens on ADDR (default 127.0.0.1:8080) and shuts
// down gracefully on SIGINT or SIGTERM. The handlers it limits stand in
// for an app's own (examples/internal/standin). It is a module of its own,
// as an app is: run it from its directory with go run .
package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/gatecount/gatecount"
	"github.com/gatecount/gatecount/config"
	"github.com/gatecount/gatecount/examples/internal/standin"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"

	// The stores the environment may choose: each links its driver and
	// registers its URL schemes. Import only the ones you use.
	_ "github.com/gatecount/gatecount/store/postgres"
	_ "github.com/gatecount/gatecount/store/redis"
	_ "github.com/gatecount/gatecount/store/sqlite"
)

func main() { standin.Main("chi", newApp) }

// newApp builds the limiters from the environment read through lookup and
// mounts them, around the app's handlers, on a chi router. The function it
// returns closes the limiters and the store.
func newApp(ctx context.Context, lookup func(string) (string, bool), log *slog.Logger) (http.Handler, func() error, error) {
	// The store, the secret, the trusted proxies and the guards' budgets,
	// from gatecount's variables.
	limits, err := gatecount.FromEnv(ctx, gatecount.WithLookup(lookup), gatecount.WithLogger(log))
	if err != nil {
		return nil, nil, err
	}
	// The budgets of the app's own routes, from its own variables, with
	// config's checks: "30", "30,sliding" or "30,bucket:60".
	v := config.NewVars(lookup)
	execute := v.Budget("RATE_LIMIT_EXECUTE_PER_MINUTE", limiter.Budget{Limit: 30, Window: time.Minute})
	health := v.Budget("RATE_LIMIT_HEALTH_PER_MINUTE", limiter.Budget{Limit: 300, Window: time.Minute})
	app := &standin.App{Store: limits.Store(), Log: log}

	r := chi.NewRouter()
	// Per caller: 401 without one, counted in memory while the store is down.
	r.With(app.Authenticate, limits.PerCaller("execute", execute.Limit, execute.Window,
		gatecount.CountedBy(execute.Algorithm, execute.Burst))).Post("/execute", app.Execute)
	r.Group(func(r chi.Router) {
		// One budget per client IP for the group; through while the store is down.
		r.Use(limits.PerIP("health", health.Limit, health.Window, gatecount.CountedBy(health.Algorithm, health.Burst)))
		r.Get("/health", app.Health)
		r.Get("/ready", app.Ready)
	})
	// The sign-in guard (handle login:) reads the account from the username
	// field; the send guard (handle reset:) the address from email.
	r.With(limits.SignIn(middleware.SignInOptions{Failed: http.HandlerFunc(standin.SignInFailed)})).Post("/login", app.SignIn)
	r.With(limits.Send(middleware.SendOptions{Name: "reset"})).Post("/password-reset", app.PasswordReset)

	// A limiter that could not be built answers 500; refuse to start instead.
	if err := errors.Join(v.Err(), limits.Err()); err != nil {
		return nil, nil, errors.Join(err, limits.Close())
	}
	return r, limits.Close, nil
}
