package memory

import (
	"testing"
	"time"
)

// Items whose hashes are equal share a chain: each is found by its own
// prefix and key, and each can be removed wherever it sits in the chain.
func TestHashChain(t *testing.T) {
	const h = 42
	s := &shard{m: make(map[uint64]*item)}
	names := []struct{ prefix, key string }{{"a:", "k"}, {"b:", "k"}, {"a:", "j"}, {"a:", "i"}}
	for i, n := range names {
		s.add(h, &item{prefix: n.prefix, key: n.key, value: []byte{byte('0' + i)}})
	}
	find := func(prefix, key string) string {
		if it := s.find(h, prefix, key); it != nil {
			return string(it.value)
		}
		return ""
	}
	for i, n := range names {
		if got := find(n.prefix, n.key); got != string(rune('0'+i)) {
			t.Fatalf("find(%q, %q) = %q, want %q", n.prefix, n.key, got, string(rune('0'+i)))
		}
	}
	if got := find("c:", "k"); got != "" {
		t.Fatalf("found %q under a prefix never added", got)
	}
	// The chain runs newest first: remove the middle, the tail, the head.
	for _, n := range []struct{ prefix, key string }{{"a:", "j"}, {"a:", "k"}, {"a:", "i"}} {
		s.remove(h, s.find(h, n.prefix, n.key))
		if find(n.prefix, n.key) != "" {
			t.Fatalf("%q %q still found after remove", n.prefix, n.key)
		}
	}
	if got := find("b:", "k"); got != "1" {
		t.Fatalf("the last item left: %q, want %q", got, "1")
	}
	s.remove(h, s.find(h, "b:", "k"))
	if len(s.m) != 0 {
		t.Fatalf("map holds %d hashes after every item went", len(s.m))
	}
}

// The sweep walks whole chains, removing the expired items and keeping the
// live ones wherever they sit.
func TestSweepWalksChains(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	b := NewBackend(Options{Shards: 1, Now: func() time.Time { return now }})
	defer b.Close()
	s := &b.shards[0]
	exps := []int64{999_000, 2_000_000, 999_500, 2_000_000, 500} // expired, live, expired, live, expired
	for i, e := range exps {
		s.add(7, &item{prefix: "p:", key: string(rune('a' + i)), value: []byte("1"), exp: e})
	}
	b.live.Store(int64(len(exps)))
	if n := b.sweep(); n != 3 {
		t.Fatalf("swept %d, want 3", n)
	}
	for i, e := range exps {
		found := s.find(7, "p:", string(rune('a'+i))) != nil
		if found != (e > now.UnixMilli()) {
			t.Errorf("item %d (expires %d): found=%v after the sweep", i, e, found)
		}
	}
	if b.Entries() != 2 {
		t.Errorf("Entries() = %d, want 2", b.Entries())
	}
}

// mixPrefix tells apart prefixes of every length and allocates nothing.
func TestMixPrefix(t *testing.T) {
	seen := map[uint64]string{}
	for _, p := range []string{"", "a", "b", "a:", "execute:", "execute:x", "health:", "password-reset:account-ip:", "password-reset:account-ip;"} {
		h := mixPrefix(p)
		if q, ok := seen[h]; ok {
			t.Errorf("prefixes %q and %q mix alike", p, q)
		}
		seen[h] = p
	}
	long := "password-reset:account-ip:"
	if n := testing.AllocsPerRun(100, func() { mixPrefix(long) }); n != 0 {
		t.Errorf("mixPrefix allocates %v times", n)
	}
}
