package config

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gatecount/gatecount/internal/servicetest"
	"github.com/gatecount/gatecount/limiter"
	redisstore "github.com/gatecount/gatecount/store/redis"
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
	c, err := FromEnv(env())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]limiter.Budget{
		"execute":   {Limit: 30, Window: time.Minute},
		"health":    {Limit: 300, Window: time.Minute},
		"accountIP": {Limit: 5, Window: 15 * time.Minute},
		"account":   {Limit: 20, Window: time.Hour},
		"loginIP":   {Limit: 100, Window: time.Hour},
		"resetDest": {Limit: 3, Window: time.Hour},
		"resetIP":   {Limit: 20, Window: time.Hour},
	}
	got := map[string]limiter.Budget{
		"execute": c.Execute, "health": c.Health, "accountIP": c.LoginAccountIP, "account": c.LoginAccount,
		"loginIP": c.LoginIP, "resetDest": c.ResetDestination, "resetIP": c.ResetIP,
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %v, want %v", k, got[k], w)
		}
	}
	if c.Store != Memory || c.SingleInstance || c.MaxEntries != 0 || c.TrustedProxies != nil {
		t.Errorf("defaults: %+v", c)
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
		{[]string{"RATE_LIMIT_STORE_URL", "rediss://h:6380", "DATABASE_URL", "postgres://h/db", "GATECOUNT_SECRET", secret}, Redis},
		{[]string{"RATE_LIMIT_STORE_URL", "redis://h", "DATABASE_URL", "postgres://h/db", "RATE_LIMIT_STORE", "database", "GATECOUNT_SECRET", secret}, Postgres},
	} {
		c, err := FromEnv(env(tc.env...))
		if err != nil || c.Store != tc.want {
			t.Errorf("%v: %v, %v; want %v", tc.env, c.Store, err, tc.want)
		}
	}
}

func TestBadValues(t *testing.T) {
	for _, tc := range []struct {
		env     []string
		varName string
	}{
		{[]string{"RATE_LIMIT_EXECUTE_PER_MINUTE", "0"}, "RATE_LIMIT_EXECUTE_PER_MINUTE"},
		{[]string{"RATE_LIMIT_EXECUTE_PER_MINUTE", "-5"}, "RATE_LIMIT_EXECUTE_PER_MINUTE"},
		{[]string{"RATE_LIMIT_HEALTH_PER_MINUTE", "lots"}, "RATE_LIMIT_HEALTH_PER_MINUTE"},
		{[]string{"RATE_LIMIT_LOGIN_IP_ATTEMPTS", "99999999999999999999"}, "RATE_LIMIT_LOGIN_IP_ATTEMPTS"},
		{[]string{"RATE_LIMIT_SINGLE_INSTANCE", "yes please"}, "RATE_LIMIT_SINGLE_INSTANCE"},
		{[]string{"RATE_LIMIT_REDIS_ALLOW_EVICTION", "if you must"}, "RATE_LIMIT_REDIS_ALLOW_EVICTION"},
		{[]string{"RATE_LIMIT_MAX_ENTRIES", "1e6"}, "RATE_LIMIT_MAX_ENTRIES"},
		{[]string{"RATE_LIMIT_STORE", "dynamo"}, "RATE_LIMIT_STORE"},
		{[]string{"RATE_LIMIT_STORE", "database"}, "RATE_LIMIT_STORE"},
		{[]string{"RATE_LIMIT_STORE", "redis"}, "RATE_LIMIT_STORE"},
		{[]string{"DATABASE_URL", "mysql://h/db", "GATECOUNT_SECRET", secret}, "DATABASE_URL"},
		{[]string{"RATE_LIMIT_STORE_URL", "memcached://h", "GATECOUNT_SECRET", secret}, "RATE_LIMIT_STORE_URL"},
		{[]string{"TRUSTED_PROXIES", "10.0.0.0/8,banana"}, "TRUSTED_PROXIES"},
		{[]string{"DATABASE_URL", "postgres://h/db"}, "GATECOUNT_SECRET"},
		{[]string{"DATABASE_URL", "postgres://h/db", "GATECOUNT_SECRET", "short"}, "GATECOUNT_SECRET"},
	} {
		_, err := FromEnv(env(tc.env...))
		var ve *VarError
		if !errors.Is(err, ErrInvalid) || !errors.As(err, &ve) || ve.Var != tc.varName {
			t.Errorf("%v: error %v, want one naming %s", tc.env, err, tc.varName)
		}
	}
}

func TestErrorsJoinedAndSecretHidden(t *testing.T) {
	_, err := FromEnv(env("RATE_LIMIT_EXECUTE_PER_MINUTE", "x", "RATE_LIMIT_HEALTH_PER_MINUTE", "y", "GATECOUNT_SECRET", "hunter2"))
	msg := err.Error()
	for _, want := range []string{"RATE_LIMIT_EXECUTE_PER_MINUTE", "RATE_LIMIT_HEALTH_PER_MINUTE", "GATECOUNT_SECRET", "openssl rand"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %s", msg, want)
		}
	}
	if strings.Contains(msg, "hunter2") {
		t.Error("error shows the secret")
	}
	_, err = FromEnv(env("DATABASE_URL", "mysql://user:pa55word@h/db", "GATECOUNT_SECRET", secret))
	if err == nil || strings.Contains(err.Error(), "pa55word") {
		t.Errorf("error shows the database password: %v", err)
	}
}

func TestOpenMemoryWarns(t *testing.T) {
	for _, single := range []bool{false, true} {
		var buf strings.Builder
		log := slog.New(slog.NewTextHandler(&buf, nil))
		c, _ := FromEnv(env())
		c.SingleInstance = single
		o, err := Open(context.Background(), c, log)
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

func FuzzFromEnv(f *testing.F) {
	f.Add("30", "memory", "postgres://h/db", "10.0.0.0/8", "true")
	f.Add("-1", "database", "sqlite:x.db", "::1,banana", "maybe")
	f.Fuzz(func(t *testing.T, perMinute, kind, dbURL, proxies, single string) {
		c, err := FromEnv(env("RATE_LIMIT_EXECUTE_PER_MINUTE", perMinute, "RATE_LIMIT_STORE", kind,
			"DATABASE_URL", dbURL, "TRUSTED_PROXIES", proxies, "RATE_LIMIT_SINGLE_INSTANCE", single, "GATECOUNT_SECRET", secret))
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not match ErrInvalid", err)
			}
			return
		}
		if err := c.Execute.Validate(); err != nil {
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
		c, err := FromEnv(env("RATE_LIMIT_STORE_URL", "redis://"+addr+"/0", "GATECOUNT_SECRET", secret, "RATE_LIMIT_REDIS_ALLOW_EVICTION", allow))
		if err != nil {
			t.Fatal(err)
		}
		if c.RedisAllowEviction != (allow == "true") {
			t.Fatalf("RATE_LIMIT_REDIS_ALLOW_EVICTION=%q read as %v", allow, c.RedisAllowEviction)
		}
		var buf strings.Builder
		o, err := Open(t.Context(), c, slog.New(slog.NewTextHandler(&buf, nil)))
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
