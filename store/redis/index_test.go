package redis_test

import (
	"context"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/keyhash"
	redisstore "github.com/gatecount/gatecount/store/redis"
)

// TestIndexCounts: the live index counts exactly the entries a handle
// holds, through new keys, moved expiries, deletions, counts of every
// algorithm and expiries, once a sweep has tidied it.
func TestIndexCounts(t *testing.T) {
	ctx := t.Context()
	s := open(t, newClient(t), redisstore.Options{Secret: newSecret()})
	b := s.Backend().(*redisstore.Backend)
	h := handle(t, s, randomName("index"))
	live := func(want int) { t.Helper(); wantLive(t, b, want) }
	update := func(key string, apply store.ApplyFunc) {
		t.Helper()
		if err := h.Update(ctx, []string{key}, apply); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		update("k"+strconv.Itoa(i), put(`1`, time.Hour))
	}
	update("short", put(`1`, 300*time.Millisecond))
	live(6)
	update("k0", put(`2`, 2*time.Hour)) // moved
	update("k1", put(`2`, time.Hour))   // moved by a millisecond or more
	live(6)
	update("k2", func(_ time.Time, es []store.Entry) error { es[0] = store.Entry{}; return nil })
	live(5)
	fixed := []store.Budget{{Limit: 10, Window: time.Hour}}
	sliding := []store.Budget{{Limit: 10, Window: time.Hour, Algorithm: store.SlidingWindow}}
	bucket := []store.Budget{{Limit: 10, Window: time.Hour, Algorithm: store.TokenBucket}}
	for range 3 {
		for _, c := range []struct {
			key  string
			caps []store.Budget
		}{{"fixed", fixed}, {"sliding", sliding}, {"bucket", bucket}} {
			if _, err := h.Count(ctx, []string{c.key}, c.caps, 1); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(2 * time.Millisecond) // the sliding window's and the bucket's expiries move
	}
	live(8)
	time.Sleep(400 * time.Millisecond) // "short" expires
	live(7)
}

// TestIndexUpgrade: entries an earlier version indexed by member, in the
// sorted set it kept, join the index at the next sweep and count against
// the bound once each; one moved or deleted afterwards is counted once,
// or no more.
func TestIndexUpgrade(t *testing.T) {
	ctx := t.Context()
	c := newClient(t)
	secret, prefix := newSecret(), randomName("upgrade")
	s := open(t, c, redisstore.Options{Secret: secret, MaxEntries: 4})
	b := s.Backend().(*redisstore.Backend)
	h := handle(t, s, prefix)
	for i := range 3 {
		if err := h.Update(ctx, []string{"k" + strconv.Itoa(i)}, put(`1`, time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	toEarlierIndex(t, c, secret)
	live := func(want int) { t.Helper(); wantLive(t, b, want) }
	live(3)
	if err := h.Update(ctx, []string{"k3"}, put(`1`, time.Hour)); err != nil {
		t.Fatal(err)
	}
	live(4)
	if err := h.Update(ctx, []string{"k4"}, put(`1`, time.Hour)); err == nil {
		t.Fatal("a fifth entry was written under a bound of 4 while the earlier index held 3")
	}
	if err := h.Update(ctx, []string{"k0"}, put(`2`, 2*time.Hour)); err != nil { // moved
		t.Fatal(err)
	}
	live(4)
	if err := h.Update(ctx, []string{"k1"}, func(_ time.Time, es []store.Entry) error { es[0] = store.Entry{}; return nil }); err != nil {
		t.Fatal(err)
	}
	live(3)
	if _, err := h.Count(ctx, []string{"k5"}, []store.Budget{{Limit: 5, Window: time.Hour}}, 1); err != nil {
		t.Fatal(err)
	}
	live(4)
	if _, err := h.Count(ctx, []string{"k6"}, []store.Budget{{Limit: 5, Window: time.Hour}}, 1); err == nil {
		t.Fatal("a fifth entry was counted under a bound of 4")
	}
}

// toEarlierIndex rewrites the live indexes under secret as an earlier
// version kept them: one sorted set per tag, of each entry's member (the
// last eight bytes of its HMAC) scored by its expiry.
func toEarlierIndex(t *testing.T, c *redis.Client, secret []byte) {
	t.Helper()
	ctx := context.Background()
	hs, err := keyhash.New(secret)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	it := c.Scan(ctx, 0, "gatecount:{*}:"+hs.Fingerprint()+":*", 1000).Iterator()
	for it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if isIndex(k) {
			if err := c.Del(ctx, k).Err(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		v, err := c.Get(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		exp, _, _ := strings.Cut(v, ":")
		score, err := strconv.ParseFloat(exp, 64)
		if err != nil {
			t.Fatal(err)
		}
		member, err := hex.DecodeString(k[len(k)-16:])
		if err != nil {
			t.Fatal(err)
		}
		old := k[:strings.LastIndexByte(k, ':')+1] + "live"
		if err := c.ZAdd(ctx, old, redis.Z{Score: score, Member: string(member)}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.PExpire(ctx, old, 2*time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestIndexUpgradeLarge: a sweep moves an earlier version's index of more
// entries than one tidy moves (1,000) entirely, expired members aside.
func TestIndexUpgradeLarge(t *testing.T) {
	ctx := t.Context()
	c := newClient(t)
	secret := newSecret()
	s := open(t, c, redisstore.Options{Secret: secret})
	b := s.Backend().(*redisstore.Backend)
	h := handle(t, s, randomName("upgrade-large"))
	if err := h.Update(ctx, []string{"k"}, put(`1`, time.Hour)); err != nil {
		t.Fatal(err)
	}
	toEarlierIndex(t, c, secret)
	hs, err := keyhash.New(secret)
	if err != nil {
		t.Fatal(err)
	}
	var old string
	it := c.Scan(ctx, 0, "gatecount:{*}:"+hs.Fingerprint()+":live", 1000).Iterator()
	for it.Next(ctx) {
		old = it.Val()
	}
	if old == "" {
		t.Fatal("no earlier index was written")
	}
	const n = 2500
	at := float64(time.Now().Add(time.Hour).UnixMilli())
	members := make([]redis.Z, 0, n+10)
	for i := range n - 1 {
		members = append(members, redis.Z{Score: at + float64(i%7), Member: "m" + strconv.Itoa(i)})
	}
	for i := range 10 { // expired
		members = append(members, redis.Z{Score: 1000, Member: "x" + strconv.Itoa(i)})
	}
	if err := c.ZAdd(ctx, old, members...).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.Live(); got != n {
		t.Fatalf("after a sweep the index counts %d live entries; want %d", got, n)
	}
	if left, err := c.Exists(ctx, old).Result(); err != nil || left != 0 {
		t.Fatalf("the earlier index is still there after a sweep (%d, %v)", left, err)
	}
}

// wantLive sweeps b and fails t unless its index then counts want live
// entries.
func wantLive(t *testing.T, b *redisstore.Backend, want int) {
	t.Helper()
	if _, err := b.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := b.Live(); got != want {
		t.Fatalf("the index counts %d live entries; want %d", got, want)
	}
}
