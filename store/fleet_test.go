package store_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
)

var silent = slog.New(slog.DiscardHandler)

// sharedMemory is a memory backend that instances share, as a database:
// each instance wraps it on its own, so that each has a backing of its own,
// and sees it without the guard's path for stores in process memory.
type sharedMemory struct {
	remote interface {
		store.Backend
		store.Counter
	}
	mute *atomic.Bool // when set, the store's announcements fail
}

func (m sharedMemory) Update(ctx context.Context, p string, k []string, a store.ApplyFunc) error {
	if m.mute != nil && m.mute.Load() && strings.HasPrefix(p, "gatecount.fleet") {
		return errors.New("announcement lost")
	}
	return m.remote.Update(ctx, p, k, a)
}

func (m sharedMemory) Read(ctx context.Context, p string, k []string) ([]store.Entry, error) {
	return m.remote.Read(ctx, p, k)
}

func (m sharedMemory) Sweep(ctx context.Context) (int, error) { return m.remote.Sweep(ctx) }

func (sharedMemory) Shared() bool { return true }

// fleetOf opens n stores over one shared backend, announcing every 10 ms,
// joins them, and waits until each counts n members.
func fleetOf(t *testing.T, n int, mutes ...*atomic.Bool) []*store.Store {
	t.Helper()
	o := store.Options{Logger: silent, Announce: 10 * time.Millisecond}.WithDefaults()
	b := memory.NewBackend(memory.Options{Store: o})
	t.Cleanup(func() { b.Close() })
	var ss []*store.Store
	for i := range n {
		var mute *atomic.Bool
		if i < len(mutes) {
			mute = mutes[i]
		}
		s := store.New(sharedMemory{b, mute}, store.Options{Logger: silent, Announce: 10 * time.Millisecond})
		t.Cleanup(func() { s.Close() })
		s.Join()
		ss = append(ss, s)
	}
	for _, s := range ss {
		members(t, s, n)
	}
	return ss
}

// members waits until s counts n members.
func members(t *testing.T, s *store.Store, n int) {
	t.Helper()
	for i := 0; s.Members() != n; i++ {
		if i == 1000 {
			t.Fatalf("the store counts %d members after 10 s, want %d", s.Members(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The shares of the instances sharing a store sum to what was left, each
// the quotient or one more, the remainder going to instances in an order
// that turns with the key: 5 shared by 3 is 2, 2 and 1.
func TestShare(t *testing.T) {
	ss := fleetOf(t, 3)
	for _, left := range []int64{0, 1, 2, 3, 5, 20, 30, 1000} {
		got := map[int64]int{} // how many times each instance got the larger share
		for _, key := range []string{"a", "b", "alice", "account:alice", "ip:192.0.2.1", "x"} {
			var shares []int64
			var sum int64
			for _, s := range ss {
				sh := s.Share(key, left)
				shares = append(shares, sh)
				sum += sh
			}
			if sum != left {
				t.Errorf("left %d, key %q: shares %v sum to %d, want %d", left, key, shares, sum, left)
			}
			slices.Sort(shares)
			if lo, hi := left/3, (left+2)/3; shares[0] < lo || shares[2] > hi {
				t.Errorf("left %d, key %q: shares %v, want each %d or %d", left, key, shares, lo, hi)
			}
			if left == 5 && !slices.Equal(shares, []int64{1, 2, 2}) {
				t.Errorf("5 shared by 3 for key %q: %v, want 1, 2 and 2", key, shares)
			}
			for i, s := range ss {
				if s.Share(key, left) > left/3 {
					got[int64(i)]++
				}
			}
		}
		if left%3 != 0 && len(got) < 2 {
			t.Errorf("left %d: the larger shares went to %v over six keys: the order does not turn", left, got)
		}
	}
	if sh := ss[0].Share("k", -1); sh != 0 {
		t.Errorf("share of a spent budget: %d, want 0", sh)
	}
}

// An instance that has not joined, or not reached, a shared store has no
// share of anything; a store no other instance sees gives what was left.
func TestShareNeedsMembers(t *testing.T) {
	o := store.Options{Logger: silent}.WithDefaults()
	b := memory.NewBackend(memory.Options{Store: o})
	defer b.Close()
	s := store.New(sharedMemory{remote: b}, store.Options{Logger: silent})
	defer s.Close()
	if s.Members() != 0 || s.Share("k", 10) != 0 {
		t.Errorf("a shared store not joined: %d members, share %d; want 0 and 0", s.Members(), s.Share("k", 10))
	}
	alone := memory.New(memory.Options{})
	defer alone.Close()
	if alone.Members() != 1 || alone.Share("k", 10) != 10 {
		t.Errorf("a store of this process alone: %d members, share %d; want 1 and 10", alone.Members(), alone.Share("k", 10))
	}
}

// An instance that owes the store attempts admitted alone says so, and the
// others keep room for its share of every key, while it keeps room for
// theirs until it has heard who owes; once it owes nothing, and once it
// closes, they no longer do.
func TestReservedWhileOwing(t *testing.T) {
	ss := fleetOf(t, 3)
	a, b := ss[0], ss[1]
	waitReserved := func(key string, limit, want int64) {
		t.Helper()
		reserved(t, b, key, limit, want)
	}
	for _, key := range []string{"alice", "bob"} { // nothing owed
		waitReserved(key, 5, 0)
	}
	a.Owing(true)
	for _, key := range []string{"alice", "bob", "carol"} {
		waitReserved(key, 5, a.Share(key, 5))
		// Owing, a takes every other instance as owing too, until it hears
		// otherwise: room for all shares but its own.
		if r, want := roomAll(a, key, 5), 5-a.Share(key, 5); r != want {
			t.Errorf("an instance that owes keeps room for the others' shares of %q: %d, want %d", key, r, want)
		}
	}
	a.Owing(false)
	waitReserved("alice", 5, 0)
	for i := 0; roomAll(a, "alice", 5) != 0; i++ { // once it has heard who owes
		if i == 1000 {
			t.Fatalf("an instance that owes nothing still keeps room after 10 s: %d", roomAll(a, "alice", 5))
		}
		time.Sleep(10 * time.Millisecond)
	}
	a.Owing(true)
	waitReserved("alice", 20, a.Share("alice", 20))
	a.Close()
	members(t, b, 2)
	waitReserved("alice", 20, 0)
}

// Close leaves the shared backend to the test, which closes it once.
func (sharedMemory) Close() error { return nil }

// A member whose announcements fail may owe the store without saying so:
// after two intervals unheard, the others keep room for its share.
func TestReservedForQuietMember(t *testing.T) {
	var mute atomic.Bool
	ss := fleetOf(t, 2, &mute)
	a, b := ss[0], ss[1]
	reserved(t, b, "alice", 20, 0) // every member heard from
	mute.Store(true)
	reserved(t, b, "alice", 20, a.Share("alice", 20))
	mute.Store(false)
	reserved(t, b, "alice", 20, 0) // heard again
}

// An instance whose own announcements fail cannot tell who went quiet
// since it last read the fleet: it keeps room for every other member's
// share, and trusts what it reads again once its announcements land.
func TestReservedWhileOwnViewStale(t *testing.T) {
	var mute atomic.Bool
	ss := fleetOf(t, 3, nil, &mute)
	a, b, c := ss[0], ss[1], ss[2]
	reserved(t, b, "alice", 20, 0)
	mute.Store(true)
	reserved(t, b, "alice", 20, a.Share("alice", 20)+c.Share("alice", 20))
	mute.Store(false)
	reserved(t, b, "alice", 20, 0)
}

// An instance that holds attempts of keys the store had no room for says
// since when. The others keep room for its share in entries new since
// then, and none in the others; it takes no one else as owing. Once it
// holds none, they no longer do.
func TestReservedWhileParking(t *testing.T) {
	ss := fleetOf(t, 2)
	a, b := ss[0], ss[1]
	before := time.Now()
	a.Parking(true)
	young := func() (int64, time.Time) {
		_, y, since := b.Reserved("alice", 20)
		return y, since
	}
	for i := 0; ; i++ {
		if y, _ := young(); y == a.Share("alice", 20) {
			break
		}
		if i == 1000 {
			y, _ := young()
			t.Fatalf("room in new entries of alice's: %d after 10 s, want %d", y, a.Share("alice", 20))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, since := young(); since.Before(before.Add(-time.Second)) || since.After(time.Now()) {
		t.Errorf("new since %v, want about %v", since, before)
	}
	if all := roomAll(b, "alice", 20); all != 0 {
		t.Errorf("room in every entry while a parks: %d, want 0", all)
	}
	if all, y, _ := a.Reserved("alice", 20); all != 0 || y != 0 {
		t.Errorf("a, parking, keeps room %d and %d in new entries, want 0 and 0", all, y)
	}
	a.Parking(false)
	for i := 0; ; i++ {
		if y, _ := young(); y == 0 {
			break
		}
		if i == 1000 {
			t.Fatal("room still kept in new entries 10 s after a stopped parking")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reserved waits until s keeps want of key's budget of limit for the
// other members, in every entry (see Store.Reserved).
func reserved(t *testing.T, s *store.Store, key string, limit, want int64) {
	t.Helper()
	for i := 0; roomAll(s, key, limit) != want; i++ {
		if i == 1000 {
			t.Fatalf("reserved of %q: %d after 10 s, want %d", key, roomAll(s, key, limit), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// roomAll is the room s keeps in every entry of key, of a budget of limit.
func roomAll(s *store.Store, key string, limit int64) int64 {
	all, _, _ := s.Reserved(key, limit)
	return all
}
