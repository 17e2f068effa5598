// Command gorilla serves the demo with a gorilla/mux router, mounting each
// limiter per route, or per subrouter with Use. It takes the same
// environment as examples/stdlib.
package main

import (
	"net/http"

	"github.com/gorilla/mux"

	"github.com/gatecount/gatecount/examples/internal/demo"
)

func main() { demo.Main("gorilla", routes) }

// routes mounts each limiter per route, or per subrouter with Use.
func routes(app *demo.App) http.Handler {
	r := mux.NewRouter()
	r.Handle("/execute", app.Authenticate(app.Execute.Wrap(app.ExecuteHandler()))).Methods("POST")
	health := r.NewRoute().Subrouter()
	health.Use(app.Health.Wrap)
	health.Handle("/health", app.HealthHandler()).Methods("GET")
	health.Handle("/ready", app.ReadyHandler()).Methods("GET")
	r.Handle("/login", app.Login.Wrap(app.LoginHandler())).Methods("POST")
	r.Handle("/password-reset", app.Reset.Wrap(app.PasswordResetHandler())).Methods("POST")
	r.Handle("/password-reset/complete", app.Verify.Wrap(app.PasswordResetCompleteHandler())).Methods("POST")
	r.Handle("/verify", app.Verify.Wrap(app.VerifyHandler())).Methods("POST")
	return r
}
