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
	sp := &space{tag: tag, keyPrefix: b.prefixOf(tag), index: b.indexOf(tag), live: b.liveOf(tag)}
	v, _ := b.spaces.LoadOrStore(prefix, sp)
	return v.(*space)
}

// prefixOf is the start of the Redis key of every entry under tag.
func (b *Backend) prefixOf(tag string) string { return keyPrefix(tag, b.fp) }

// keyPrefix is the start of the Redis key of every entry under tag and
// the secret's fingerprint fp.
func keyPrefix(tag, fp string) string { return "gatecount:{" + tag + "}:" + fp + ":" }

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
	names []string      // the Redis keys, then the live index's
	slots []int         // the keys' slots in the known-live cache
	tags  []uint64      // the keys' tags in those slots
	locks lockorder.Set // the keys' stripes

	names1 [1 + indexKeys]string
	slots1 [1]int
	tags1  [1]uint64
}

// keys names keys under sp (see nameKeys).
func (b *Backend) keys(sp *space, prefix string, keys []string) (*keySet, error) {
	ks := new(keySet)
	_, err := b.nameKeys(ks, sp, prefix, keys)
	return ks, err
}

// nameKeys fills ks with the names of keys under sp, and returns the space
// they lie in: sp, or the shard of the first key when sp is spread. Keys of
// several shards are refused (errShards).
func (b *Backend) nameKeys(ks *keySet, sp *space, prefix string, keys []string) (*space, error) {
	n := len(keys)
	if n == 1 {
		ks.names, ks.slots, ks.tags = ks.names1[:], ks.slots1[:], ks.tags1[:]
	} else {
		ks.names = make([]string, n+indexKeys)
		ks.slots = make([]int, n)
		ks.tags = make([]uint64, n)
	}
	var buf [128]byte
	for i, k := range keys {
		sum := b.hasher.Sum(prefix, k)
		if sp.shards != nil {
			switch s := sp.shards[shardOf(&sum)]; {
			case i == 0:
				sp = s
			case s != sp:
				return nil, errShards
			}
		}
		name := append(buf[:0], sp.keyPrefix...)
		name = hex.AppendEncode(name, sum[:])
		ks.names[i] = string(name)
		x := int(binary.BigEndian.Uint16(sum[:2]))
		ks.slots[i] = x % knownSlots // its stripe is turns.Queue(x): the same lock guards it
		ks.tags[i] = binary.BigEndian.Uint64(sum[2:10]) | 1
		ks.locks.Add(turns.Queue(uint64(x)))
	}
	copy(ks.names[n:], sp.index[:indexKeys])
	return sp, nil
}

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
