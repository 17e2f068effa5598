package config

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gatecount/gatecount/internal/servicetest"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store"
	_ "github.com/gatecount/gatecount/store/postgres"
	redisstore "github.com/gatecount/gatecount/store/redis"
	_ "github.com/gatecount/gatecount/store/sqlite"
)

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

const secret = "0123456789abcdef0123456789abcdef"

func TestDefaults(t *testing.T) {
	c, err := Parse(env())
	if err != nil {
		t.Fatal(err)
	}
	if c.Store != Memory || c.SingleInstance || c.MaxEntries != 0 || c.MaxQueued != 0 || c.TrustedProxies != nil || c.Secret != nil || c.RedisAllowEviction {
		t.Errorf("defaults: %+v", c)
	}
	if ip := c.IP(); ip.TrustedProxies != nil || ip.Header.String() != "X-Forwarded-For" {
		t.Errorf("IP(): %+v", ip)
	}
}

// Vars reads an app's own budgets with Parse's checks, every bad value
// at once.
func TestVars(t *testing.T) {
	def := limiter.Budget{Limit: 30, Window: time.Minute}
	for _, tc := range []struct {
		value string
		want  limiter.Budget
		bad   bool
	}{
		{"", def, false},
		{"45", limiter.Budget{Limit: 45, Window: time.Minute}, false},
		{" 7 ", limiter.Budget{Limit: 7, Window: time.Minute}, false},
		{"0", def, true},
		{"-5", def, true},
		{"lots", def, true},
		{"99999999999999999999", def, true},
		{"1e6", def, true},
	} {
		v := NewVars(env("API_PER_MINUTE", tc.value))
		got := v.Budget("API_PER_MINUTE", def)
		err := v.Err()
		var ve *VarError
		if got != tc.want || (err != nil) != tc.bad || tc.bad && (!errors.Is(err, ErrInvalid) || !errors.As(err, &ve) || ve.Var != "API_PER_MINUTE") {
			t.Errorf("API_PER_MINUTE=%q: %v, %v; want %v, bad %v", tc.value, got, err, tc.want, tc.bad)
		}
	}
	v := NewVars(env("A", "x", "B", "y"))
	v.Budget("A", def)
	v.Budget("B", def)
	if err := v.Err(); err == nil || !strings.Contains(err.Error(), "A=") || !strings.Contains(err.Error(), "B=") {
		t.Errorf("two bad values: %v", err)
	}
}

func TestStoreChoice(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want Kind
	}{
		{nil, Memory},
		{[]string{"DATABASE_URL", "postgres://u@h/db", "GATECOUNT_SECRET", secret}, Postgres},
		{[]string{"DATABASE_URL", "postgresql://u@h/db", "GATECOUNT_SECRET", secret}, Postgres},
		{[]string{"DATABASE_URL", "sqlite:./gatecount.db", "GATECOUNT_SECRET", secret}, SQLite},
		{[]string{"DATABASE_URL", "file:/tmp/x.db", "GATECOUNT_SECRET", secret}, SQLite},
		{[]string{"DATABASE_URL", "postgres://u@h/db", "RATE_LIMIT_STORE", "memory"}, Memory},
		{[]string{"DATABASE_URL", "postgres://u@h/db", "RATE_LIMIT_STORE", "database", "GATECOUNT_SECRET", secret}, Postgres},
		{[]string{"RATE_LIMIT_STORE_URL", "redis://127.0.0.1:6379/0", "GATECOUNT_SECRET", secret}, Redis},
		{[]string{"RATE_LIMIT_STORE_URL", "rediss://h:6380", "DATABASE_URL", "postgres://h/db", "RATE_LIMIT_STORE", "redis", "GATECOUNT_SECRET", secret}, Redis},
		{[]string{"RATE_LIMIT_STORE_URL", "redis://h", "DATABASE_URL", "postgres://h/db", "RATE_LIMIT_STORE", "database", "GATECOUNT_SECRET", secret}, Postgres},
		{[]string{"REDIS_URL", "redis://h:6379/0", "GATECOUNT_SECRET", secret}, Redis},
		{[]string{"REDIS_URL", "rediss://h:6380", "RATE_LIMIT_STORE", "redis", "GATECOUNT_SECRET", secret}, Redis},
		{[]string{"REDIS_URL", "redis://h", "DATABASE_URL", "postgres://h/db", "RATE_LIMIT_STORE", "database", "GATECOUNT_SECRET", secret}, Postgres},
		{[]string{"REDIS_URL", "redis://h", "DATABASE_URL", "sqlite:x.db", "RATE_LIMIT_STORE", "redis", "GATECOUNT_SECRET", secret}, Redis},
		{[]string{"REDIS_URL", "redis://h", "RATE_LIMIT_STORE", "memory"}, Memory},
		{[]string{"REDIS_URL", "redis://h", "DATABASE_URL", "postgres://h/db", "RATE_LIMIT_STORE", "memory"}, Memory},
		// RATE_LIMIT_STORE_URL is the limits' own: REDIS_URL beside it
		// serves the app for other things.
		{[]string{"RATE_LIMIT_STORE_URL", "redis://counts", "REDIS_URL", "redis://sessions", "GATECOUNT_SECRET", secret}, Redis},
		// A URL the store does not come from is not read.
		{[]string{"DATABASE_URL", "mysql://h/db", "RATE_LIMIT_STORE", "memory"}, Memory},
		{[]string{"REDIS_URL", "memcached://h", "DATABASE_URL", "postgres://h/db", "RATE_LIMIT_STORE", "database", "GATECOUNT_SECRET", secret}, Postgres},
	} {
		c, err := Parse(env(tc.env...))
		if err != nil || c.Store != tc.want {
			t.Errorf("%v: %v, %v; want %v", tc.env, c.Store, err, tc.want)
		}
	}
}

// The Redis store's URL is RATE_LIMIT_STORE_URL's, else REDIS_URL's, and
// Open names the variable it came from.
func TestRedisURL(t *testing.T) {
	for _, tc := range []struct {
		env                  []string
		storeURL, redisURL   string
		openErrorNames, hide string
	}{
		{[]string{"REDIS_URL", "redis://u:pa55word@127.0.0.1:1/0?dial_timeout=bogus"}, "", "redis://u:pa55word@127.0.0.1:1/0?dial_timeout=bogus", "REDIS_URL", "pa55word"},
		{[]string{"RATE_LIMIT_STORE_URL", "redis://u:pa55word@127.0.0.1:1/0?dial_timeout=bogus", "REDIS_URL", "redis://h"}, "redis://u:pa55word@127.0.0.1:1/0?dial_timeout=bogus", "redis://h", "RATE_LIMIT_STORE_URL", "pa55word"},
	} {
		c, err := Parse(env(append(tc.env, "GATECOUNT_SECRET", secret)...))
		if err != nil || c.Store != Redis || c.StoreURL != tc.storeURL || c.RedisURL != tc.redisURL {
			t.Fatalf("%v: %+v, %v", tc.env, c, err)
		}
		_, err = Open(t.Context(), c, store.Options{Logger: slog.New(slog.DiscardHandler)})
		if err == nil || !strings.Contains(err.Error(), tc.openErrorNames) || strings.Contains(err.Error(), tc.hide) {
			t.Errorf("%v: Open: %v, want an error naming %s", tc.env, err, tc.openErrorNames)
		}
	}
}

// A Redis URL and DATABASE_URL both set, with RATE_LIMIT_STORE unset, is an
// error naming both variables and RATE_LIMIT_STORE, never a guess.
func TestTwoStores(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want []string // named in the error
	}{
		{[]string{"DATABASE_URL", "postgres://h/db", "RATE_LIMIT_STORE_URL", "redis://h"}, []string{"DATABASE_URL", "RATE_LIMIT_STORE_URL"}},
		{[]string{"DATABASE_URL", "sqlite:x.db", "REDIS_URL", "rediss://h"}, []string{"DATABASE_URL", "REDIS_URL"}},
		{[]string{"DATABASE_URL", "postgres://h/db", "RATE_LIMIT_STORE_URL", "redis://h", "REDIS_URL", "redis://other"}, []string{"DATABASE_URL", "RATE_LIMIT_STORE_URL"}},
		{[]string{"DATABASE_URL", "postgres://h/db", "REDIS_URL", "redis://h", "RATE_LIMIT_STORE", " "}, []string{"DATABASE_URL", "REDIS_URL"}},
	} {
		c, err := Parse(env(append(tc.env, "GATECOUNT_SECRET", secret)...))
		var ve *VarError
		if !errors.Is(err, ErrInvalid) || !errors.As(err, &ve) || ve.Var != "RATE_LIMIT_STORE" {
			t.Errorf("%v: %v, %v; want an error naming RATE_LIMIT_STORE", tc.env, c.Store, err)
			continue
		}
		for _, name := range tc.want {
			if !strings.Contains(err.Error(), name) {
				t.Errorf("%v: the error %q does not name %s", tc.env, err, name)
			}
		}
	}
}

// The guards' budgets are read from the names README documents, with
// middleware's defaults and windows.
func TestGuardBudgets(t *testing.T) {
	defSignIn := SignInBudgets{signInDefaults.AccountIPFailures, signInDefaults.AccountFailures, signInDefaults.IPAttempts, middleware.MaxConsecutiveFailures, signInDefaults.Delay.After, defSpray, nil, signInDefaults.ChallengeBudget, signInDefaults.NetworkAttempts}
	defSend := SendBudgets{sendDefaults.PerDestination, sendDefaults.PerIP}
	for _, tc := range []struct {
		env    []string
		signIn SignInBudgets
		send   SendBudgets
		bad    string // the variable at fault
	}{
		{nil, defSignIn, defSend, ""},
		{[]string{"RATE_LIMIT_LOGIN_ACCOUNT_IP_FAILURES", "3"},
			SignInBudgets{limiter.Budget{Limit: 3, Window: 15 * time.Minute}, signInDefaults.AccountFailures, signInDefaults.IPAttempts, middleware.MaxConsecutiveFailures, signInDefaults.Delay.After, defSpray, nil, signInDefaults.ChallengeBudget, signInDefaults.NetworkAttempts}, defSend, ""},
		{[]string{"RATE_LIMIT_LOGIN_ACCOUNT_FAILURES", "50", "RATE_LIMIT_LOGIN_IP_ATTEMPTS", " 1000 "},
			SignInBudgets{signInDefaults.AccountIPFailures, limiter.Budget{Limit: 50, Window: time.Hour}, limiter.Budget{Limit: 1000, Window: time.Hour}, middleware.MaxConsecutiveFailures, signInDefaults.Delay.After, defSpray, nil, signInDefaults.ChallengeBudget, signInDefaults.NetworkAttempts}, defSend, ""},
		{[]string{"RATE_LIMIT_RESET_PER_DESTINATION", "1", "RATE_LIMIT_RESET_PER_IP", "7"},
			defSignIn, SendBudgets{limiter.Budget{Limit: 1, Window: time.Hour}, limiter.Budget{Limit: 7, Window: time.Hour}}, ""},
		{[]string{"RATE_LIMIT_LOGIN_CONSECUTIVE_FAILURES", "10", "RATE_LIMIT_LOGIN_DELAY_AFTER", "100"},
			SignInBudgets{signInDefaults.AccountIPFailures, signInDefaults.AccountFailures, signInDefaults.IPAttempts, 10, 100, defSpray, nil, signInDefaults.ChallengeBudget, signInDefaults.NetworkAttempts}, defSend, ""},
		{[]string{"RATE_LIMIT_LOGIN_CONSECUTIVE_FAILURES", "101"}, defSignIn, defSend, "RATE_LIMIT_LOGIN_CONSECUTIVE_FAILURES"},
		{[]string{"RATE_LIMIT_LOGIN_CONSECUTIVE_FAILURES", "0"}, defSignIn, defSend, "RATE_LIMIT_LOGIN_CONSECUTIVE_FAILURES"},
		{[]string{"RATE_LIMIT_LOGIN_DELAY_AFTER", "101"}, defSignIn, defSend, "RATE_LIMIT_LOGIN_DELAY_AFTER"},
		{[]string{"RATE_LIMIT_LOGIN_ACCOUNT_IP_FAILURES", "0"}, defSignIn, defSend, "RATE_LIMIT_LOGIN_ACCOUNT_IP_FAILURES"},
		{[]string{"RATE_LIMIT_LOGIN_ACCOUNT_FAILURES", "many"}, defSignIn, defSend, "RATE_LIMIT_LOGIN_ACCOUNT_FAILURES"},
		{[]string{"RATE_LIMIT_LOGIN_IP_ATTEMPTS", "-1"}, defSignIn, defSend, "RATE_LIMIT_LOGIN_IP_ATTEMPTS"},
		{[]string{"RATE_LIMIT_LOGIN_NETWORK_ATTEMPTS", "5000,sliding"}, defSignIn, defSend, "RATE_LIMIT_LOGIN_NETWORK_ATTEMPTS"},
		{[]string{"RATE_LIMIT_LOGIN_NETWORK_ATTEMPTS", "off"}, defSignIn, defSend, "RATE_LIMIT_LOGIN_NETWORK_ATTEMPTS"},
		{[]string{"RATE_LIMIT_LOGIN_NETWORK_ATTEMPTS", "300"},
			SignInBudgets{signInDefaults.AccountIPFailures, signInDefaults.AccountFailures, signInDefaults.IPAttempts, middleware.MaxConsecutiveFailures, signInDefaults.Delay.After, defSpray, nil, signInDefaults.ChallengeBudget, limiter.Budget{Limit: 300, Window: time.Hour}}, defSend, ""},
		{[]string{"RATE_LIMIT_RESET_PER_DESTINATION", "1e3"}, defSignIn, defSend, "RATE_LIMIT_RESET_PER_DESTINATION"},
		{[]string{"RATE_LIMIT_RESET_PER_IP", "99999999999999999999"}, defSignIn, defSend, "RATE_LIMIT_RESET_PER_IP"},
	} {
		c, err := Parse(env(tc.env...))
		var ve *VarError
		if tc.bad != "" {
			if !errors.Is(err, ErrInvalid) || !errors.As(err, &ve) || ve.Var != tc.bad {
				t.Errorf("%v: %v, want an error naming %s", tc.env, err, tc.bad)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(c.SignIn, tc.signIn) || c.Send != tc.send {
			t.Errorf("%v: %+v %+v, %v; want %+v %+v", tc.env, c.SignIn, c.Send, err, tc.signIn, tc.send)
		}
	}
}

// SignInOptions and SendOptions carry the budgets, the client address and
// the secret into the guards' options.
func TestGuardOptions(t *testing.T) {
	c, err := Parse(env("RATE_LIMIT_LOGIN_ACCOUNT_FAILURES", "50", "RATE_LIMIT_RESET_PER_IP", "7", "RATE_LIMIT_LOGIN_NETWORK_ATTEMPTS", "40",
		"TRUSTED_PROXIES", "10.0.0.0/8", "TRUSTED_PROXY_HEADER", "Forwarded", "GATECOUNT_SECRET", secret))
	if err != nil {
		t.Fatal(err)
	}
	si, so := c.SignInOptions(), c.SendOptions()
	for _, tc := range []struct {
		what      string
		got, want any
	}{
		{"sign-in account-IP failures", si.AccountIPFailures, signInDefaults.AccountIPFailures},
		{"sign-in account failures", si.AccountFailures, limiter.Budget{Limit: 50, Window: time.Hour}},
		{"sign-in IP attempts", si.IPAttempts, signInDefaults.IPAttempts},
		{"sign-in network attempts", si.NetworkAttempts, limiter.Budget{Limit: 40, Window: time.Hour}},
		{"sign-in device secret", string(si.Device.Secret), secret},
		{"sign-in proxies", fmt.Sprint(si.IP.TrustedProxies), "[10.0.0.0/8]"},
		{"sign-in header", si.IP.Header.String(), "Forwarded"},
		{"send per destination", so.PerDestination, sendDefaults.PerDestination},
		{"send per IP", so.PerIP, limiter.Budget{Limit: 7, Window: time.Hour}},
		{"send proxies", fmt.Sprint(so.IP.TrustedProxies), "[10.0.0.0/8]"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %v, want %v", tc.what, tc.got, tc.want)
		}
	}
}

// REDIS_URL alone opens the Redis store, on the real server.
func TestOpenRedisURL(t *testing.T) {
	c, err := Parse(env("REDIS_URL", servicetest.RedisURL(t), "GATECOUNT_SECRET", secret))
	if err != nil {
		t.Fatal(err)
	}
	o, err := Open(t.Context(), c, store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if o.Kind != Redis || !o.Store.Shared() {
		t.Errorf("REDIS_URL opened %s, shared %v", o.Kind, o.Store.Shared())
	}
}

func TestBadValues(t *testing.T) {
	for _, tc := range []struct {
		env     []string
		varName string
	}{
		{[]string{"RATE_LIMIT_SINGLE_INSTANCE", "yes please"}, "RATE_LIMIT_SINGLE_INSTANCE"},
		{[]string{"RATE_LIMIT_REDIS_ALLOW_EVICTION", "if you must"}, "RATE_LIMIT_REDIS_ALLOW_EVICTION"},
		{[]string{"RATE_LIMIT_MAX_ENTRIES", "1e6"}, "RATE_LIMIT_MAX_ENTRIES"},
		{[]string{"RATE_LIMIT_STORE_MAX_QUEUED", "0"}, "RATE_LIMIT_STORE_MAX_QUEUED"},
		{[]string{"RATE_LIMIT_STORE_MAX_QUEUED", "many"}, "RATE_LIMIT_STORE_MAX_QUEUED"},
		{[]string{"RATE_LIMIT_STORE_MAX_IN_FLIGHT", "0"}, "RATE_LIMIT_STORE_MAX_IN_FLIGHT"},
		{[]string{"RATE_LIMIT_STORE", "dynamo"}, "RATE_LIMIT_STORE"},
		{[]string{"RATE_LIMIT_STORE", "database"}, "RATE_LIMIT_STORE"},
		{[]string{"RATE_LIMIT_STORE", "redis"}, "RATE_LIMIT_STORE"},
		{[]string{"REDIS_URL", "memcached://h", "GATECOUNT_SECRET", secret}, "REDIS_URL"},
		{[]string{"REDIS_URL", "redis://h"}, "GATECOUNT_SECRET"},
		{[]string{"DATABASE_URL", "mysql://h/db", "GATECOUNT_SECRET", secret}, "DATABASE_URL"},
		{[]string{"RATE_LIMIT_STORE_URL", "memcached://h", "GATECOUNT_SECRET", secret}, "RATE_LIMIT_STORE_URL"},
		{[]string{"TRUSTED_PROXIES", "10.0.0.0/8,banana"}, "TRUSTED_PROXIES"},
		{[]string{"DATABASE_URL", "postgres://h/db"}, "GATECOUNT_SECRET"},
		{[]string{"DATABASE_URL", "postgres://h/db", "GATECOUNT_SECRET", "short"}, "GATECOUNT_SECRET"},
	} {
		_, err := Parse(env(tc.env...))
		var ve *VarError
		if !errors.Is(err, ErrInvalid) || !errors.As(err, &ve) || ve.Var != tc.varName {
			t.Errorf("%v: error %v, want one naming %s", tc.env, err, tc.varName)
		}
	}
}

func TestErrorsJoinedAndSecretHidden(t *testing.T) {
	_, err := Parse(env("RATE_LIMIT_MAX_ENTRIES", "x", "RATE_LIMIT_SINGLE_INSTANCE", "y", "GATECOUNT_SECRET", "hunter2"))
	msg := err.Error()
	for _, want := range []string{"RATE_LIMIT_MAX_ENTRIES", "RATE_LIMIT_SINGLE_INSTANCE", "GATECOUNT_SECRET", "openssl rand"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %s", msg, want)
		}
	}
	if strings.Contains(msg, "hunter2") {
		t.Error("error shows the secret")
	}
	for _, kv := range [][]string{
		{"DATABASE_URL", "mysql://user:pa55word@h/db"},
		{"DATABASE_URL", "mysql://h/db?password=pa55word"},
		{"DATABASE_URL", "mysql://h/db?sslmode=disable&password=pa55word&x"},
		{"RATE_LIMIT_STORE_URL", "http://h/?password=pa55word"},
		{"RATE_LIMIT_STORE_URL", "memcached://u:pa55word@h/?token=pa55word"},
	} {
		_, err = Parse(env(kv[0], kv[1], "GATECOUNT_SECRET", secret))
		if err == nil || strings.Contains(err.Error(), "pa55word") || !strings.Contains(err.Error(), kv[0]) {
			t.Errorf("%s=%s: error shows the password: %v", kv[0], kv[1], err)
		}
	}
}

// Open's errors never show a password either, in the user information or
// in the query string, whichever store refuses the URL.
func TestOpenErrorsHidePasswords(t *testing.T) {
	for _, kv := range [][]string{
		{"DATABASE_URL", "postgres://u:pa55word@127.0.0.1:1/db?sslmode=bogus"},
		{"DATABASE_URL", "postgres://u@127.0.0.1:1/db?password=pa55word&sslmode=bogus"},
		{"DATABASE_URL", "sqlite:./x.db?password=pa55word"},
		{"RATE_LIMIT_STORE_URL", "redis://u:pa55word@127.0.0.1:1/0?dial_timeout=bogus"},
		{"RATE_LIMIT_STORE_URL", "redis://127.0.0.1:1/0?password=pa55word&dial_timeout=bogus"},
	} {
		c, err := Parse(env(kv[0], kv[1], "GATECOUNT_SECRET", secret))
		if err != nil {
			t.Fatalf("%s=%s: %v", kv[0], kv[1], err)
		}
		_, err = Open(t.Context(), c, store.Options{Logger: slog.New(slog.DiscardHandler)})
		if err == nil || strings.Contains(err.Error(), "pa55word") || !strings.Contains(err.Error(), kv[0]) {
			t.Errorf("%s=%s: Open: %v", kv[0], kv[1], err)
		}
	}
}

func TestOpenMemoryWarns(t *testing.T) {
	for _, single := range []bool{false, true} {
		var buf strings.Builder
		log := slog.New(slog.NewTextHandler(&buf, nil))
		c, _ := Parse(env())
		c.SingleInstance = single
		o, err := Open(context.Background(), c, store.Options{Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		o.Close()
		warned := strings.Contains(buf.String(), "kind="+KindMemoryNotShared)
		if warned == single {
			t.Errorf("single instance %v: warned %v\n%s", single, warned, buf.String())
		}
		if !strings.Contains(buf.String(), "store=memory") {
			t.Errorf("store not logged: %s", buf.String())
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("30", "memory", "postgres://h/db", "10.0.0.0/8", "true")
	f.Add("-1", "database", "sqlite:x.db", "::1,banana", "maybe")
	f.Fuzz(func(t *testing.T, perMinute, kind, dbURL, proxies, single string) {
		lookup := env("RATE_LIMIT_EXECUTE_PER_MINUTE", perMinute, "RATE_LIMIT_STORE", kind,
			"DATABASE_URL", dbURL, "TRUSTED_PROXIES", proxies, "RATE_LIMIT_SINGLE_INSTANCE", single, "GATECOUNT_SECRET", secret)
		c, err := Parse(lookup)
		vars := NewVars(lookup)
		execute := vars.Budget("RATE_LIMIT_EXECUTE_PER_MINUTE", limiter.Budget{Limit: 30, Window: time.Minute})
		err = errors.Join(err, vars.Err())
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not match ErrInvalid", err)
			}
			return
		}
		if err := execute.Validate(); err != nil {
			t.Fatalf("accepted an invalid budget: %v", err)
		}
		switch c.Store {
		case Memory, Postgres, SQLite, Redis:
		default:
			t.Fatalf("accepted store %q", c.Store)
		}
	})
}

// TestRedisEviction: a Redis that may evict is refused, with an error that
// names the setting, the fix and RATE_LIMIT_REDIS_ALLOW_EVICTION; with that
// set to true the store opens and logs the risk.
func TestRedisEviction(t *testing.T) {
	addr := servicetest.StartRedis(t, 7107, "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru")
	for _, allow := range []string{"", "true"} {
		c, err := Parse(env("RATE_LIMIT_STORE_URL", "redis://"+addr+"/0", "GATECOUNT_SECRET", secret, "RATE_LIMIT_REDIS_ALLOW_EVICTION", allow))
		if err != nil {
			t.Fatal(err)
		}
		if c.RedisAllowEviction != (allow == "true") {
			t.Fatalf("RATE_LIMIT_REDIS_ALLOW_EVICTION=%q read as %v", allow, c.RedisAllowEviction)
		}
		var buf strings.Builder
		o, err := Open(t.Context(), c, store.Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
		if allow == "" {
			if !errors.Is(err, redisstore.ErrEvicting) {
				t.Fatalf("Open on allkeys-lru: %v, want %v", err, redisstore.ErrEvicting)
			}
			for _, want := range []string{"maxmemory-policy", "allkeys-lru", "noeviction", "RATE_LIMIT_REDIS_ALLOW_EVICTION=true"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error %q does not name %q", err, want)
				}
			}
			continue
		}
		if err != nil {
			t.Fatalf("Open on allkeys-lru with RATE_LIMIT_REDIS_ALLOW_EVICTION=true: %v", err)
		}
		o.Close()
		if !strings.Contains(buf.String(), "kind="+redisstore.KindEvicting) {
			t.Errorf("the risk was not logged:\n%s", buf.String())
		}
	}
}

// RATE_LIMIT_STORE_MAX_QUEUED bounds the calls of one limiter waiting for
// the store, and RATE_LIMIT_STORE_MAX_IN_FLIGHT those running in it.
func TestMaxQueued(t *testing.T) {
	c, err := Parse(env("RATE_LIMIT_STORE_MAX_QUEUED", "100", "RATE_LIMIT_STORE_MAX_IN_FLIGHT", "3"))
	if err != nil || c.MaxQueued != 100 || c.MaxInFlight != 3 {
		t.Fatalf("Parse: %+v, %v; want MaxQueued 100, MaxInFlight 3", c, err)
	}
	o, err := Open(context.Background(), c, store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if st := o.Store.Stats(); st.MaxQueued != 100 || st.MaxInFlight != 3 {
		t.Fatalf("the store's bounds on waiting and running calls: %d and %d, want 100 and 3", st.MaxQueued, st.MaxInFlight)
	}
}
