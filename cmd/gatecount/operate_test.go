package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gatecount/gatecount/config"
	"github.com/gatecount/gatecount/internal/servicetest"
	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/postgres"
	redisstore "github.com/gatecount/gatecount/store/redis"
)

func newSecret() string {
	b := make([]byte, 32)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// envOf returns a getenv over kv.
func envOf(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

func TestOperateUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		out  string
	}{
		{"unlock without account", []string{"unlock"}, nil, "-account is required"},
		{"show without anything", []string{"show"}, nil, "give -account NAME, or -limiter NAME -key KEY"},
		{"show both", []string{"show", "-account", "alice", "-limiter", "x", "-key", "k"}, nil, "not both"},
		{"key without limiter", []string{"show", "-key", "k"}, nil, "-key needs -limiter"},
		{"reset without key", []string{"reset", "-limiter", "execute"}, nil, "-limiter and -key are required"},
		{"reset of an account", []string{"reset", "-account", "alice"}, nil, "flag provided but not defined: -account"},
		{"bad address", []string{"unlock", "-account", "alice", "-ip", "300.1.1.1"}, nil, "want an IPv4 or IPv6 address"},
		{"stray argument", []string{"unlock", "-account", "alice", "bob"}, nil, `unexpected argument "bob"`},
		{"memory store", []string{"unlock", "-account", "alice"}, nil, "no shared store"},
		{"no secret", []string{"unlock", "-account", "alice"}, map[string]string{"DATABASE_URL": "postgres://u:secretpw@127.0.0.1:1/db"}, "GATECOUNT_SECRET"},
		{"bad budget", []string{"unlock", "-account", "alice"}, map[string]string{"RATE_LIMIT_STORE_URL": "redis://127.0.0.1:1", "GATECOUNT_SECRET": newSecret(), "RATE_LIMIT_LOGIN_IP_ATTEMPTS": "lots"}, "RATE_LIMIT_LOGIN_IP_ATTEMPTS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(context.Background(), tc.args, envOf(tc.env), &out, &errOut)
			if code != 2 || !strings.Contains(errOut.String(), tc.out) {
				t.Fatalf("run(%q) = %d, %q; want 2 and %q", tc.args, code, errOut.String(), tc.out)
			}
			if strings.Contains(out.String()+errOut.String(), "secretpw") {
				t.Fatalf("output reveals the URL's password")
			}
		})
	}
}

// TestOperateUnreachable: a store the command cannot reach exits 1 with a
// message saying so.
func TestOperateUnreachable(t *testing.T) {
	for _, env := range []map[string]string{
		{"DATABASE_URL": "postgres://postgres:secretpw@127.0.0.1:1/test?connect_timeout=2"},
		{"RATE_LIMIT_STORE_URL": "redis://:secretpw@127.0.0.1:1/0"},
	} {
		env["GATECOUNT_SECRET"] = newSecret()
		var out, errOut bytes.Buffer
		code := run(context.Background(), []string{"show", "-account", "alice"}, envOf(env), &out, &errOut)
		if code != 1 || !strings.Contains(errOut.String(), "cannot open the limit store") || strings.Contains(errOut.String(), "secretpw") {
			t.Errorf("show on an unreachable store (%v): %d, %q; want 1 and a message without the password", env, code, errOut.String())
		}
	}
}

// app opens the store env names, as the app does, with a sign-in guard
// named name on handle name:, and returns a function failing a sign-in of
// account from ip.
func app(t *testing.T, env map[string]string, name string) (fail func(account, ip string) int) {
	t.Helper()
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	c, err := config.Parse(lookup)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	opened, err := config.Open(ctx, c, store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { opened.Close() })
	h, err := opened.Store.Handle(name + ":")
	if err != nil {
		t.Fatal(err)
	}
	b := config.NewVars(lookup).SignInBudgets()
	proxies, _ := keyfunc.ParseNetworks("192.0.2.0/24")
	g, err := middleware.SignIn(h, middleware.SignInOptions{
		Name:              name,
		AccountIPFailures: b.AccountIPFailures, AccountFailures: b.AccountFailures, IPAttempts: b.IPAttempts,
		IP: keyfunc.IPOptions{TrustedProxies: proxies}, Logger: slog.New(slog.DiscardHandler),
		Device: middleware.DeviceOptions{Secret: c.Secret},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	wrong := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		middleware.ReportFailure(r)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	if b, ok := opened.Store.Backend().(*postgres.Backend); ok {
		t.Cleanup(func() { dropSecret(t, env["DATABASE_URL"], b.Fingerprint()) })
	}
	return func(account, ip string) int {
		r := httptest.NewRequest("POST", "/login", strings.NewReader(url.Values{"username": {account}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.RemoteAddr = "192.0.2.1:4000"
		r.Header.Set("X-Forwarded-For", ip)
		w := httptest.NewRecorder()
		wrong.ServeHTTP(w, r)
		return w.Code
	}
}

// dropSecret deletes the rows of a secret from the PostgreSQL at u.
func dropSecret(t *testing.T, u, fingerprint string) {
	conn, err := pgx.Connect(context.Background(), u)
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `DELETE FROM gatecount_entries WHERE fingerprint = $1`, fingerprint); err != nil {
		t.Error(err)
	}
}

// migratedURL returns the test PostgreSQL's URL, its schema migrated.
func migratedURL(t *testing.T) string {
	t.Helper()
	u := servicetest.PostgresURL(t)
	if _, _, err := migratePostgres(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	return u
}

// shown is the JSON of show -account.
type shown struct {
	Limiter string `json:"limiter"`
	Account string `json:"account"`
	Refused bool   `json:"refused"`
	Budgets []struct {
		Budget  string `json:"budget"`
		Address string `json:"address"`
		Used    int    `json:"used"`
		Limit   int    `json:"limit"`
		Refused bool   `json:"refused"`
	} `json:"budgets"`
}

func TestOperateAccount(t *testing.T) {
	for _, kind := range []string{"postgres", "redis"} {
		t.Run(kind, func(t *testing.T) {
			env := map[string]string{"GATECOUNT_SECRET": newSecret(), "RATE_LIMIT_LOGIN_ACCOUNT_FAILURES": "4"}
			if kind == "postgres" {
				env["DATABASE_URL"] = migratedURL(t)
			} else {
				env["RATE_LIMIT_STORE_URL"] = servicetest.RedisURL(t)
			}
			fail := app(t, env, "login")
			for i, ip := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.3", "198.51.100.4", "198.51.100.5"} {
				if c, want := fail("alice", ip), map[bool]int{true: 401, false: 429}[i < 4]; c != want {
					t.Fatalf("failure %d: %d, want %d", i+1, c, want)
				}
			}
			cli := func(want int, args ...string) string {
				t.Helper()
				var out, errOut bytes.Buffer
				if code := run(context.Background(), args, envOf(env), &out, &errOut); code != want {
					t.Fatalf("gatecount %q: exit %d, want %d: %s%s", args, code, want, out.String(), errOut.String())
				}
				if errOut.Len() > 0 {
					t.Logf("gatecount %q wrote to stderr: %s", args, errOut.String())
				}
				return out.String()
			}
			show := func() shown {
				t.Helper()
				var s shown
				if err := json.Unmarshal([]byte(cli(0, "show", "-json", "-account", "Alice", "-ip", "198.51.100.1")), &s); err != nil {
					t.Fatal(err)
				}
				return s
			}
			before := show()
			if !before.Refused || before.Account != "alice" || len(before.Budgets) != 5 || before.Budgets[4].Budget != "login-network" || before.Budgets[0].Used != 4 || before.Budgets[0].Limit != 4 || before.Budgets[1].Budget != "login-consecutive" || before.Budgets[1].Used < 4 || before.Budgets[2].Used != 1 {
				t.Fatalf("show before unlock: %+v; want alice refused, 4 of 4 failures, as many consecutive, 1 from 198.51.100.1", before)
			}
			if out := cli(0, "show", "-account", "alice"); !strings.Contains(out, "REFUSED") || !strings.Contains(out, "login-account") {
				t.Errorf("show's table: %q", out)
			}
			// The wrong secret: an error, and nothing reset.
			wrong := map[string]string{}
			for k, v := range env {
				wrong[k] = v
			}
			wrong["GATECOUNT_SECRET"] = newSecret()
			var out, errOut bytes.Buffer
			if code := run(context.Background(), []string{"unlock", "-account", "alice"}, envOf(wrong), &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "GATECOUNT_SECRET is not the secret") {
				t.Fatalf("unlock under another secret: exit %d, %q; want 1 and the secret named", code, errOut.String())
			}
			if s := show(); !s.Refused {
				t.Fatalf("an unlock under another secret freed alice: %+v", s)
			}
			if out := cli(0, "unlock", "-account", "alice"); !strings.Contains(out, "unlocked account alice on login") {
				t.Errorf("unlock said %q", out)
			}
			after := show()
			if after.Refused || after.Budgets[0].Used != 0 || after.Budgets[1].Used != 0 || after.Budgets[2].Used != 1 {
				t.Fatalf("show after unlock: %+v; want alice free, 0 failures, 0 consecutive, still 1 from the address not named", after)
			}
			// The app's guard remembers alice refused: it asks the store
			// again within limiter.AskAgain, and then counts her.
			c := fail("alice", "198.51.100.9")
			for end := time.Now().Add(3 * limiter.AskAgain); c == 429 && time.Now().Before(end); c = fail("alice", "198.51.100.9") {
				time.Sleep(100 * time.Millisecond)
			}
			if c != 401 {
				t.Fatalf("a failure after unlock: %d, want 401 (counted, not refused) within %v", c, 3*limiter.AskAgain)
			}
		})
	}
}

func TestOperateKey(t *testing.T) {
	env := map[string]string{"GATECOUNT_SECRET": newSecret(), "DATABASE_URL": migratedURL(t)}
	fail := app(t, env, "login")
	for range 3 {
		fail("bob", "198.51.100.7")
	}
	key := keyfunc.JoinKeys("ip", "198.51.100.7")
	cli := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, envOf(env), &out, &errOut); code != 0 {
			t.Fatalf("gatecount %q: exit %d: %s", args, code, errOut.String())
		}
		return out.String()
	}
	var got struct {
		Count int     `json:"count"`
		Reset *string `json:"reset"`
	}
	if err := json.Unmarshal([]byte(cli("show", "-json", "-limiter", "login", "-key", key)), &got); err != nil || got.Count != 3 || got.Reset == nil {
		t.Fatalf("show -key: %+v, %v; want a count of 3 with a reset", got, err)
	}
	cli("reset", "-limiter", "login", "-key", key)
	got.Count, got.Reset = -1, nil
	if err := json.Unmarshal([]byte(cli("show", "-json", "-limiter", "login", "-key", key)), &got); err != nil || got.Count != 0 || got.Reset != nil {
		t.Fatalf("show -key after reset: %+v, %v; want 0 and no window", got, err)
	}
}

// TestOperateNamedGuard: -limiter selects a sign-in guard not named login,
// here on SQLite.
func TestOperateNamedGuard(t *testing.T) {
	env := map[string]string{"GATECOUNT_SECRET": newSecret(), "DATABASE_URL": "sqlite:" + filepath.Join(t.TempDir(), "gatecount.db")}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"migrate"}, envOf(env), &out, &errOut); code != 0 {
		t.Fatalf("migrate: %d %s", code, errOut.String())
	}
	fail := app(t, env, "admin-login")
	for range 5 {
		fail("root", "198.51.100.3")
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"show", "-account", "root", "-limiter", "admin-login", "-ip", "198.51.100.3"}, "admin-login-account-ip   198.51.100.3  5     5"},
		{[]string{"show", "-account", "root"}, "login-account      -        0     20"}, // the guard named login has counted nothing
		{[]string{"unlock", "-account", "root", "-limiter", "admin-login", "-ip", "198.51.100.3"}, "unlocked account root on admin-login, and from 198.51.100.3"},
		{[]string{"show", "-account", "root", "-limiter", "admin-login", "-ip", "198.51.100.3"}, "admin-login-account-ip   198.51.100.3  0     5"},
	} {
		out.Reset()
		errOut.Reset()
		if code := run(context.Background(), tc.args, envOf(env), &out, &errOut); code != 0 || !strings.Contains(out.String(), tc.want) {
			t.Errorf("gatecount %q: %d, %q %s; want 0 and %q", tc.args, code, out.String(), errOut.String(), tc.want)
		}
	}
}

// TestOperateCodeNormalize: a code guard keyed by e-mail address, as the
// example servers' verify, is unlocked by `gatecount unlock -limiter verify
// -normalize email`, which keys the address as the guard does: the right
// code is then accepted. Without -normalize, an address that user-name and
// e-mail normalisation key apart is refused as ambiguous, never reported
// unlocked while nothing is.
func TestOperateCodeNormalize(t *testing.T) {
	for _, kind := range []string{"postgres", "redis"} {
		t.Run(kind, func(t *testing.T) {
			env := map[string]string{"GATECOUNT_SECRET": newSecret()}
			if kind == "postgres" {
				env["DATABASE_URL"] = migratedURL(t)
			} else {
				env["RATE_LIMIT_STORE_URL"] = servicetest.RedisURL(t)
			}
			lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
			c, err := config.Parse(lookup)
			if err != nil {
				t.Fatal(err)
			}
			opened, err := config.Open(context.Background(), c, store.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { opened.Close() })
			if b, ok := opened.Store.Backend().(*postgres.Backend); ok {
				t.Cleanup(func() { dropSecret(t, env["DATABASE_URL"], b.Fingerprint()) })
			}
			h, err := opened.Store.Handle("verify:")
			if err != nil {
				t.Fatal(err)
			}
			proxies, _ := keyfunc.ParseNetworks("192.0.2.0/24")
			g, err := middleware.SignIn(h, middleware.SignInOptions{Code: true, Field: "email", Normalize: keyfunc.NormalizeEmail,
				IP: keyfunc.IPOptions{TrustedProxies: proxies}, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { g.Close() })
			checker := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if a, _ := middleware.Account(r); a == "strasse@example.com" && r.PostFormValue("code") == "246810" {
					middleware.ReportSuccess(r)
					return
				}
				middleware.ReportFailure(r)
				w.WriteHeader(http.StatusUnauthorized)
			}))
			try := func(ip, code string) int {
				r := httptest.NewRequest("POST", "/verify", strings.NewReader(url.Values{"email": {"Straße@Example.com"}, "code": {code}}.Encode()))
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				r.RemoteAddr = "192.0.2.1:4000"
				r.Header.Set("X-Forwarded-For", ip)
				w := httptest.NewRecorder()
				checker.ServeHTTP(w, r)
				return w.Code
			}
			for i := range 10 { // the code guard's account budget: 10 per hour
				if c := try(fmt.Sprintf("198.51.100.%d", i+1), "000000"); c != 401 {
					t.Fatalf("wrong code %d: %d, want 401", i+1, c)
				}
			}
			if c := try("203.0.113.9", "246810"); c != 429 {
				t.Fatalf("the right code once the account is spent: %d, want 429", c)
			}
			cli := func(want int, args ...string) string {
				t.Helper()
				var out, errOut bytes.Buffer
				if code := run(context.Background(), args, envOf(env), &out, &errOut); code != want {
					t.Fatalf("gatecount %q: exit %d, want %d: %s%s", args, code, want, out.String(), errOut.String())
				}
				return out.String() + errOut.String()
			}
			if out := cli(2, "unlock", "-limiter", "verify", "-account", "Straße@example.com"); !strings.Contains(out, "-normalize") {
				t.Fatalf("unlock of an ambiguous address without -normalize said %q, want -normalize named", out)
			}
			if out := cli(0, "unlock", "-limiter", "verify", "-normalize", "email", "-account", "Straße@example.com"); !strings.Contains(out, "unlocked account strasse@example.com on verify") {
				t.Fatalf("unlock said %q", out)
			}
			code := try("203.0.113.9", "246810")
			for end := time.Now().Add(3 * limiter.AskAgain); code == 429 && time.Now().Before(end); code = try("203.0.113.9", "246810") {
				time.Sleep(100 * time.Millisecond)
			}
			if code != 200 {
				t.Fatalf("the right code after unlock: %d, want 200 within %v", code, 3*limiter.AskAgain)
			}
		})
	}
}

// TestOperateUnlockLeavesAddress: `gatecount unlock -account alice -ip X`
// clears alice's failures from X, never X's attempts on every account.
func TestOperateUnlockLeavesAddress(t *testing.T) {
	env := map[string]string{"GATECOUNT_SECRET": newSecret(), "RATE_LIMIT_STORE_URL": servicetest.RedisURL(t)}
	fail := app(t, env, "login")
	for _, account := range []string{"alice", "bob", "carol"} {
		fail(account, "198.51.100.7")
	}
	run(context.Background(), []string{"unlock", "-account", "alice", "-ip", "198.51.100.7"}, envOf(env), io.Discard, io.Discard)
	var out bytes.Buffer
	var got struct {
		Budgets []struct {
			Budget, Address string
			Used            int
		}
	}
	run(context.Background(), []string{"show", "-json", "-account", "alice", "-ip", "198.51.100.7"}, envOf(env), &out, io.Discard)
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || len(got.Budgets) != 5 {
		t.Fatalf("show: %q, %v", out.String(), err)
	}
	if b := got.Budgets[2]; b.Budget != "login-account-ip" || b.Used != 0 {
		t.Errorf("after unlock: %+v, want alice's failures from the address cleared", b)
	}
	if b := got.Budgets[3]; b.Budget != "login-ip" || b.Used != 3 {
		t.Errorf("after unlock: %+v, want the address's 3 attempts on all accounts kept", b)
	}
}

// TestOperateKeySpread: on a Redis Cluster, show and reset find a key of a
// limiter of one key per request, whose keys are spread over the masters,
// as they find a guard's, which are not.
func TestOperateKeySpread(t *testing.T) {
	u := os.Getenv("GATECOUNT_TEST_REDIS_CLUSTER_URL")
	if u == "" {
		u = "redis://127.0.0.1:7000/0"
	}
	secret := newSecret()
	env := map[string]string{"GATECOUNT_SECRET": secret, "RATE_LIMIT_STORE_URL": u}
	s, err := redisstore.OpenURL(t.Context(), u, redisstore.Options{Secret: []byte(secret), Store: store.Options{Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the Redis Cluster at %s: %v", u, err)
		}
		t.Skipf("the Redis Cluster at %s: %v", u, err)
	}
	defer s.Close()
	h, err := s.Handle("per-caller:")
	if err != nil {
		t.Fatal(err)
	}
	m, err := middleware.New(h, limiter.Budget{Limit: 10, Window: time.Hour}, middleware.Options{
		Name: "per-caller",
		Key:  func(r *http.Request) (string, error) { return r.Header.Get("X-Caller"), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if h.Spread() <= 1 {
		t.Fatalf("%s is not a Cluster: the limiter's keys are not spread", u)
	}
	app := m.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	// carol three times, and dave once: the store keeps an entry under the
	// secret once carol's is reset, as the command's check of the secret
	// wants of a store that holds other secrets' entries.
	for _, caller := range []string{"carol", "carol", "carol", "dave"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Caller", caller)
		app.ServeHTTP(httptest.NewRecorder(), r)
	}
	m.Close() // the app's work is done: the command alone reads the store
	cli := func(args ...string) int {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, envOf(env), &out, &errOut); code != 0 {
			t.Fatalf("gatecount %q: exit %d: %s", args, code, errOut.String())
		}
		var got struct {
			Count int `json:"count"`
		}
		if args[0] == "show" {
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatalf("gatecount %q: %v: %s", args, err, out.String())
			}
		}
		return got.Count
	}
	if n := cli("show", "-json", "-limiter", "per-caller", "-key", "carol"); n != 3 {
		t.Errorf("show -key carol: count %d, want 3", n)
	}
	cli("reset", "-limiter", "per-caller", "-key", "carol")
	if n := cli("show", "-json", "-limiter", "per-caller", "-key", "carol"); n != 0 {
		t.Errorf("show -key carol after reset: count %d, want 0", n)
	}
}
