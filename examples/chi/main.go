// Command chi serves the demo with a chi router, mounting each limiter per
// route with r.With. It takes the same environment as examples/stdlib.
package main

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/gatecount/gatecount/examples/internal/demo"
)

func main() { demo.Main("chi", routes) }

// routes mounts each limiter per route with r.With, or per group with Use.
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
	r.With(app.Verify.Wrap).Post("/password-reset/complete", app.PasswordResetCompleteHandler().ServeHTTP)
	r.With(app.Verify.Wrap).Post("/verify", app.VerifyHandler().ServeHTTP)
	return r
}
