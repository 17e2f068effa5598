// Package standin is the app that examples/chi and examples/gorilla limit:
// callers, accounts and reset mails of examples/stdlib's defaults, and a
// server that shuts down gracefully. It holds no limiter: each example's
// main.go builds and mounts its own, and an app puts its own handlers here.
package standin

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

	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store"
)

// App stands for a real application.
type App struct {
	Store *store.Store // for Ready: the store the limiters count in
	Log   *slog.Logger
}

var (
	tokens    = map[string]string{"alice-token": "alice", "bob-token": "bob"}
	passwords = map[string]string{"alice": "correct-horse", "bob": "battery-staple"}
)

// Authenticate stands for the app's authentication. It names the caller of
// a known bearer token with [keyfunc.WithCallerID], which a per-caller
// limiter counts by, and answers 401 without one.
func (a *App) Authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		caller, ok := tokens[token]
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="gatecount-demo"`)
			http.Error(w, "missing or unknown bearer token", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(keyfunc.WithCallerID(r.Context(), caller)))
	})
}

// Execute stands for a route's real work.
func (a *App) Execute(w http.ResponseWriter, r *http.Request) {
	caller, _ := keyfunc.CallerID(r)
	fmt.Fprintf(w, "done for %s\n", caller)
}

// Health answers ok.
func (a *App) Health(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") }

// Ready answers 503 while the store's breaker is open.
func (a *App) Ready(w http.ResponseWriter, r *http.Request) {
	if a.Store.BreakerOpen() {
		http.Error(w, "store unavailable", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}

// SignIn checks the password of the account the sign-in guard counted
// ([middleware.Account]), and tells the guard how it went. An unknown
// account is answered as a wrong password.
func (a *App) SignIn(w http.ResponseWriter, r *http.Request) {
	account, _ := middleware.Account(r)
	want, known := passwords[account]
	fields, err := keyfunc.BodyFields(r, keyfunc.BodyOptions{}, "password") // the guard's own reader
	if err != nil || !known || subtle.ConstantTimeCompare([]byte(fields[0]), []byte(want)) != 1 {
		middleware.ReportFailure(r)
		SignInFailed(w, r)
		return
	}
	middleware.ReportSuccess(r)
	fmt.Fprintln(w, "signed in")
}

// SignInFailed is the answer to a failed sign-in, whatever the cause; the
// guard gives it to a request it cannot read an account from.
func SignInFailed(w http.ResponseWriter, _ *http.Request) {
	http.Error(w, "invalid username or password", http.StatusUnauthorized)
}

// PasswordReset stands for sending a reset mail to the address the send
// guard counted: it logs it. It answers as the guard answers a throttled
// request, so that a client cannot tell the two apart.
func (a *App) PasswordReset(w http.ResponseWriter, r *http.Request) {
	to, _ := middleware.Account(r)
	a.Log.Info("password reset mail sent", "kind", "password-reset-sent", "to", to)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	io.WriteString(w, middleware.DefaultAcceptedBody)
}

// NewApp builds an example's router from the environment read through
// lookup: the handler, and what closes its limiters and store.
type NewApp func(ctx context.Context, lookup func(string) (string, bool), log *slog.Logger) (http.Handler, func() error, error)

// Main serves what newApp builds from the environment on ADDR (default
// 127.0.0.1:8080) until SIGINT or SIGTERM, then shuts down gracefully. It
// exits 1 with an error prefixed by name.
func Main(name string, newApp NewApp) {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := serve(ctx, newApp, log)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

func serve(ctx context.Context, newApp NewApp, log *slog.Logger) error {
	h, closeApp, err := newApp(ctx, os.LookupEnv, log)
	if err != nil {
		return err
	}
	defer closeApp()
	addr := os.Getenv("ADDR")
	if addr == "" {
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
