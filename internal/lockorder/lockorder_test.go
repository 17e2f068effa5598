package lockorder_test

import (
	"slices"
	"testing"

	"github.com/gatecount/gatecount/internal/lockorder"
	"github.com/gatecount/gatecount/store"
)

func TestHoldsEveryKeyOfACall(t *testing.T) {
	if lockorder.MaxLocks < store.MaxKeys {
		t.Fatalf("MaxLocks = %d, below store.MaxKeys = %d", lockorder.MaxLocks, store.MaxKeys)
	}
	var s lockorder.Set
	for i := range store.MaxKeys {
		s.Add(1000 - i)
	}
	if got := len(s.Ascending()); got != store.MaxKeys {
		t.Fatalf("holds %d indexes, want %d", got, store.MaxKeys)
	}
}

func TestAscendingDistinct(t *testing.T) {
	for _, tc := range []struct {
		add  []int
		want []int
	}{
		{nil, []int{}},
		{[]int{3}, []int{3}},
		{[]int{5, 1, 3}, []int{1, 3, 5}},
		{[]int{2, 2, 1, 2, 1}, []int{1, 2}},
	} {
		var s lockorder.Set
		for _, i := range tc.add {
			s.Add(i)
		}
		if got := s.Ascending(); !slices.Equal(got, tc.want) {
			t.Errorf("Add(%v) then Ascending() = %v, want %v", tc.add, got, tc.want)
		}
	}
}
