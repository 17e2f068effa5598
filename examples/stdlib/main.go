// Command stdlib serves the demo with net/http's ServeMux:
//
//	POST /execute  limited per caller (Authorization: Bearer TOKEN)
//	GET  /health   limited per IP
//	GET  /ready    limited per IP
//	GET  /login           the sign-in page, which answers a challenge
//	GET  /login/pow.js    its proof-of-work solver (RATE_LIMIT_LOGIN_CHALLENGE=pow)
//	POST /login           sign-in, throttled per account, account and IP, and IP
//	POST /password-reset  throttled per address and IP, silently
//	POST /password-reset/complete  a code sent and a new password, throttled as /verify: the account recovers
//	POST /verify          the code a reset logged, throttled per address, address and IP, and IP
//
// It reads its settings from the environment (see docs/operators.md and
// docs/production.md). It listens on ADDR (default 127.0.0.1:8080), and
// shuts down gracefully on SIGINT or SIGTERM.
package main

import (
	"net/http"

	"github.com/gatecount/gatecount/examples/internal/demo"
)

func main() { demo.Main("stdlib", routes) }

// routes mounts each limiter on its own routes.
func routes(app *demo.App) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /execute", app.Authenticate(app.Execute.Wrap(app.ExecuteHandler())))
	mux.Handle("GET /health", app.Health.Wrap(app.HealthHandler()))
	mux.Handle("GET /ready", app.Health.Wrap(app.ReadyHandler()))
	mux.Handle("GET /login", app.SignInPageHandler())
	mux.Handle("GET /login/pow.js", app.ChallengeScriptHandler())
	mux.Handle("POST /login", app.Login.Wrap(app.LoginHandler()))
	mux.Handle("POST /password-reset", app.Reset.Wrap(app.PasswordResetHandler()))
	mux.Handle("POST /password-reset/complete", app.Verify.Wrap(app.PasswordResetCompleteHandler()))
	mux.Handle("POST /verify", app.Verify.Wrap(app.VerifyHandler()))
	return mux
}
