// Command chi shows gatecount on a chi router: it builds each limiter from
// the environment and mounts it per route with r.With, or per route group
// with r.Use. It serves the core routes of examples/stdlib, with the same
// budgets:
//
//	POST /execute         per caller (Authorization: Bearer alice-token or bob-token), RATE_LIMIT_EXECUTE_PER_MINUTE
//	GET  /health, /ready  per client IP, one budget for both, RATE_LIMIT_HEALTH_PER_MINUTE
//	POST /login           the sign-in guard (username alice, password correct-horse), RATE_LIMIT_LOGIN_*
//	POST /password-reset  the send guard (email), silently, RATE_LIMIT_RESET_*
//
// The store, its secret and the trusted proxies are gatecount's variables
// (RATE_LIMIT_STORE, DATABASE_URL, RATE_LIMIT_STORE_URL, GATECOUNT_SECRET,
// TRUSTED_PROXIES…). It listens on ADDR (default 127.0.0.1:8080) and shuts
// down gracefully on SIGINT or SIGTERM. It is a module of its own, as an
// app is: run it from its directory with go run .
package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/gatecount/gatecount"
	"github.com/gatecount/gatecount/config"
	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store"

	// The stores the environment may choose: each links its driver and
	// registers its URL schemes. Import only the ones you use.
	_ "github.com/gatecount/gatecount/store/postgres"
	_ "github.com/gatecount/gatecount/store/redis"
	_ "github.com/gatecount/gatecount/store/sqlite"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := serve(ctx, os.LookupEnv, log)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chi:", err)
		os.Exit(1)
	}
}

// newApp builds the limiters from the environment read through lookup and
// mounts them, with the app's handlers, on a chi router. The function it
// returns closes the limiters and the store.
func newApp(ctx context.Context, lookup func(string) (string, bool), log *slog.Logger) (http.Handler, func() error, error) {
	// The budgets of the app's own routes, from its own variables, with
	// config's checks: "30", "30,sliding" or "30,bucket:60".
	v := config.NewVars(lookup)
	executeBudget := v.Budget("RATE_LIMIT_EXECUTE_PER_MINUTE", limiter.Budget{Limit: 30, Window: time.Minute})
	healthBudget := v.Budget("RATE_LIMIT_HEALTH_PER_MINUTE", limiter.Budget{Limit: 300, Window: time.Minute})
	if err := v.Err(); err != nil {
		return nil, nil, err
	}

	// The store, the secret, the trusted proxies and the guards' budgets,
	// from gatecount's variables.
	limits, err := gatecount.FromEnv(ctx, gatecount.WithLookup(lookup), gatecount.WithLogger(log))
	if err != nil {
		return nil, nil, err
	}
	a := &demo{
		tokens:    map[string]string{"alice-token": "alice", "bob-token": "bob"},
		passwords: map[string]string{"alice": "correct-horse", "bob": "battery-staple"},
		store:     limits.Store(),
		log:       log,
	}
	execute, errExecute := routeLimiter(limits, "execute", executeBudget, middleware.PerCaller, log)
	health, errHealth := routeLimiter(limits, "health", healthBudget, middleware.PerIP, log)
	// The sign-in guard (handle login:) reads the account from the
	// username field; the send guard (handle reset:) the address from email.
	login := limits.SignIn(middleware.SignInOptions{Failed: http.HandlerFunc(signInFailed)})
	reset := limits.Send(middleware.SendOptions{Name: "reset"})
	closeAll := func() error {
		var errs []error
		for _, m := range []*middleware.Middleware{execute, health} {
			if m != nil {
				errs = append(errs, m.Close())
			}
		}
		return errors.Join(append(errs, limits.Close())...)
	}
	if err := errors.Join(errExecute, errHealth, limits.Err()); err != nil {
		closeAll()
		return nil, nil, err
	}

	return routes(execute, health, login, reset, a), closeAll, nil
}

// routes mounts the limiters, around the app's handlers, on a chi router:
// per route with r.With, or per route group with r.Use.
func routes(execute, health *middleware.Middleware, login, reset func(http.Handler) http.Handler, app *demo) http.Handler {
	r := chi.NewRouter()
	r.With(app.authenticate, execute.Wrap).Post("/execute", app.execute)
	r.Group(func(r chi.Router) {
		r.Use(health.Wrap) // one budget per client IP for the group
		r.Get("/health", app.health)
		r.Get("/ready", app.ready)
	})
	r.With(login).Post("/login", app.signIn)
	r.With(reset).Post("/password-reset", app.passwordReset)
	return r
}

// routeLimiter builds a limiter of one key (middleware.PerCaller or PerIP)
// with a budget of the app's own, on a store handle named after it. It
// takes the trusted proxies, shadow mode and networks of the environment,
// as limits' own limiters do.
func routeLimiter(limits *gatecount.Limits, name string, b limiter.Budget,
	build func(*store.Handle, limiter.Budget, middleware.Options) (*middleware.Middleware, error), log *slog.Logger,
) (*middleware.Middleware, error) {
	h, err := limits.Store().Handle(name + ":")
	if err != nil {
		return nil, err
	}
	return build(h, b, middleware.Options{
		Name: name, IP: limits.IP(), Shadow: limits.ShadowOn(name), Networks: limits.Networks(), Logger: log,
	})
}

// serve serves the app on ADDR until ctx ends, then shuts down gracefully.
func serve(ctx context.Context, lookup func(string) (string, bool), log *slog.Logger) error {
	h, closeApp, err := newApp(ctx, lookup, log)
	if err != nil {
		return err
	}
	defer closeApp()
	addr, ok := lookup("ADDR")
	if !ok || addr == "" {
		addr = "127.0.0.1:8080"
	}
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout: 15 * time.Second, WriteTimeout: 15 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	log.Info("listening", "kind", "server-listening", "addr", addr)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// demo stands in for a real application: the callers and accounts of
// examples/stdlib's defaults, and reset mails that are only logged.
type demo struct {
	tokens    map[string]string // bearer token → caller
	passwords map[string]string // account, as the guard counts it → password
	store     *store.Store
	log       *slog.Logger
}

// authenticate stands for the app's authentication: it names the caller of
// a known bearer token with keyfunc.WithCallerID, which the per-caller
// limiter counts by, and answers 401 without one, before any limiter.
func (a *demo) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		caller, ok := a.tokens[token]
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="gatecount-demo"`)
			http.Error(w, "missing or unknown bearer token", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(keyfunc.WithCallerID(r.Context(), caller)))
	})
}

// execute stands for the route's real work.
func (a *demo) execute(w http.ResponseWriter, r *http.Request) {
	caller, _ := keyfunc.CallerIDFrom(r.Context())
	fmt.Fprintf(w, "done for %s\n", caller)
}

func (a *demo) health(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") }

// ready answers 503 while the store's breaker is open.
func (a *demo) ready(w http.ResponseWriter, r *http.Request) {
	if a.store.BreakerOpen() {
		http.Error(w, "store unavailable", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}

// signIn checks the password of the account the sign-in guard counted
// (middleware.Account), and tells the guard how it went. An unknown account
// is answered as a wrong password.
func (a *demo) signIn(w http.ResponseWriter, r *http.Request) {
	account, _ := middleware.Account(r)
	want, known := a.passwords[account]
	fields, err := keyfunc.BodyFields(r, keyfunc.BodyOptions{}, "password") // the guard's own reader
	if err != nil || !known || subtle.ConstantTimeCompare([]byte(fields[0]), []byte(want)) != 1 {
		middleware.ReportFailure(r)
		signInFailed(w, r)
		return
	}
	middleware.ReportSuccess(r)
	fmt.Fprintln(w, "signed in")
}

// signInFailed is the answer to a failed sign-in, whatever the cause; the
// guard gives it to a request it cannot read an account from.
func signInFailed(w http.ResponseWriter, _ *http.Request) {
	http.Error(w, "invalid username or password", http.StatusUnauthorized)
}

// passwordReset stands for sending a reset mail to the address the send
// guard counted: it logs it. It answers as the guard answers a throttled
// request, so that a client cannot tell the two apart.
func (a *demo) passwordReset(w http.ResponseWriter, r *http.Request) {
	to, _ := middleware.Account(r)
	a.log.Info("password reset mail sent", "kind", "password-reset-sent", "to", to)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	io.WriteString(w, middleware.DefaultAcceptedBody)
}
