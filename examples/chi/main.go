// Command chi serves the demo with a chi router, mounting each limiter per
// route with r.With. It takes the same environment as examples/stdlib.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-chi/chi/v5"

	"github.com/gatecount/gatecount/examples/internal/demo"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.LookupEnv, log, nil); err != nil {
		fmt.Fprintln(os.Stderr, "chi:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, lookup func(string) (string, bool), log *slog.Logger, ready func(*demo.App, string)) error {
	app, err := demo.New(ctx, lookup, log)
	if err != nil {
		return err
	}
	defer app.Close()
	return demo.Serve(ctx, app.Addr, routes(app), log, func(addr string) {
		if ready != nil {
			ready(app, addr)
		}
	})
}

func routes(app *demo.App) http.Handler {
	r := chi.NewRouter()
	r.With(app.Authenticate, app.Execute.Wrap).Post("/execute", app.ExecuteHandler().ServeHTTP)
	r.Group(func(r chi.Router) {
		r.Use(app.Health.Wrap)
		r.Get("/health", app.HealthHandler().ServeHTTP)
		r.Get("/ready", app.ReadyHandler().ServeHTTP)
	})
	r.With(app.Login.Wrap).Post("/login", app.LoginHandler().ServeHTTP)
	r.With(app.Reset.Wrap).Post("/password-reset", app.PasswordResetHandler().ServeHTTP)
	return r
}
