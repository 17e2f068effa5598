package redis_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/keyhash"
	redisstore "github.com/gatecount/gatecount/store/redis"
	"github.com/gatecount/gatecount/store/storetest"
)

// TestContract runs the contract suite with First and Second on two
// separate clients, as two instances of an app.
func TestContract(t *testing.T) { contract(t, standalone) }

// standalone returns a client of its own on the test Redis.
func standalone(t testing.TB) redis.UniversalClient { return newClient(t) }

// contract runs the contract suite on clients from newClient.
func contract(t *testing.T, newClient func(testing.TB) redis.UniversalClient) {
	storetest.Run(t, func(t *testing.T) storetest.Pair {
		secret := newSecret()
		c1 := newClient(t)
		s1 := open(t, c1, redisstore.Options{Secret: secret})
		s2 := open(t, newClient(t), redisstore.Options{Secret: secret})
		prefix := randomName("contract")
		return storetest.Pair{
			First:  handle(t, s1, prefix),
			Second: handle(t, s2, prefix),
			Other:  handle(t, s1, prefix+"-other"),
			NewBounded: func(max int) (*store.Handle, error) {
				s, err := redisstore.New(t.Context(), newClient(t), redisstore.Options{Secret: newSecret(), MaxEntries: max})
				if err != nil {
					return nil, err
				}
				h, err := s.Handle(prefix)
				if err != nil {
					s.Close()
					return nil, err
				}
				return h, nil
			},
			SameBacking: func() (*store.Store, error) {
				return redisstore.New(t.Context(), c1, redisstore.Options{Secret: secret, Store: store.Options{Logger: quiet}})
			},
		}
	})
}

// updateOnly hides the backend's Counter, so that Handle.Count runs the
// generic Count through Update.
type updateOnly struct{ b *redisstore.Backend }

func (u updateOnly) Shared() bool { return u.b.Shared() }
func (u updateOnly) Update(ctx context.Context, prefix string, keys []string, apply store.ApplyFunc) error {
	return u.b.Update(ctx, prefix, keys, apply)
}
func (u updateOnly) Read(ctx context.Context, prefix string, keys []string) ([]store.Entry, error) {
	return u.b.Read(ctx, prefix, keys)
}
func (u updateOnly) Sweep(ctx context.Context) (int, error) { return u.b.Sweep(ctx) }
func (u updateOnly) Close() error                           { return u.b.Close() }
func (u updateOnly) Backing() any                           { return u.b.Backing() }

// TestExactness: two instances, 100 goroutines each, race to count 200
// attempts on one key against a budget of 30; exactly 30 are admitted,
// every time, through the store's Count and through Update, and through
// Count of three keys at once (each with the budget).
func TestExactness(t *testing.T) { exactness(t, standalone) }

// exactness runs TestExactness on clients from newClient.
func exactness(t *testing.T, newClient func(testing.TB) redis.UniversalClient) {
	const (
		perClient = 100
		budget    = 30
		rounds    = 20
	)
	for _, path := range []string{"count", "update", "three-keys"} {
		t.Run(path, func(t *testing.T) {
			secret := newSecret()
			so := store.Options{MaxInFlight: 2 * perClient, Deadline: 30 * time.Second}.WithDefaults()
			var backends []*redisstore.Backend
			var hs []*store.Handle
			prefix := randomName("exact")
			for range 2 {
				b, err := redisstore.NewBackend(t.Context(), newClient(t), redisstore.Options{Secret: secret, Store: so})
				if err != nil {
					t.Fatal(err)
				}
				var s *store.Store
				if path != "update" {
					s = store.New(b, so)
				} else {
					s = store.New(updateOnly{b}, so)
				}
				t.Cleanup(func() { s.Close() })
				backends = append(backends, b)
				hs = append(hs, handle(t, s, prefix))
			}
			if _, native := hs[0].Store().Backend().(store.Counter); native != (path != "update") {
				t.Fatalf("Counter offered: %v on the %s path", native, path)
			}
			caps := []store.Budget{{Limit: budget, Window: time.Hour}}
			if path == "three-keys" {
				caps = append(caps, caps[0], caps[0])
			}
			for round := range rounds {
				key := []string{"round-" + strconv.Itoa(round)}
				if path == "three-keys" {
					key = append(key, key[0]+"-ip", key[0]+"-account")
				}
				var admitted, refused atomic.Int64
				var wg sync.WaitGroup
				errs := make(chan error, 2*perClient)
				start := make(chan struct{})
				for _, h := range hs {
					for range perClient {
						wg.Go(func() {
							<-start
							tl, err := h.Count(t.Context(), key, caps, 1)
							switch {
							case err != nil:
								errs <- err
							case tl.Allowed:
								admitted.Add(1)
							default:
								refused.Add(1)
							}
						})
					}
				}
				close(start)
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Errorf("round %d: Count: %v", round, err)
				}
				if admitted.Load() != budget || refused.Load() != 2*perClient-budget {
					t.Fatalf("round %d: %d admitted, %d refused; want %d and %d", round, admitted.Load(), refused.Load(), budget, 2*perClient-budget)
				}
			}
			retries := backends[0].Retries() + backends[1].Retries()
			t.Logf("%s path: %d rounds of %d attempts exact; %d update attempts conflicted and were retried", path, rounds, 2*perClient, retries)
			if path != "update" && retries != 0 {
				t.Errorf("the Count script retried %d times; it never should", retries)
			}
		})
	}
}

// TestKeyNames: keys are named by HMAC under the secret's fingerprint, with
// the prefix's hash tag, never in clear, and expire in Redis itself.
func TestKeyNames(t *testing.T) {
	c := newClient(t)
	secret := newSecret()
	s := open(t, c, redisstore.Options{Secret: secret})
	prefix := randomName("names")
	h := handle(t, s, prefix)
	if _, err := h.Count(t.Context(), []string{"alice@example.com", "10.0.0.1"}, []store.Budget{{Limit: 5, Window: time.Minute}, {Limit: 5, Window: time.Minute}}, 1); err != nil {
		t.Fatal(err)
	}
	hs, err := keyhash.New(secret)
	if err != nil {
		t.Fatal(err)
	}
	fp := hs.Fingerprint()
	var keys []string
	it := c.Scan(t.Context(), 0, "gatecount:{*}:"+fp+":*", 1000).Iterator()
	for it.Next(t.Context()) {
		keys = append(keys, it.Val())
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2+2 { // two entries and the live index's two keys
		t.Fatalf("keys under the fingerprint: %q, want two entries and an index's two keys", keys)
	}
	var tag string
	for _, k := range keys {
		if strings.Contains(k, "alice") || strings.Contains(k, "10.0.0.1") || strings.Contains(k, prefix) {
			t.Errorf("key %q names a key or prefix in clear", k)
		}
		l, r := strings.IndexByte(k, '{'), strings.IndexByte(k, '}')
		if tag == "" {
			tag = k[l+1 : r]
		} else if k[l+1:r] != tag {
			t.Errorf("keys of one handle have hash tags %q and %q; want one", tag, k[l+1:r])
		}
		if isIndex(k) {
			continue
		}
		ttl, err := c.PTTL(t.Context(), k).Result()
		if err != nil || ttl <= 0 || ttl > time.Minute {
			t.Errorf("entry %q has TTL %v (%v), want at most a minute", k, ttl, err)
		}
		v, err := c.Get(t.Context(), k).Result()
		if err != nil || !strings.HasSuffix(v, ":1") {
			t.Errorf("entry %q holds %q (%v), want <expiry>:1", k, v, err)
		}
	}
}

// TestRotation: entries written under one secret are neither read nor
// counted against the bound under another.
func TestRotation(t *testing.T) {
	c := newClient(t)
	prefix := randomName("rotate")
	old := open(t, c, redisstore.Options{Secret: newSecret()})
	ho := handle(t, old, prefix)
	keys := []string{"a", "b", "c"}
	for _, k := range keys {
		if err := ho.Update(t.Context(), []string{k}, put(`1`, time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	nu := open(t, c, redisstore.Options{Secret: newSecret(), MaxEntries: 2})
	hn := handle(t, nu, prefix)
	es, err := hn.Read(t.Context(), keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range es {
		if e.Live() {
			t.Errorf("key %d written under the old secret read %s under the new one", i, e.Value)
		}
	}
	for _, k := range keys[:2] {
		if err := hn.Update(t.Context(), []string{k}, put(`2`, time.Minute)); err != nil {
			t.Fatalf("new key under a new secret, with the old secret's entries about: %v", err)
		}
	}
	if err := hn.Update(t.Context(), []string{"c"}, put(`2`, time.Minute)); store.ReasonOf(err) != store.ReasonFull {
		t.Fatalf("third key in a store bound to two: %v, want full", err)
	}
	if n := nu.Backend().(*redisstore.Backend).Live(); n != 2 {
		t.Errorf("Live() = %d under the new secret, want 2", n)
	}
}

// TestBoundAcrossHandles: entries of every handle count against one bound.
func TestBoundAcrossHandles(t *testing.T) {
	secret := newSecret()
	s1 := open(t, newClient(t), redisstore.Options{Secret: secret, MaxEntries: 4})
	prefix := randomName("across")
	a, b := handle(t, s1, prefix+"-a"), handle(t, s1, prefix+"-b")
	for i := range 2 {
		if err := a.Update(t.Context(), []string{strconv.Itoa(i)}, put(`1`, time.Minute)); err != nil {
			t.Fatal(err)
		}
		if err := b.Update(t.Context(), []string{strconv.Itoa(i)}, put(`1`, time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	caps := []store.Budget{{Limit: 3, Window: time.Minute}}
	if _, err := a.Count(t.Context(), []string{"new"}, caps, 1); store.ReasonOf(err) != store.ReasonFull {
		t.Fatalf("Count of a fifth key over two handles, bound 4: %v, want full", err)
	}
	// Another instance, which has not yet used either handle, learns of
	// them from the list of tags.
	s2 := open(t, newClient(t), redisstore.Options{Secret: secret, MaxEntries: 4})
	c := handle(t, s2, prefix+"-c")
	if err := c.Update(t.Context(), []string{"x"}, put(`1`, time.Minute)); store.ReasonOf(err) != store.ReasonFull {
		t.Fatalf("a new key on a third handle of another instance: %v, want full", err)
	}
	if n := s2.Backend().(*redisstore.Backend).Live(); n != 4 {
		t.Errorf("the other instance counts %d live entries, want 4", n)
	}
}

// TestFullFlood: new keys finding the bound reached start at most one
// sweep a second between them, where each used to start one. A sweep reads
// the list of tags and tidies each, so a flood of new keys would cost Redis
// a call per tag per key.
func TestFullFlood(t *testing.T) {
	c := newClient(t)
	var calls atomic.Int64
	c.AddHook(countCalls{&calls})
	s := open(t, c, redisstore.Options{Secret: newSecret(), MaxEntries: 20})
	prefix := randomName("flood")
	const tags, refusals = 20, 200
	var hs []*store.Handle
	caps := []store.Budget{{Limit: 10, Window: time.Minute}}
	for i := range tags {
		h := handle(t, s, prefix+"-"+strconv.Itoa(i))
		hs = append(hs, h)
		if _, err := h.Count(t.Context(), []string{"held"}, caps, 1); err != nil {
			t.Fatal(err)
		}
	}
	calls.Store(0)
	start := time.Now()
	for i := range refusals {
		_, err := hs[i%tags].Count(t.Context(), []string{"new-" + strconv.Itoa(i)}, caps, 1)
		if store.ReasonOf(err) != store.ReasonFull {
			t.Fatalf("new key %d on a full store: %v, want full", i, err)
		}
	}
	// Each refusal runs the count script once, or twice around a sweep; a
	// sweep reads the tags, then tidies each (one call, as nothing is left
	// to move from an earlier index).
	sweeps := int64(time.Since(start)/time.Second) + 1
	if most := refusals + sweeps*(1+1+tags); calls.Load() > most {
		t.Errorf("%d refused new keys made %d calls to Redis, want at most %d (%d sweeps)", refusals, calls.Load(), most, sweeps)
	}
	// Keys already held keep counting.
	if _, err := hs[0].Count(t.Context(), []string{"held"}, caps, 1); err != nil {
		t.Errorf("a held key on a full store: %v", err)
	}
}

// countCalls is a client hook that counts the commands sent.
type countCalls struct{ n *atomic.Int64 }

func (h countCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h countCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// TestContention: an Update that keeps losing to concurrent updates from
// another instance is answered overloaded past MaxRetries, never left
// hanging.
func TestContention(t *testing.T) {
	so := store.Options{MaxInFlight: 128, Deadline: 30 * time.Second}.WithDefaults()
	secret, prefix := newSecret(), randomName("contend")
	var bs []*redisstore.Backend
	var hs []*store.Handle
	for range 2 {
		b, err := redisstore.NewBackend(t.Context(), newClient(t), redisstore.Options{Secret: secret, MaxRetries: 1, Store: so})
		if err != nil {
			t.Fatal(err)
		}
		s := store.New(b, so)
		t.Cleanup(func() { s.Close() })
		bs = append(bs, b)
		hs = append(hs, handle(t, s, prefix))
	}
	var overloaded atomic.Int64
	for round := 0; round < 10 && overloaded.Load() == 0; round++ {
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				for range 40 {
					err := hs[i%2].Update(t.Context(), []string{"hot"}, incrFor(time.Minute))
					switch {
					case err == nil:
					case store.ReasonOf(err) == store.ReasonOverloaded && errors.Is(err, redisstore.ErrContention):
						overloaded.Add(1)
					default:
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
	}
	retries := bs[0].Retries() + bs[1].Retries()
	t.Logf("%d updates answered overloaded after a retry that conflicted again; %d retries in all", overloaded.Load(), retries)
	if overloaded.Load() == 0 {
		t.Skip("no update conflicted twice: the machine ran them one at a time")
	}
}

// TestNew: a weak secret is refused; a Redis that does not answer is
// unavailable.
func TestNew(t *testing.T) {
	c := newClient(t)
	if _, err := redisstore.New(t.Context(), c, redisstore.Options{Secret: []byte("short")}); !errors.Is(err, keyhash.ErrWeakSecret) {
		t.Errorf("New with a short secret: %v, want %v", err, keyhash.ErrWeakSecret)
	}
}

// put is an apply that writes v, expiring ttl from the store's now.
func put(v string, ttl time.Duration) store.ApplyFunc {
	return func(now time.Time, es []store.Entry) error {
		for i := range es {
			es[i] = store.Entry{Value: []byte(v), ExpiresAt: now.Add(ttl)}
		}
		return nil
	}
}

// incrFor is an apply that adds one to each counter, starting one that
// lasts ttl.
func incrFor(ttl time.Duration) store.ApplyFunc {
	return func(now time.Time, es []store.Entry) error {
		for i := range es {
			e := &es[i]
			n := int64(0)
			if e.Live() {
				n, _ = strconv.ParseInt(string(e.Value), 10, 64)
			} else {
				e.ExpiresAt = now.Add(ttl)
			}
			e.Value = strconv.AppendInt(e.Value[:0], n+1, 10)
		}
		return nil
	}
}

// isIndex reports whether the Redis key k is one of a live index's.
func isIndex(k string) bool {
	return strings.HasSuffix(k, ":live") || strings.HasSuffix(k, ":ends") || strings.HasSuffix(k, ":ends:at")
}
