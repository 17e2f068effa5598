package redis

import "testing"

// crc16 is Redis Cluster's: the slot of "123456789" is 12739 (0x31C3, the
// CRC16 XMODEM check value), and a shard's tag lies in its range of slots.
func TestShardTags(t *testing.T) {
	if got := crc16(0, "123456789"); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	for _, tag := range []string{"0123456789abcdef", "ffffffffffffffff", "a5a5a5a5a5a5a5a5"} {
		tags := shardTags(tag)
		if len(tags) != shards {
			t.Fatalf("%d shard tags, want %d", len(tags), shards)
		}
		for i, st := range tags {
			slot := int(crc16(0, st)) % clusterSlots
			if lo := i * clusterSlots / shards; slot < lo || slot >= lo+clusterSlots/shards || !validTag(st) {
				t.Errorf("shard %d of %s: tag %s in slot %d, want a valid tag in [%d, %d)", i, tag, st, slot, lo, lo+clusterSlots/shards)
			}
		}
	}
}
