package store

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gatecount/gatecount/internal/loop"
	"github.com/gatecount/gatecount/internal/overload"
)

// defaultAnnounce is the default of Options.Announce: how often an instance
// announces itself in a shared store.
const defaultAnnounce = time.Second

// memberLife is how many announce intervals a member outlives its last
// announcement: a member that stopped is counted that long, which only
// makes every other instance's share smaller.
const memberLife = 30

// quietAfter is how many announce intervals a member may go unheard before
// the others take it as owing the store (see Store.Reserved).
const quietAfter = 2

// aloneGrace is how many announce intervals pass before an instance counts
// alone. They are counted from its last announcement, or from the first
// that said it may count alone. By then every other instance takes it as
// owing, or has seen it say so, and keeps room for its share. Taking it as
// owing needs quietAfter intervals, then the next announcement that reads
// it, then one interval of margin.
const aloneGrace = quietAfter + 3

// staleAfter is how many announce intervals may pass since this instance
// last read the fleet's entry before it no longer trusts what it read of
// who owes the store. A member that went quiet just after that read may
// count alone aloneGrace intervals later. A read quietAfter intervals
// after its last announcement would have shown it as owing. So a read
// older than aloneGrace-quietAfter intervals may have missed it; one
// interval is kept as margin for the clocks.
const staleAfter = aloneGrace - quietAfter - 1

// The fleet's entry: one key, under a prefix no handle can have. A handle's
// prefix ends in no particular way, but "gatecount.fleet\x00" holds a byte
// no limiter name or prefix of this module uses.
const (
	fleetPrefix = "gatecount.fleet\x00"
	fleetKey    = "members"
)

// fleet is how a Store over a shared backend learns how many instances
// share it. Each instance announces itself in one entry, and keeps what it
// last read there. The entry is a JSON object of member IDs and the Unix
// milliseconds each is counted until. The time is negative while the member
// owes the store attempts it admitted alone. While a member holds attempts
// of keys the store had no room for, its ID with parkedSuffix maps to the
// store's time (Unix milliseconds) from which it may have admitted them.
type fleet struct {
	id    string // this instance's member ID: 8 bytes of its InstanceID, in hex
	every time.Duration
	lane  lane
	loop  *loop.Loop
	kick  chan struct{} // an announcement now, when owing starts
	// owing counts this instance's limiters that hold attempts admitted
	// alone that the store has not taken.
	owing atomic.Int64
	// owed holds the ranks of the other members that owe the store, at the
	// last announcement.
	owed atomic.Pointer[[]int]
	// parking counts this instance's limiters that hold attempts of keys
	// the store had no room for, and parkedAt is when the first of them
	// began (Unix nanoseconds).
	parking, parkedAt atomic.Int64
	// parked is what the last announcement read of the other members that
	// hold such attempts.
	parked atomic.Pointer[parkedView]
	// assume is set while this instance owes the store. It stays set until
	// an announcement made once it owes nothing has told who else does. An
	// overload that made it count alone likely made the others do so too,
	// so until then it takes every other member as owing.
	assume atomic.Bool
	// okAt is when the last announcement that succeeded returned (Unix
	// nanoseconds). markedAt is when the first of an unbroken run of them
	// that said this instance may count alone returned; it is 0 when the
	// last said not. wantUntil is until when this instance says it may (see
	// WantAlone).
	okAt, markedAt, wantUntil atomic.Int64
	// readAt is when the last announcement that succeeded began (Unix
	// nanoseconds): the entry that owed holds was read no earlier.
	readAt atomic.Int64
	// joinedAt is when Join began the announcements (Unix nanoseconds):
	// an instance that has reached no store yet is not taken as out of
	// reach before the grace has passed since.
	joinedAt atomic.Int64
	// firstAt is when the first announcement that succeeded began (Unix
	// nanoseconds), 0 before it. settled is set once another succeeded
	// that began at least half an interval later: by then the entry has
	// been read after every instance running at the first had announced
	// itself again. Until then this instance may count too few members,
	// and claims no share (see Members).
	firstAt atomic.Int64
	settled atomic.Bool
	// seen packs the members counted at the last announcement (high 32
	// bits) and this instance's rank among them by ID (low 32 bits). It is
	// 0 until an announcement succeeds. The rank is 1<<32-1 when the entry
	// had no room for this instance.
	seen atomic.Uint64
}

// noRank is the rank of an instance the fleet's entry had no room for.
const noRank = 1<<32 - 1

// parkedSuffix ends the name, in the fleet's entry, of a member's time
// from which it holds attempts of keys the store had no room for.
const parkedSuffix = "/parked"

// parkedView is what an announcement read of the members that hold
// attempts of keys the store had no room for: their ranks, and the
// earliest store time (Unix milliseconds) from which one may have
// admitted them.
type parkedView struct {
	ranks []int
	since int64
}

// Join starts announcing this instance in a shared store, so that it can
// tell its share of a budget (see [Store.Share]). A limiter that may count
// without the store calls it when it is made. The first announcement is
// made at once, in the background, and then one every Options.Announce
// until the store is closed. Join does nothing on a store no other instance
// sees, or when called again.
func (s *Store) Join() {
	if s.inline != nil || !s.b.Shared() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fleet.loop != nil || s.closed.Load() {
		return
	}
	f := &s.fleet
	f.id = hex.EncodeToString(s.opts.InstanceID[:8])
	f.every = s.opts.Announce
	f.lane.breaker.init(BreakerOptions{Failures: -1}, s.now, s.opts.Logger, fleetPrefix)
	f.kick = make(chan struct{}, 1)
	f.joinedAt.Store(time.Now().UnixNano())
	f.loop = loop.Go(context.Background(), func(ctx context.Context) {
		t := time.NewTicker(f.every)
		defer t.Stop()
		for {
			s.announce(overload.Patient(ctx), false)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-f.kick:
			}
		}
	})
}

// stopFleet stops the announcements and takes this instance out of the
// fleet's entry, so that the others' shares grow back at once.
func (s *Store) stopFleet() {
	s.mu.Lock()
	loop := s.fleet.loop
	s.mu.Unlock()
	if loop == nil {
		return
	}
	loop.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Deadline)
	defer cancel()
	s.announce(ctx, true)
}

// announce writes this instance into the fleet's entry, or takes it out
// when leaving, and keeps the members it counted there.
func (s *Store) announce(ctx context.Context, leaving bool) {
	f := &s.fleet
	var members, rank int
	var owed []int
	var parked parkedView
	owing := f.owing.Load() > 0
	began := time.Now().UnixNano()
	marked := owing || began < f.wantUntil.Load()
	err := s.call(ctx, &f.lane, &f.lane.breaker, func(ctx context.Context) error {
		return s.b.Update(ctx, fleetPrefix, []string{fleetKey}, func(now time.Time, es []Entry) error {
			since := int64(0) // the store's time from which this instance parks, earlier never later
			if at := f.parkedAt.Load(); f.parking.Load() > 0 && at != 0 {
				since = now.Add(-time.Duration(time.Now().UnixNano() - at)).UnixMilli()
			}
			members, rank, owed, parked = f.rewrite(now, &es[0], leaving, marked, since)
			return nil
		})
	})
	if err != nil || leaving {
		return
	}
	at := time.Now().UnixNano()
	f.okAt.Store(at)
	f.readAt.Store(began)
	switch {
	case !marked:
		f.markedAt.Store(0)
	case f.markedAt.Load() == 0:
		f.markedAt.Store(at)
	}
	f.seen.Store(uint64(members)<<32 | uint64(uint32(rank)))
	f.owed.Store(&owed)
	f.parked.Store(&parked)
	if first := f.firstAt.Load(); first == 0 {
		f.firstAt.Store(began)
	} else if began-first >= int64(f.every/2) {
		f.settled.Store(true)
	}
	if !owing && f.owing.Load() == 0 {
		f.assume.Store(false)
	}
}

// rewrite updates the fleet's entry e. Members past their time go. This
// instance is counted until memberLife intervals from now (or taken out,
// when leaving), and marked as owing the store when marked. When since is
// not 0, it is written as the store's time from which this instance holds
// attempts of keys the store had no room for. It returns the members
// counted, this instance's rank among them (noRank when the entry had no
// room for it), the ranks of the others that owe the store, and those of
// the others that hold such attempts.
func (f *fleet) rewrite(now time.Time, e *Entry, leaving, marked bool, since int64) (members, rank int, owed []int, parked parkedView) {
	m := map[string]int64{}
	if e.Live() && json.Unmarshal(e.Value, &m) != nil {
		m = map[string]int64{} // not ours: written again
	}
	parks := splitParked(m)
	nowMs := now.UnixMilli()
	for id, until := range m {
		if abs(until) <= nowMs {
			delete(m, id)
		}
	}
	delete(m, f.id)
	delete(parks, f.id)
	until := now.Add(memberLife * f.every).UnixMilli()
	if marked {
		until = -until
	}
	if !leaving {
		m[f.id] = until
		if since != 0 {
			parks[f.id] = since
		}
	}
	for id := range parks { // a member's parked time goes with it
		if _, live := m[id]; !live {
			delete(parks, id)
		}
	}
	v := encodeFleet(m, parks)
	rank = noRank
	if len(v) > MaxValueSize { // no room: counted as a member all the same, with no share
		delete(m, f.id)
		delete(parks, f.id)
		v = encodeFleet(m, parks)
		members = len(m) + 1
	} else {
		ids := make([]string, 0, len(m))
		for id := range m {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		rank, members = slices.Index(ids, f.id), len(ids)
		if rank < 0 {
			rank = noRank
		}
		// A member that has not announced itself for quietAfter
		// intervals may owe the store without having been able to say
		// so (its announcements failing with the store): it is taken as
		// owing.
		quiet := nowMs + (memberLife-quietAfter)*f.every.Milliseconds()
		for r, id := range ids {
			if id != f.id && (m[id] < 0 || abs(m[id]) < quiet) {
				owed = append(owed, r)
			}
			if at, ok := parks[id]; ok && id != f.id {
				if len(parked.ranks) == 0 || at < parked.since {
					parked.since = at
				}
				parked.ranks = append(parked.ranks, r)
			}
		}
	}
	latest := int64(0)
	for _, t := range m {
		latest = max(latest, abs(t))
	}
	e.Value = nil
	if latest > nowMs {
		e.Value, e.ExpiresAt = v, time.UnixMilli(latest)
	}
	return members, rank, owed, parked
}

// splitParked takes the members' parked times out of m, the fleet's entry,
// and returns them by member ID.
func splitParked(m map[string]int64) map[string]int64 {
	parks := map[string]int64{}
	for id, at := range m {
		if member, ok := strings.CutSuffix(id, parkedSuffix); ok {
			parks[member] = at
			delete(m, id)
		}
	}
	return parks
}

// encodeFleet is the fleet's entry of the members m and their parked
// times, parks.
func encodeFleet(m, parks map[string]int64) []byte {
	all := maps.Clone(m)
	for id, at := range parks {
		all[id+parkedSuffix] = at
	}
	v, _ := json.Marshal(all)
	return v
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// Owing records that a limiter of this instance holds attempts it admitted
// alone that the store has not taken (true), or no longer does (false).
// While any does, the instance announces it at once and then at every
// announcement. The other instances keep room in every key for the share it
// may have admitted (see [Store.Reserved]). Calls must pair up.
func (s *Store) Owing(owes bool) {
	f := &s.fleet
	if !owes {
		f.owing.Add(-1)
		return
	}
	if f.owing.Add(1) == 1 {
		f.assume.Store(true)
	}
	if f.owing.Load() == 1 {
		f.announceNow()
	}
}

// announceNow makes the next announcement at once, on a store that has
// joined its fleet.
func (f *fleet) announceNow() {
	if f.kick == nil {
		return
	}
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// WantAlone records that this instance is about to count alone. Its
// announcements say so for the next two intervals, starting with one made
// at once. The others then keep room for its share (see
// [Store.AloneAfter]).
func (s *Store) WantAlone() {
	f := &s.fleet
	now := time.Now()
	if f.wantUntil.Swap(now.Add(quietAfter*s.opts.Announce).UnixNano()) <= now.UnixNano() {
		f.announceNow()
	}
}

// AloneAfter returns how long this instance must wait before it counts
// alone. It waits until every other instance keeps room for its share. An
// instance does once it takes this one as quiet since its last
// announcement, or reads that it may count alone. It is 0 on a store no
// other instance sees, and once those have passed. The others then keep
// that room for as long as it says it may, or stays quiet.
func (s *Store) AloneAfter() time.Duration {
	if s.inline != nil || !s.b.Shared() {
		return 0
	}
	f := &s.fleet
	grace := int64(aloneGrace * s.opts.Announce)
	at := max(f.okAt.Load(), f.joinedAt.Load()) + grace
	if m := f.markedAt.Load(); m != 0 {
		at = min(at, m+grace)
	}
	return max(time.Duration(at-time.Now().UnixNano()), 0)
}

// Reserved returns how many of a key's budget of limit the other instances
// may have admitted alone, which the store does not count yet. Counting in
// the store, an instance keeps that room free, so that what they admitted
// alone, once added, still fits. Each instance's part is its share of the
// whole budget (see [Store.Share]).
//
// all is the room to keep in the key whatever its entry: the shares of the
// instances that owe the store. An instance not heard from for two
// announce intervals is taken as owing, since it may not have been able to
// say so. While this instance owes the store, and until it has heard since
// who else does, it takes every other instance as owing. So it does while
// its own announcements fail: what it last read of the others may be too
// old to show one that has gone quiet.
//
// young is the room to keep more when the key's entry is new: none, or one
// whose window began at since (the store's clock) or later. It is the
// shares of the instances that hold attempts of keys the store had no room
// for (see [Store.Parking]), which an entry made before they began cannot
// be.
func (s *Store) Reserved(key string, limit int64) (all, young int64, since time.Time) {
	f := &s.fleet
	seen := f.seen.Load()
	n, rank := int64(seen>>32), int64(uint32(seen))
	if n <= 1 || limit <= 0 {
		return 0, 0, time.Time{}
	}
	owed, parked := f.owed.Load(), f.parked.Load()
	everyone := f.assume.Load() || time.Now().UnixNano()-f.readAt.Load() > int64(staleAfter*f.every)
	h := int64(fnv64(key) % uint64(n))
	share := func(r int64) int64 {
		if (r+h)%n < limit%n {
			return limit/n + 1
		}
		return limit / n
	}
	if everyone {
		for r := range n {
			if r != rank {
				all += share(r)
			}
		}
		return all, 0, time.Time{}
	}
	if owed != nil {
		for _, r := range *owed {
			all += share(int64(r))
		}
	}
	if parked != nil && len(parked.ranks) > 0 {
		for _, r := range parked.ranks {
			if owed == nil || !slices.Contains(*owed, r) {
				young += share(int64(r))
			}
		}
		since = time.UnixMilli(parked.since)
	}
	return all, young, since
}

// Parking records that a limiter of this instance holds attempts it
// admitted alone of keys the store had no room for (true), or no longer
// does (false). No other instance counts such a key in the store until it
// has room, and then in a new entry. While any limiter parks, the
// announcements say since when, and the others keep room for this
// instance's share in entries made since (see [Store.Reserved]). Calls
// must pair up.
func (s *Store) Parking(parks bool) {
	f := &s.fleet
	s.mu.Lock() // parking and parkedAt change together
	defer s.mu.Unlock()
	if !parks {
		if f.parking.Add(-1) == 0 {
			f.parkedAt.Store(0)
		}
		return
	}
	if f.parking.Load() == 0 {
		f.parkedAt.Store(time.Now().UnixNano())
	}
	if f.parking.Add(1) == 1 {
		f.announceNow()
	}
}

// Members returns how many instances share the store, as this instance last
// counted them. It is 1 for a store no other instance sees. It is 0 for a
// shared store this instance has not joined, and until it has counted the
// members twice, half an announce interval apart or more: a first count
// may miss instances that started with it.
func (s *Store) Members() int {
	if s.inline != nil || !s.b.Shared() {
		return 1
	}
	if !s.fleet.settled.Load() {
		return 0
	}
	return int(s.fleet.seen.Load() >> 32)
}

// Share returns how many of left, what remains of a key's budget, this
// instance may admit while it counts the key without the store. The shares
// of all the instances sharing the store sum to left. Each gets left
// divided by their number. The remainder goes one each to the first
// instances in an order that turns with the key, so that a small budget
// still admits something (5 shared by 3 is 2, 2 and 1). An instance that
// has not counted the members twice (see Members), or had no room in its
// fleet entry, gets 0: it cannot account for what it would admit. A store
// no other instance sees gives left whole.
func (s *Store) Share(key string, left int64) int64 {
	if left <= 0 {
		return 0
	}
	if s.inline != nil || !s.b.Shared() {
		return left
	}
	seen := s.fleet.seen.Load()
	n, rank := int64(seen>>32), int64(uint32(seen))
	if n == 0 || rank == noRank || !s.fleet.settled.Load() {
		return 0
	}
	turn := (rank + int64(fnv64(key)%uint64(n))) % n
	share := left / n
	if turn < left%n {
		share++
	}
	return share
}

// fnv64 is the 64-bit FNV-1a hash of s: the same on every instance, so that
// all agree on whose turn a key's remainder is.
func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
