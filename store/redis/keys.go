package redis

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"sync/atomic"

	"github.com/gatecount/gatecount/internal/lockorder"
	"github.com/gatecount/gatecount/internal/turns"
)

func (b *Backend) space(prefix string) *space {
	if sp, ok := b.spaces.Load(prefix); ok {
		return sp.(*space)
	}
	sum := b.hasher.Sum(prefix, "") // keys are never empty: no key shares it
	tag := hex.EncodeToString(sum[:8])
	sp := &space{tag: tag, keyPrefix: b.prefixOf(tag), idx: b.indexOf(tag), live: b.liveOf(tag)}
	v, _ := b.spaces.LoadOrStore(prefix, sp)
	return v.(*space)
}

// prefixOf is the start of the Redis key of every entry under tag.
func (b *Backend) prefixOf(tag string) string { return "gatecount:{" + tag + "}:" + b.fp + ":" }

// indexOf is the name of tag's index of live entries.
func (b *Backend) indexOf(tag string) string { return b.prefixOf(tag) + "live" }

// liveOf returns the counter of a tag's live entries.
func (b *Backend) liveOf(tag string) *atomic.Int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.live[tag]
	if n == nil {
		n = new(atomic.Int64)
		b.live[tag] = n
	}
	return n
}

// setLive records that a tag has n live entries.
func (b *Backend) setLive(n *atomic.Int64, v int64) {
	if v < 0 {
		return
	}
	b.total.Add(v - n.Swap(v))
}

// elsewhere returns the live entries under the tags other than sp's.
func (b *Backend) elsewhere(sp *space) int64 {
	return max(b.total.Load()-sp.live.Load(), 0)
}

// keySet is what one call needs of its keys. The arrays hold a lone key,
// the common case, without allocating more.
type keySet struct {
	names   []string      // the Redis keys, then the live index
	members []string      // the keys' members in the live index
	slots   []int         // the keys' slots in the known-live cache
	tags    []uint64      // the keys' tags in those slots
	locks   lockorder.Set // the keys' stripes

	names1   [2]string
	members1 [1]string
	slots1   [1]int
	tags1    [1]uint64
}

// keys names keys under sp.
func (b *Backend) keys(sp *space, prefix string, keys []string) *keySet {
	ks := new(keySet)
	b.nameKeys(ks, sp, prefix, keys)
	return ks
}

// nameKeys fills ks with the names of keys under sp.
func (b *Backend) nameKeys(ks *keySet, sp *space, prefix string, keys []string) {
	n := len(keys)
	if n == 1 {
		ks.names, ks.members, ks.slots, ks.tags = ks.names1[:], ks.members1[:], ks.slots1[:], ks.tags1[:]
	} else {
		ks.names = make([]string, n+1)
		ks.members = make([]string, n)
		ks.slots = make([]int, n)
		ks.tags = make([]uint64, n)
	}
	kp := sp.keyPrefix
	var buf [128]byte
	for i, k := range keys {
		sum := b.hasher.Sum(prefix, k)
		name := append(buf[:0], kp...)
		name = hex.AppendEncode(name, sum[:])
		name = append(name, sum[len(sum)-memberLen:]...)
		both := string(name) // one allocation for the name and the member
		ks.names[i] = both[:len(both)-memberLen]
		ks.members[i] = both[len(both)-memberLen:]
		x := int(binary.BigEndian.Uint16(sum[:2]))
		ks.slots[i] = x % knownSlots // its stripe is turns.Queue(x): the same lock guards it
		ks.tags[i] = binary.BigEndian.Uint64(sum[2:10]) | 1
		ks.locks.Add(turns.Queue(uint64(x)))
	}
	ks.names[n] = sp.idx
}

// memberLen is the length of an entry's member in its live index: the last
// eight bytes of the entry's HMAC, raw. The index costs memory per entry;
// eight raw bytes instead of the name's 64 hex digits save 64 bytes of it
// (see TestMemoryPerEntry). Two entries of one handle share a member with a
// chance of about n²/2⁶⁵ for n entries, which would only make the bound
// count one entry fewer.
const memberLen = 8

// knownSlots is the size of the cache of keys known to be live, a multiple
// of the number of stripes (turns.Queues) Update spreads keys over.
const knownSlots = 8 * turns.Queues

// knownLive is a slot of the cache of keys this process saw live, which
// tells Update when it is worth guessing that its keys are absent. A slot
// is guarded by the stripe lock of the keys that map to it.
type knownLive struct {
	tag uint64 // 0: empty
	exp int64  // Unix ms
}

// register lists sp's tag under the fingerprint, once.
func (b *Backend) register(ctx context.Context, sp *space) {
	if sp.registered.Load() {
		return
	}
	if b.c.SAdd(ctx, b.tags, sp.tag).Err() == nil {
		sp.registered.Store(true)
	}
}

// noneKnown reports whether no key of ks is known here to be live at est.
func (b *Backend) noneKnown(ks *keySet, est int64) bool {
	for i, s := range ks.slots {
		if k := b.known[s]; k.tag == ks.tags[i] && k.exp > est {
			return false
		}
	}
	return true
}

// know records that key i of ks is live until exp, or not live (exp 0).
// The caller holds the key's stripe.
func (b *Backend) know(ks *keySet, i int, exp int64) {
	k := &b.known[ks.slots[i]]
	switch {
	case exp > 0:
		*k = knownLive{ks.tags[i], exp}
	case k.tag == ks.tags[i]:
		*k = knownLive{}
	}
}
