package lockorder

import (
	"slices"
	"testing"
)

func TestSet(t *testing.T) {
	var s Set
	for _, i := range []int{5, 1, 9, 1, 5, 0, 9} {
		s.Add(i)
	}
	if got := s.Ascending(); !slices.Equal(got, []int{0, 1, 5, 9}) {
		t.Fatalf("got %v", got)
	}
	var empty Set
	if len(empty.Ascending()) != 0 {
		t.Fatal("zero Set is not empty")
	}
}
