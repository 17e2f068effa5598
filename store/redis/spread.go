package redis

import (
	"fmt"
	"strconv"

	"github.com/gatecount/gatecount/store"
)

// shards is how many shards the keys of a spread handle fall into. Shard
// i's hash tag lies in the i-th of that many equal ranges of a Cluster's
// 16,384 slots, so a master serving a contiguous share of the slots (as
// redis-cli --cluster create gives each) serves the same share of the
// shards, within one shard: 86, 85 and 85 of them on three masters; 8 or
// 9 on thirty.
const shards = 256

// clusterSlots is how many hash slots a Redis Cluster has.
const clusterSlots = 16384

// Spread implements [store.Spreader]. On a Redis Cluster, each key under
// prefix then lives in a shard chosen by its own HMAC, one of [shards],
// whose hash tags spread over every slot range. On a single server the keys
// stay under one tag: Spread returns 1 and changes nothing.
func (b *Backend) Spread(prefix string) int {
	if !b.cluster {
		return 1
	}
	home := b.space(prefix)
	if home.shards != nil {
		return shards
	}
	sp := &space{tag: home.tag, keyPrefix: home.keyPrefix, index: home.index, live: home.live}
	sp.shards = make([]*space, shards)
	for i, tag := range shardTags(home.tag) {
		sp.shards[i] = &space{tag: tag, keyPrefix: b.prefixOf(tag), index: b.indexOf(tag), live: b.liveOf(tag)}
	}
	b.spaces.Store(prefix, sp)
	return shards
}

// Part implements [store.Spreader]: the shard of keys under prefix, from
// the HMAC that names each key.
func (b *Backend) Part(prefix string, keys []string) (int, bool) {
	part := -1
	for _, k := range keys {
		sum := b.hasher.Sum(prefix, k)
		switch s := shardOf(&sum); {
		case part < 0:
			part = s
		case s != part:
			return 0, false
		}
	}
	return part, true
}

// shardOf returns the shard of the key whose HMAC is sum: its last byte,
// which no other use of the HMAC reads.
func shardOf(sum *[32]byte) int { return int(sum[31]) % shards }

// errShards is the error of a call naming keys of two shards.
var errShards = fmt.Errorf("%w: keys of several shards of a spread handle in one call", store.ErrInvalidKey)

// shardTags returns the hash tags of the shards of tag: shard i's is tag, a
// hyphen and the first hexadecimal number that puts it in the i-th range of
// clusterSlots/shards slots.
func shardTags(tag string) []string {
	out := make([]string, shards)
	left := shards
	base := crc16(0, tag+"-")
	var buf [16]byte
	for n := uint64(0); left > 0; n++ {
		suffix := strconv.AppendUint(buf[:0], n, 16)
		i := int(crc16(base, string(suffix))%clusterSlots) / (clusterSlots / shards)
		if out[i] == "" {
			out[i] = tag + "-" + string(suffix)
			left--
		}
	}
	return out
}

// validTag reports whether tag is a handle's tag (sixteen hexadecimal
// digits) or one of its shards' (those, a hyphen and a suffix).
func validTag(tag string) bool {
	return len(tag) == 16 || len(tag) > 17 && tag[16] == '-'
}

// crc16 continues the CRC16 (XMODEM) of Redis Cluster's key slots from crc
// over s. A hash tag's slot is crc16(0, tag) % clusterSlots.
func crc16(crc uint16, s string) uint16 {
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^s[i]]
	}
	return crc
}

// crcTable is the table of CRC16 (XMODEM), polynomial 0x1021.
var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
