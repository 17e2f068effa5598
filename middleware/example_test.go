package middleware_test

import (
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store/memory"
)

// The full form on net/http's ServeMux: one store, a handle of its own for
// each limiter, and each limiter with its options.
func Example() {
	// authenticate stands for your authentication: it names the caller with
	// keyfunc.WithCallerID, which keyfunc.CallerID reads.
	authenticate := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := keyfunc.WithCallerID(r.Context(), r.Header.Get("X-User"))
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
	execute := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "done") })
	health := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	proxies, err := keyfunc.ParseNetworks("10.0.0.0/8") // your load balancers
	if err != nil {
		log.Fatal(err)
	}

	s := memory.New(memory.Options{}) // or a shared store: see "Choosing a store"
	defer s.Close()
	// One handle per limiter, each with its own prefix.
	execH, err := s.Handle("execute:")
	if err != nil {
		log.Fatal(err)
	}
	healthH, err := s.Handle("health:")
	if err != nil {
		log.Fatal(err)
	}
	perCaller, err := middleware.New(execH, limiter.Budget{Limit: 30, Window: time.Minute},
		middleware.Options{Name: "execute", Key: keyfunc.CallerID, KeyErrorStatus: http.StatusUnauthorized, Unavailable: limiter.Local})
	if err != nil {
		log.Fatal(err)
	}
	defer perCaller.Close()
	perIP, err := middleware.New(healthH, limiter.Budget{Limit: 300, Window: time.Minute},
		middleware.Options{Name: "health", IP: keyfunc.IPOptions{TrustedProxies: proxies}, Unavailable: limiter.Allow})
	if err != nil {
		log.Fatal(err)
	}
	defer perIP.Close()

	mux := http.NewServeMux()
	// A request without a caller ID is answered 401 (KeyErrorStatus).
	mux.Handle("POST /execute", authenticate(perCaller.Wrap(execute)))
	mux.Handle("GET /health", perIP.Wrap(health))

	for _, user := range []string{"alice", ""} {
		r := httptest.NewRequest("POST", "/execute", nil)
		r.Header.Set("X-User", user)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Printf("POST /execute as %q: %d RateLimit=%q\n", user, w.Code, w.Header().Get("RateLimit"))
	}
	r := httptest.NewRequest("GET", "/health", nil)
	r.RemoteAddr = "10.1.2.3:5000"                  // a trusted proxy
	r.Header.Set("X-Forwarded-For", "198.51.100.7") // so the client is this
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	fmt.Printf("GET /health: %d RateLimit=%q\n", w.Code, w.Header().Get("RateLimit"))
	// Output:
	// POST /execute as "alice": 200 RateLimit="\"execute\";r=29;t=60"
	// POST /execute as "": 401 RateLimit=""
	// GET /health: 200 RateLimit="\"health\";r=299;t=60"
}

// Keyed by the caller, a request without one answered 401.
func ExampleNew_caller() {
	s := memory.New(memory.Options{})
	defer s.Close()
	h, _ := s.Handle("execute:")
	m, err := middleware.New(h, limiter.Budget{Limit: 1, Window: time.Minute}, middleware.Options{Name: "execute", Key: keyfunc.CallerID, KeyErrorStatus: http.StatusUnauthorized})
	if err != nil {
		panic(err)
	}
	defer m.Close()
	execute := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "done") }))

	for range 2 {
		r := httptest.NewRequest("POST", "/execute", nil)
		r = r.WithContext(keyfunc.WithCallerID(r.Context(), "alice")) // as authentication would
		w := httptest.NewRecorder()
		execute.ServeHTTP(w, r)
		fmt.Printf("%d %s Retry-After=%q\n", w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 "execute";r=0;t=60 Retry-After=""
	// 429 "execute";r=0;t=60 Retry-After="60"
}

// Keyed by client address (Key nil), behind trusted proxies.
func ExampleNew_address() {
	s := memory.New(memory.Options{})
	defer s.Close()
	h, _ := s.Handle("health:")
	proxies, _ := keyfunc.ParseNetworks("10.0.0.0/8")
	m, _ := middleware.New(h, limiter.Budget{Limit: 300, Window: time.Minute}, middleware.Options{
		Name: "health",
		IP:   keyfunc.IPOptions{TrustedProxies: proxies},
	})
	defer m.Close()
	mux := http.NewServeMux()
	mux.Handle("GET /health", m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))

	r := httptest.NewRequest("GET", "/health", nil)
	r.RemoteAddr = "10.1.2.3:5000"                  // a trusted proxy
	r.Header.Set("X-Forwarded-For", "198.51.100.7") // so the client is this
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"))
	// Output: 200 "health";q=300;w=60
}

func ExampleSignIn() {
	proxies, err := keyfunc.ParseNetworks("10.0.0.0/8") // your load balancers
	if err != nil {
		log.Fatal(err)
	}
	secret := []byte("the app's GATECOUNT_SECRET, 32 bytes or more")
	// wrongPassword is your answer to a wrong password; the guard gives it
	// to a request it cannot read an account from, too.
	wrongPassword := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "invalid username or password", http.StatusUnauthorized)
	})
	loginHandler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := middleware.Account(r) // the account the guard counted
		if !ok {
			http.Error(w, "no account", http.StatusInternalServerError) // not behind the guard
			return
		}
		// The password, read with the guard's own reader, and your check of it.
		fields, err := keyfunc.BodyFields(r, keyfunc.BodyOptions{}, "password")
		if err != nil || name != "alice" || fields[0] != "correct-horse" {
			middleware.ReportFailure(r)
			wrongPassword.ServeHTTP(w, r)
			return
		}
		middleware.ReportSuccess(r)
		fmt.Fprintln(w, "signed in", name)
	})

	s := memory.New(memory.Options{})
	defer s.Close()
	h, err := s.Handle("login:")
	if err != nil {
		log.Fatal(err)
	}
	guard, err := middleware.SignIn(h, middleware.SignInOptions{
		Field:   "username", // the form, multipart or JSON field with the account name
		IP:      keyfunc.IPOptions{TrustedProxies: proxies},
		Device:  middleware.DeviceOptions{Secret: secret}, // GATECOUNT_SECRET
		Failed:  wrongPassword,
		Backoff: middleware.Backoff{Max: 24 * time.Hour}, // optional
	})
	if err != nil {
		log.Fatal(err)
	}
	defer guard.Close()
	mux := http.NewServeMux()
	mux.Handle("POST /login", guard.Wrap(loginHandler))

	for _, body := range []string{
		"username=+Alice&password=correct-horse",
		"username=alice&password=correct-horse&USERNAME=mallory", // unreadable: never reaches the handler
	} {
		r := httptest.NewRequest("POST", "/login", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		device := false
		for _, c := range w.Result().Cookies() {
			device = device || c.Name == middleware.DefaultDeviceCookie
		}
		fmt.Printf("%d %q device cookie: %v\n", w.Code, strings.TrimSpace(w.Body.String()), device)
		fmt.Println("  RateLimit-Policy:", w.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// 200 "signed in alice" device cookie: true
	//   RateLimit-Policy: "login-account-ip";q=5;w=900, "login-account";q=20;w=3600, "login-consecutive";q=100;w=31622400, "login-spray";q=20;w=3600, "login-device";q=5;w=900, "login-network";q=1000;w=3600, "login-network-wide";q=16000;w=3600, "login-ip";q=100;w=3600
	// 401 "invalid username or password" device cookie: false
	//   RateLimit-Policy: "login-account-ip";q=5;w=900, "login-account";q=20;w=3600, "login-consecutive";q=100;w=31622400, "login-spray";q=20;w=3600, "login-device";q=5;w=900, "login-network";q=1000;w=3600, "login-network-wide";q=16000;w=3600, "login-ip";q=100;w=3600
}

// Send guards a route that sends something (a reset mail, a sign-in code)
// per destination and per client address. Over budget, the client gets the
// same answer as an accepted request, and nothing is sent.
func ExampleSend() {
	s := memory.New(memory.Options{})
	defer s.Close()
	h, _ := s.Handle("reset:")
	g, err := middleware.Send(h, middleware.SendOptions{
		Name:           "reset",
		PerDestination: limiter.Budget{Limit: 2, Window: time.Hour},
		Logger:         slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	defer g.Close()
	sent := 0
	reset := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		to, _ := middleware.Account(r) // the destination the guard counted, normalised
		sent++
		fmt.Println("  mail sent to", to)
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintln(w, `{"status":"accepted"}`)
	}))

	for range 3 {
		r := httptest.NewRequest("POST", "/password-reset", strings.NewReader("email=Alice@Example.com"))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		reset.ServeHTTP(w, r)
		fmt.Println(w.Code, strings.TrimSpace(w.Body.String()))
	}
	fmt.Println("sent:", sent)
	// Output:
	//   mail sent to alice@example.com
	// 202 {"status":"accepted"}
	//   mail sent to alice@example.com
	// 202 {"status":"accepted"}
	// 202 {"status":"accepted"}
	// sent: 2
}

// New limits by any key: here an API key header, refusing requests
// without one.
func ExampleNew() {
	s := memory.New(memory.Options{})
	defer s.Close()
	h, _ := s.Handle("export:")
	m, err := middleware.New(h, limiter.Budget{Limit: 1, Window: time.Hour}, middleware.Options{
		Name:   "export",
		Key:    keyfunc.Header("X-API-Key"),
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	defer m.Close()
	export := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "exported") }))
	for _, key := range []string{"k1", "k1", "k2", ""} {
		r := httptest.NewRequest("GET", "/export", nil)
		if key != "" {
			r.Header.Set("X-API-Key", key)
		}
		w := httptest.NewRecorder()
		export.ServeHTTP(w, r)
		fmt.Printf("%q %d\n", key, w.Code)
	}
	// Output:
	// "k1" 200
	// "k1" 429
	// "k2" 200
	// "" 400
}

// A limiter whose budget is the caller's plan, and a batch route where each
// request costs 10.
func ExampleOptions_budgetFor() {
	s := memory.New(memory.Options{})
	defer s.Close()
	execH, err := s.Handle("execute:")
	if err != nil {
		log.Fatal(err)
	}
	batchH, err := s.Handle("batch:")
	if err != nil {
		log.Fatal(err)
	}
	free := limiter.Budget{Limit: 30, Window: time.Minute}
	paid := limiter.Budget{Limit: 600, Window: time.Minute}
	plans := map[string]limiter.Budget{"alice": paid} // your records of who pays
	perPlan, err := middleware.New(execH, free, middleware.Options{
		Name: "execute",
		Key:  keyfunc.CallerID,
		BudgetFor: func(r *http.Request) (limiter.Budget, error) {
			id, _ := keyfunc.CallerID(r)
			if b, ok := plans[id]; ok {
				return b, nil
			}
			return free, nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer perPlan.Close()
	batch, err := middleware.New(batchH, limiter.Budget{Limit: 100, Window: time.Minute}, middleware.Options{
		Name: "batch",
		Key:  keyfunc.CallerID,
		Cost: func(r *http.Request) (int, error) { return 10, nil }, // a batch of ten
	})
	if err != nil {
		log.Fatal(err)
	}
	defer batch.Close()

	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})

	for _, call := range []struct {
		h      http.Handler
		caller string
	}{{perPlan.Wrap(ok), "alice"}, {perPlan.Wrap(ok), "bob"}, {batch.Wrap(ok), "bob"}} {
		r := httptest.NewRequest("POST", "/", nil)
		r = r.WithContext(keyfunc.WithCallerID(r.Context(), call.caller))
		w := httptest.NewRecorder()
		call.h.ServeHTTP(w, r)
		fmt.Println(call.caller, w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"))
	}
	// Output:
	// alice 200 "execute";q=600;w=60 "execute";r=599;t=60
	// bob 200 "execute";q=30;w=60 "execute";r=29;t=60
	// bob 200 "batch";q=100;w=60 "batch";r=90;t=60
}

type outcomePrinter struct{}

func (outcomePrinter) ObserveDecision(name string, o limiter.Outcome) { fmt.Println(name, o) }

func ExampleNew_shadow() {
	s := memory.New(memory.Options{})
	defer s.Close()
	h, _ := s.Handle("execute:")
	m, err := middleware.New(h, limiter.Budget{Limit: 1, Window: time.Minute}, middleware.Options{
		Name:     "execute",
		Key:      keyfunc.CallerID,
		Shadow:   true, // count and report, refuse nothing
		Observer: outcomePrinter{},
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	defer m.Close()
	execute := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	for range 2 {
		r := httptest.NewRequest("POST", "/execute", nil)
		r = r.WithContext(keyfunc.WithCallerID(r.Context(), "alice"))
		w := httptest.NewRecorder()
		execute.ServeHTTP(w, r)
		fmt.Printf("%d RateLimit=%q\n", w.Code, w.Header().Get("RateLimit"))
	}
	// Output:
	// execute allowed
	// 200 RateLimit=""
	// execute shadow_denied
	// 200 RateLimit=""
}

func ExampleNew_networks() {
	s := memory.New(memory.Options{})
	defer s.Close()
	h, _ := s.Handle("health:")
	exempt, _ := keyfunc.ParseNetworks("10.0.0.0/8")
	block, _ := keyfunc.ParseNetworks("192.0.2.0/24")
	m, _ := middleware.New(h, limiter.Budget{Limit: 1, Window: time.Minute}, middleware.Options{
		Name:     "health",
		Networks: keyfunc.Networks{Exempt: exempt, Block: block},
	})
	defer m.Close()
	health := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	for _, addr := range []string{"10.0.0.5", "10.0.0.5", "198.51.100.7", "198.51.100.7", "192.0.2.1"} {
		r := httptest.NewRequest("GET", "/health", nil)
		r.RemoteAddr = addr + ":5000"
		w := httptest.NewRecorder()
		health.ServeHTTP(w, r)
		fmt.Println(addr, w.Code)
	}
	// Output:
	// 10.0.0.5 200
	// 10.0.0.5 200
	// 198.51.100.7 200
	// 198.51.100.7 429
	// 192.0.2.1 403
}
