package redis_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
	redisstore "github.com/gatecount/gatecount/store/redis"
)

// records is a slog.Handler that keeps what is logged.
type records struct {
	mu   sync.Mutex
	list []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.list = append(r.list, rec.Clone())
	r.mu.Unlock()
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// logger returns a logger into r.
func (r *records) logger() *slog.Logger { return slog.New(r) }

// kinds returns the "kind" of each record, in order.
func (r *records) kinds() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.list {
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "kind" {
				out = append(out, a.Value.String())
			}
			return true
		})
	}
	return out
}

// count returns how many records have the kind.
func (r *records) count(kind string) int {
	n := 0
	for _, k := range r.kinds() {
		if k == kind {
			n++
		}
	}
	return n
}

// waitFor waits, a while at most, until a record of the kind is logged,
// and reports whether one was.
func (r *records) waitFor(kind string) bool {
	for range 200 {
		if r.count(kind) > 0 {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// configSet sets Redis settings on c, name and value pairs.
func configSet(t testing.TB, c *redis.Client, kv ...string) {
	t.Helper()
	for i := 0; i < len(kv); i += 2 {
		if err := c.ConfigSet(t.Context(), kv[i], kv[i+1]).Err(); err != nil {
			t.Fatalf("CONFIG SET %s %s: %v", kv[i], kv[i+1], err)
		}
	}
}

// TestEviction: a server that may evict (a maxmemory and a policy other
// than noeviction) is refused with an error naming the setting and the fix,
// unless AllowEviction accepts it, which logs the risk.
func TestEviction(t *testing.T) {
	addr := startServer(t, 7101)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	tests := []struct {
		maxmemory, policy string
		allow             bool
		refused           bool
		logged            []string
	}{
		{"0", "noeviction", false, false, nil},
		{"100mb", "noeviction", false, false, nil},
		{"0", "allkeys-lru", false, false, nil}, // no limit: nothing is evicted
		{"100mb", "allkeys-lru", false, true, nil},
		{"100mb", "volatile-ttl", false, true, nil},
		{"100mb", "allkeys-random", false, true, nil},
		{"100mb", "allkeys-lru", true, false, []string{redisstore.KindEvicting}},
	}
	for _, tt := range tests {
		t.Run(tt.maxmemory+"/"+tt.policy+"/allow="+strconv.FormatBool(tt.allow), func(t *testing.T) {
			configSet(t, admin, "maxmemory", tt.maxmemory, "maxmemory-policy", tt.policy)
			var logs records
			c := ownClient(t, addr)
			s, err := redisstore.New(t.Context(), c, redisstore.Options{Secret: newSecret(), AllowEviction: tt.allow, Store: store.Options{Logger: logs.logger()}})
			if s != nil {
				defer s.Close()
			}
			switch {
			case tt.refused && !errors.Is(err, redisstore.ErrEvicting):
				t.Fatalf("New: %v, want %v", err, redisstore.ErrEvicting)
			case tt.refused:
				for _, want := range []string{"maxmemory-policy", tt.policy, "noeviction", "AllowEviction"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("the error %q does not name %q", err, want)
					}
				}
			case err != nil:
				t.Fatalf("New: %v", err)
			}
			for _, k := range tt.logged {
				if logs.count(k) != 1 {
					t.Errorf("logged %v, want one %s", logs.kinds(), k)
				}
			}
			if !tt.refused && tt.logged == nil && logs.count(redisstore.KindEvicting) != 0 {
				t.Errorf("logged %v for a server that cannot evict", logs.kinds())
			}
		})
	}
}

// TestEvictionRechecked: each background sweep reads the settings again
// and logs an error when the server may now evict, and another when it
// evicted keys.
func TestEvictionRechecked(t *testing.T) {
	addr := startServer(t, 7102)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	var logs records
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	s, err := redisstore.New(t.Context(), c, redisstore.Options{Secret: newSecret(), SweepInterval: 20 * time.Millisecond, Store: store.Options{Logger: logs.logger()}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n := logs.count(redisstore.KindEvicting); n != 0 {
		t.Fatalf("logged %v before the settings changed", logs.kinds())
	}
	used, err := admin.Info(t.Context(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	mem, _ := strconv.ParseInt(infoField(used, "used_memory"), 10, 64)
	configSet(t, admin, "maxmemory", strconv.FormatInt(mem+4<<20, 10), "maxmemory-policy", "allkeys-lru")
	if !logs.waitFor(redisstore.KindEvicting) {
		t.Fatalf("no %s logged after the policy changed; logged %v", redisstore.KindEvicting, logs.kinds())
	}
	// Fill the server past its maxmemory: it evicts.
	value := strings.Repeat("x", 10_000)
	for i := range 1000 {
		if err := admin.Set(t.Context(), "filler:"+strconv.Itoa(i), value, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if !logs.waitFor(redisstore.KindEvicted) {
		t.Fatalf("no %s logged after the server evicted keys; logged %v", redisstore.KindEvicted, logs.kinds())
	}
	if n := logs.count(redisstore.KindEvicting); n != 1 {
		t.Errorf("%d records of %s for one change, want 1", n, redisstore.KindEvicting)
	}
}

// TestEvictionUnchecked: where INFO and CONFIG are not allowed, the store
// starts and logs that it could not check; where only CONFIG is not, it
// checks through INFO.
func TestEvictionUnchecked(t *testing.T) {
	addr := startServer(t, 7103, "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru")
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	for _, acl := range [][]string{
		{"limited", "on", ">pw", "~*", "&*", "+@all", "-info", "-config"},
		{"noconfig", "on", ">pw", "~*", "&*", "+@all", "-config"},
	} {
		if err := admin.Do(t.Context(), append([]any{"acl", "setuser"}, toAny(acl)...)...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var logs records
	c := redis.NewClient(&redis.Options{Addr: addr, Username: "limited", Password: "pw", MaxRetries: -1})
	defer c.Close()
	s, err := redisstore.New(t.Context(), c, redisstore.Options{Secret: newSecret(), Store: store.Options{Logger: logs.logger()}})
	if err != nil {
		t.Fatalf("New, INFO and CONFIG not allowed: %v", err)
	}
	s.Close()
	if !slices.Contains(logs.kinds(), redisstore.KindEvictionUnchecked) {
		t.Errorf("logged %v, want %s", logs.kinds(), redisstore.KindEvictionUnchecked)
	}
	c2 := redis.NewClient(&redis.Options{Addr: addr, Username: "noconfig", Password: "pw", MaxRetries: -1})
	defer c2.Close()
	if _, err := redisstore.New(t.Context(), c2, redisstore.Options{Secret: newSecret(), Store: store.Options{Logger: quiet}}); !errors.Is(err, redisstore.ErrEvicting) {
		t.Errorf("New, CONFIG not allowed, INFO allowed, allkeys-lru: %v, want %v", err, redisstore.ErrEvicting)
	}
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// TestOOMIsFull: a Redis at its maxmemory (noeviction) refuses writes with
// OOM, which the store answers full, not down: the breaker stays closed,
// reads still answer, and counting resumes at once when memory is freed.
func TestOOMIsFull(t *testing.T) {
	addr := startServer(t, 7104)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	var logs records
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	s := open(t, c, redisstore.Options{Secret: newSecret(), Store: store.Options{
		Logger:  logs.logger(),
		Breaker: store.BreakerOptions{Failures: 2, Cooldown: time.Hour},
	}})
	h := handle(t, s, "signin:")
	caps := []store.Budget{{Limit: 5, Window: time.Hour}}
	if _, err := h.Count(t.Context(), []string{"held"}, caps, 1); err != nil {
		t.Fatal(err)
	}
	configSet(t, admin, "maxmemory", "1", "maxmemory-policy", "noeviction")
	for i := range 10 {
		for _, key := range []string{"new-" + strconv.Itoa(i), "held"} {
			_, err := h.Count(t.Context(), []string{key}, caps, 1)
			if store.ReasonOf(err) != store.ReasonFull || !errors.Is(err, store.ErrFull) {
				t.Fatalf("Count of %s at maxmemory: %v (%v), want full", key, err, store.ReasonOf(err))
			}
			err = h.Update(t.Context(), []string{key}, incrFor(time.Hour))
			if store.ReasonOf(err) != store.ReasonFull {
				t.Fatalf("Update of %s at maxmemory: %v, want full", key, err)
			}
		}
	}
	es, err := h.Read(t.Context(), []string{"held"})
	if err != nil || !es[0].Live() || string(es[0].Value) != "1" {
		t.Fatalf("Read at maxmemory: %v %v, want the held count", es, err)
	}
	if logs.count(redisstore.KindOOM) != 1 {
		t.Errorf("logged %v, want one %s", logs.kinds(), redisstore.KindOOM)
	}
	configSet(t, admin, "maxmemory", "0")
	tl, err := h.Count(t.Context(), []string{"held"}, caps, 1)
	if err != nil || tl.Counts[0] != 2 {
		t.Fatalf("Count once memory is freed: %v, count %d; want 2 at once (no breaker opened)", err, tl.Counts[0])
	}
}

// TestPersistence: a server that keeps nothing on disk gets one warning at
// start; one with an append-only file or snapshots gets none.
func TestPersistence(t *testing.T) {
	addr := startServer(t, 7105)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	for _, tt := range []struct {
		appendonly, save string
		warned           bool
	}{
		{"no", "", true},
		{"yes", "", false},
		{"no", "3600 1", false},
	} {
		configSet(t, admin, "appendonly", tt.appendonly, "save", tt.save)
		if tt.appendonly == "yes" {
			// The append-only file is written in the background; INFO
			// tells it is on once the rewrite began.
			for i := 0; i < 100 && !strings.Contains(admin.Info(t.Context(), "persistence").Val(), "aof_enabled:1"); i++ {
				time.Sleep(20 * time.Millisecond)
			}
		}
		var logs records
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		s, err := redisstore.New(t.Context(), c, redisstore.Options{Secret: newSecret(), Store: store.Options{Logger: logs.logger()}})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		c.Close()
		want := 0
		if tt.warned {
			want = 1
		}
		if n := logs.count(redisstore.KindNotPersistent); n != want {
			t.Errorf("appendonly %s, save %q: %d records of %s, want %d", tt.appendonly, tt.save, n, redisstore.KindNotPersistent, want)
		}
	}
}

// TestRedisLogger: go-redis's lines come out as records of kind
// KindClient, the first ten at once and then a few; OpenURL sends them to
// the store's logger.
func TestRedisLogger(t *testing.T) {
	var logs records
	l := redisstore.NewRedisLogger(logs.logger())
	for range 100 {
		l.Printf(t.Context(), "redis: connection pool: failed to dial after %d attempts", 5)
	}
	if n := logs.count(redisstore.KindClient); n != 10 {
		t.Errorf("%d of 100 lines in a burst logged, want the first 10", n)
	}
	if msg := logs.list[0].Message; msg != "redis client: connection pool: failed to dial after 5 attempts" {
		t.Errorf("message %q", msg)
	}

	// No server on the port: OpenURL's client fails to dial, and says so.
	stopServer("127.0.0.1:7106")
	var opened records
	_, err := redisstore.OpenURL(t.Context(), "redis://127.0.0.1:7106/0", redisstore.Options{Secret: newSecret(), Store: store.Options{Logger: opened.logger()}})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("OpenURL with no server: %v, want unavailable", err)
	}
	if opened.count(redisstore.KindClient) == 0 {
		t.Errorf("go-redis's lines did not reach the store's logger: %v", opened.kinds())
	}
}

// TestOOMLimiter: a limiter on a Redis at its maxmemory hands out no fresh
// budget: a key spent before stays refused, a key with room left gets only
// what was left of it, and a new key is counted in process memory (Local).
func TestOOMLimiter(t *testing.T) {
	addr := startServer(t, 7104)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	s := open(t, c, redisstore.Options{Secret: newSecret()})
	l, err := limiter.New(handle(t, s, "signin:"), limiter.Options{
		Name: "signin", Budget: limiter.Budget{Limit: 5, Window: time.Hour}, Unavailable: limiter.Local, Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	attempts := func(key string, n int) (allowed int) {
		t.Helper()
		for range n {
			d, err := l.Attempt(t.Context(), key)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				allowed++
			}
		}
		return allowed
	}
	if a := attempts("spent", 6); a != 5 {
		t.Fatalf("before: %d of 6 allowed, want 5", a)
	}
	if a := attempts("room", 3); a != 3 {
		t.Fatalf("before: %d of 3 allowed, want 3", a)
	}
	for i := 0; s.Members() == 0; i++ { // counting alone needs the fleet counted
		if i == 500 {
			t.Fatal("the store did not count its members within 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	configSet(t, admin, "maxmemory", "1", "maxmemory-policy", "noeviction")
	for _, tt := range []struct {
		key  string
		want int
	}{{"spent", 0}, {"room", 2}, {"new", 5}} {
		if a := attempts(tt.key, 10); a != tt.want {
			t.Errorf("at maxmemory, key %s: %d of 10 allowed, want %d", tt.key, a, tt.want)
		}
	}
}
