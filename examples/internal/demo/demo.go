// Package demo is the application examples/stdlib serves: its handlers, its
// demo authentication, and the limiters built from the environment. The
// tests of examples/stdlib start it in process, through package demotest.
package demo

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"expvar"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gatecount/gatecount/config"
	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/metrics"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store"

	// The stores the environment may choose, each registering its URL
	// schemes with config.
	_ "github.com/gatecount/gatecount/store/postgres"
	_ "github.com/gatecount/gatecount/store/redis"
	_ "github.com/gatecount/gatecount/store/sqlite"
)

// DefaultAddr is where the examples listen when ADDR is unset.
const DefaultAddr = "127.0.0.1:8080"

// DefaultAPIKeys are the demo callers when API_KEYS is unset.
const DefaultAPIKeys = "alice:alice-token,bob:bob-token"

// Budgets are the budgets of the demo's own routes, each read from its own
// variable (the window is fixed). The guards' budgets are config's
// (RATE_LIMIT_LOGIN_*, RATE_LIMIT_RESET_*).
type Budgets struct {
	Execute limiter.Budget // RATE_LIMIT_EXECUTE_PER_MINUTE, per caller
	Health  limiter.Budget // RATE_LIMIT_HEALTH_PER_MINUTE, per IP
}

// ReadBudgets reads the demo's budgets through v, defaults where unset.
// The guards' budgets are read by config, as the gatecount command reads
// them.
func ReadBudgets(v *config.Vars) Budgets {
	return Budgets{
		Execute: v.Budget("RATE_LIMIT_EXECUTE_PER_MINUTE", limiter.Budget{Limit: 30, Window: time.Minute}),
		Health:  v.Budget("RATE_LIMIT_HEALTH_PER_MINUTE", limiter.Budget{Limit: 300, Window: time.Minute}),
	}
}

// App is the demo application.
type App struct {
	Config  config.Config
	Budgets Budgets
	Addr    string
	// DebugAddr, from DEBUG_ADDR, is where /debug/vars is served; "" when
	// it is not.
	DebugAddr string
	// Metrics hears the store's calls and the limiters' decisions.
	Metrics *metrics.Expvar
	Store   *config.Opened
	Execute *middleware.Middleware  // POST /execute, per caller
	Health  *middleware.Middleware  // GET /health and /ready, per IP
	Login   *middleware.SignInGuard // POST /login
	Reset   *middleware.SendGuard   // POST /password-reset
	Verify  *middleware.SignInGuard // POST /verify
	Log     *slog.Logger

	tokens map[string]string // token → caller
	ip     *keyfunc.IPKeyer  // the client address, as the guards find it

	mu    sync.Mutex
	users map[string]user // name → user
	// codes holds the code last sent to each address, until a reset
	// completion or POST /verify uses it up, or it expires.
	codes      map[string]resetCode
	executions map[string]int64
	signIns    map[string]int
	// passwordChecks counts the sign-in attempts that reached the check,
	// and checksFor those of each account named.
	passwordChecks int
	checksFor      map[string]int
	codesSent      map[string]int
	// codeChecks counts the attempts that reached POST /verify's check.
	codeChecks int
}

// New builds the app from the environment read through lookup: the
// settings of package config, plus ADDR and API_KEYS.
func New(ctx context.Context, lookup func(string) (string, bool), log *slog.Logger) (*App, error) {
	c, err := config.Parse(lookup)
	vars := config.NewVars(lookup)
	budgets := ReadBudgets(vars)
	if err = errors.Join(err, vars.Err()); err != nil {
		return nil, err
	}
	a := &App{Config: c, Budgets: budgets, Addr: DefaultAddr, Metrics: sharedMetrics(), Log: log,
		executions: map[string]int64{}, signIns: map[string]int{}, codesSent: map[string]int{}, checksFor: map[string]int{},
		codes: map[string]resetCode{}}
	if v, ok := lookup("ADDR"); ok && v != "" {
		a.Addr = v
	}
	if v, ok := lookup("DEBUG_ADDR"); ok && v != "" {
		a.DebugAddr = v
	}
	keys := DefaultAPIKeys
	if v, ok := lookup("API_KEYS"); ok && v != "" {
		keys = v
	}
	if a.tokens, err = parseAPIKeys(keys); err != nil {
		return nil, err
	}
	users := DefaultDemoUsers
	if v, ok := lookup("DEMO_USERS"); ok && v != "" {
		users = v
	}
	if a.users, err = parseUsers(users); err != nil {
		return nil, err
	}
	if a.ip, err = keyfunc.NewIP(c.IP()); err != nil {
		return nil, err
	}
	if a.Store, err = config.Open(ctx, c, store.Options{Logger: log, Observer: a.Metrics}); err != nil {
		return nil, err
	}
	a.Metrics.Watch("limits", a.Store.Store)
	if err := a.limiters(); err != nil {
		a.Store.Close()
		return nil, err
	}
	return a, nil
}

// limiters builds the limiters, each on its own store handle.
func (a *App) limiters() error {
	s := a.Store.Store
	var h [5]*store.Handle
	for i, prefix := range []string{"execute:", "health:", "login:", "reset:", "verify:"} {
		var err error
		if h[i], err = s.Handle(prefix); err != nil {
			return err
		}
	}
	ip := a.Config.IP()
	b := a.Budgets
	// RATE_LIMIT_SHADOW names limiters by these names; RATE_LIMIT_EXEMPT_NETWORKS
	// and RATE_LIMIT_BLOCK_NETWORKS apply to every limiter.
	shadow, nets := a.Config.Shadow.On, a.Config.Networks()
	var err error
	// Per caller, 401 without one; counted in this process's memory while
	// the store cannot answer.
	if a.Execute, err = middleware.New(h[0], b.Execute, middleware.Options{Name: "execute", Key: keyfunc.CallerID,
		KeyErrorStatus: http.StatusUnauthorized, Unavailable: limiter.Local,
		IP: ip, Logger: a.Log, Observer: a.Metrics, Shadow: shadow("execute"), Networks: nets}); err != nil {
		return err
	}
	// Per client address (no Key); through uncounted while the store is
	// down, so that health checks keep answering.
	if a.Health, err = middleware.New(h[1], b.Health, middleware.Options{Name: "health", Unavailable: limiter.Allow,
		IP: ip, Logger: a.Log, Observer: a.Metrics, Shadow: shadow("health"), Networks: nets}); err != nil {
		return err
	}
	// Named login, the default: budgets login-account-ip, login-account,
	// login-consecutive, login-device, login-network and login-ip, and the
	// delays (login-delay), from RATE_LIMIT_LOGIN_*. Device cookies are
	// signed with GATECOUNT_SECRET, which a shared store requires; on
	// memory without it, with a key of this process, so that they stop
	// working at a restart. With RATE_LIMIT_LOGIN_CHALLENGE=pow, a refusal
	// by the account's windowed budget is a proof-of-work challenge
	// (login-challenge), which the page
	// of GET /login solves.
	login := a.Config.SignInOptions()
	login.Observer = a.Metrics
	login.Failed = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { signInFailed(w) })
	login.Logger = a.Log
	login.Shadow, login.Networks = shadow("login"), nets
	if a.Login, err = middleware.SignIn(h[2], login); err != nil {
		return err
	}
	reset := a.Config.SendOptions() // budgets from RATE_LIMIT_RESET_*
	reset.Name = "reset"
	reset.Observer = a.Metrics
	reset.Logger = a.Log
	reset.Shadow, reset.Networks = shadow("reset"), nets
	if a.Reset, err = middleware.Send(h[3], reset); err != nil {
		return err
	}
	// Named verify, the default: the codes' budgets, apart from the
	// password's, with their defaults.
	a.Verify, err = middleware.SignIn(h[4], middleware.SignInOptions{
		Code: true, Field: "email", Normalize: keyfunc.NormalizeEmail, IP: ip, Logger: a.Log, Observer: a.Metrics,
		Failed: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { codeFailed(w) }),
		Shadow: shadow("verify"), Networks: nets,
	})
	return err
}

// Close closes the limiters and the store.
func (a *App) Close() error {
	var errs []error
	if a.Execute != nil {
		errs = append(errs, a.Execute.Close())
	}
	if a.Health != nil {
		errs = append(errs, a.Health.Close())
	}
	if a.Login != nil {
		errs = append(errs, a.Login.Close())
	}
	if a.Reset != nil {
		errs = append(errs, a.Reset.Close())
	}
	if a.Verify != nil {
		errs = append(errs, a.Verify.Close())
	}
	errs = append(errs, a.Store.Close())
	return errors.Join(errs...)
}

// parseAPIKeys reads "caller:token,caller:token".
func parseAPIKeys(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		caller, token, ok := strings.Cut(strings.TrimSpace(pair), ":")
		if !ok || caller == "" || token == "" {
			return nil, fmt.Errorf("API_KEYS: want caller:token pairs separated by commas, got %q", pair)
		}
		if _, dup := out[token]; dup {
			return nil, fmt.Errorf("API_KEYS: a token is given twice")
		}
		out[token] = caller
	}
	return out, nil
}

// Authenticate puts the caller of a known bearer token in the request
// context and answers 401, before any limiter, for a missing or unknown one.
func (a *App) Authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		caller := ""
		if ok {
			for t, c := range a.tokens { // compare every token in constant time
				if subtle.ConstantTimeCompare([]byte(t), []byte(token)) == 1 {
					caller = c
				}
			}
		}
		if caller == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="gatecount-demo"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or unknown bearer token"})
			return
		}
		next.ServeHTTP(w, r.WithContext(keyfunc.WithCallerID(r.Context(), caller)))
	})
}

// ExecuteHandler does the demo's "real work": it counts the caller's
// executions and answers the count.
func (a *App) ExecuteHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		caller, _ := keyfunc.CallerID(r)
		a.mu.Lock()
		a.executions[caller]++
		n := a.executions[caller]
		a.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"caller": caller, "executions": n})
	})
}

// Executions returns how many times caller's work was done.
func (a *App) Executions(caller string) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.executions[caller]
}

// HealthHandler answers that the process is up.
func (a *App) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
}

// ReadyHandler answers whether the store answers.
func (a *App) ReadyHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.Store.Store.BreakerOpen() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "store unavailable"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready", "store": string(a.Store.Kind)})
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// Main runs an example: it reads the environment, serves the app on the
// router routes builds until SIGINT or SIGTERM, and exits non-zero with the
// error if it could not.
func Main(name string, routes func(*App) http.Handler) {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, os.LookupEnv, log, routes, nil); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// Run builds the app from the environment read through lookup and serves
// it on the router routes builds until ctx ends. ready, if not nil, is told
// the app and its address once it listens.
func Run(ctx context.Context, lookup func(string) (string, bool), log *slog.Logger, routes func(*App) http.Handler, ready func(*App, string)) error {
	app, err := New(ctx, lookup, log)
	if err != nil {
		return err
	}
	defer app.Close()
	if app.DebugAddr == "" {
		return Serve(ctx, app.Addr, routes(app), log, func(addr string) {
			if ready != nil {
				ready(app, addr)
			}
		})
	}
	// /debug/vars on its own address, which only operators should reach;
	// the app's listener never serves it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	debug := http.NewServeMux()
	debug.Handle("GET /debug/vars", expvar.Handler())
	debugReady := make(chan string, 1)
	debugDone := make(chan error, 1)
	go func() {
		debugDone <- Serve(ctx, app.DebugAddr, debug, log.With("server", "debug"), func(addr string) { debugReady <- addr })
	}()
	var debugAddr string
	select {
	case debugAddr = <-debugReady:
	case err := <-debugDone:
		return fmt.Errorf("DEBUG_ADDR: %w", err)
	}
	app.DebugAddr = debugAddr
	err = Serve(ctx, app.Addr, routes(app), log, func(addr string) {
		if ready != nil {
			ready(app, addr)
		}
	})
	cancel()
	return errors.Join(err, <-debugDone)
}

var (
	metricsOnce sync.Once
	metricsVar  *metrics.Expvar
)

// sharedMetrics returns the process's metrics, published once under
// "gatecount" (a process serves one /debug/vars).
func sharedMetrics() *metrics.Expvar {
	metricsOnce.Do(func() { metricsVar = metrics.NewExpvar("gatecount") })
	return metricsVar
}

// Time bounds of the server: each request's deadline comes before the
// write timeout, so that a request waiting for a busy store ends with an
// answer (429, Retry-After 1 s) rather than a cut connection. The margin
// leaves room for what follows a check, which may take 5 s.
const (
	RequestTimeout = 8 * time.Second
	WriteTimeout   = 15 * time.Second
)

// Serve serves h on addr until ctx ends, then shuts down gracefully. Each
// request has RequestTimeout to be answered. ready, if not nil, is told the
// address once the server listens.
func Serve(ctx context.Context, addr string, h http.Handler, log *slog.Logger, ready func(addr string)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           withDeadline(h, RequestTimeout),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("listening", "kind", KindListening, "addr", ln.Addr().String())
	if ready != nil {
		ready(ln.Addr().String())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = srv.Shutdown(shutdown)
	<-errc
	log.Info("shut down", "kind", KindStopped)
	return err
}

// withDeadline gives each request of h a deadline d after it began.
func withDeadline(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), d)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}
