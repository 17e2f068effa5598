// Package lockorder keeps the locks one call needs (shards, stripes) in the
// one order every call takes them: distinct and ascending. Calls that share
// locks then never wait for each other in a cycle.
package lockorder

// MaxLocks is how many indexes a Set holds: one per key of a call, so at
// least store.MaxKeys (a test checks it).
const MaxLocks = 16

// Set is the distinct lock indexes of one call, ascending. Its zero value is
// empty; it holds at most MaxLocks indexes.
type Set struct {
	ord [MaxLocks]int
	n   int
}

// Add puts i in the set, in order, unless it is there already.
func (s *Set) Add(i int) {
	j := s.n
	for j > 0 && s.ord[j-1] > i {
		j--
	}
	if j > 0 && s.ord[j-1] == i {
		return
	}
	copy(s.ord[j+1:s.n+1], s.ord[j:s.n])
	s.ord[j] = i
	s.n++
}

// Ascending returns the indexes in the order to lock them; unlock in the
// reverse order.
func (s *Set) Ascending() []int { return s.ord[:s.n] }
