package limiter

import (
	"fmt"
	"testing"
	"time"
)

func TestForgottenTable(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	var f forgotten
	if f.has("alice", now) {
		t.Fatal("an empty table holds alice")
	}
	f.add("alice", now.Add(90*time.Second))
	f.add("alice", now.Add(30*time.Second)) // an earlier window never shortens a later one
	tests := []struct {
		key  string
		at   time.Duration
		want bool
	}{
		{"alice", 0, true},
		{"alice", 89 * time.Second, true},
		{"alice", 90 * time.Second, false},
	}
	for _, tt := range tests {
		if got := f.has(tt.key, now.Add(tt.at)); got != tt.want {
			t.Errorf("has(%q) at +%v = %v, want %v", tt.key, tt.at, got, tt.want)
		}
	}
	free := 0
	for i := range 100 {
		if !f.has(fmt.Sprint("new-", i), now) {
			free++
		}
	}
	if free < 95 { // one key forgotten in 1,024 slots
		t.Errorf("%d of 100 keys never forgotten were taken as forgotten", 100-free)
	}
}

func TestSlotsFor(t *testing.T) {
	for _, tt := range []struct{ n, want int }{{0, 1024}, {512, 1024}, {513, 2048}, {3000, 8192}} {
		if got := slotsFor(tt.n); got != tt.want {
			t.Errorf("slotsFor(%d) = %d, want %d", tt.n, got, tt.want)
		}
	}
}
