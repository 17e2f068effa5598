package keyhash

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestSum(t *testing.T) {
	secret := []byte(strings.Repeat("s", MinSecretLen))
	h, err := New(secret)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := New([]byte(strings.Repeat("t", MinSecretLen)))
	a, b := h.Sum("ab", "c"), h.Sum("a", "bc")
	if a == b {
		t.Error("(ab, c) and (a, bc) share a name")
	}
	if first, again := h.Sum("p", "k"), h.Sum("p", "k"); first != again {
		t.Error("Sum is not deterministic")
	}
	if s := h.Sum("p", "alice@example.com"); bytes.Contains(s[:], []byte("alice")) {
		t.Error("key in clear")
	}
	if h.Sum("p", "k") == other.Sum("p", "k") {
		t.Error("two secrets give one name")
	}
	if h.Fingerprint() == other.Fingerprint() || len(h.Fingerprint()) != 16 {
		t.Errorf("fingerprints %q and %q", h.Fingerprint(), other.Fingerprint())
	}
	if strings.Contains(h.Fingerprint(), "ssss") {
		t.Error("fingerprint shows the secret")
	}
}

func TestWeakSecret(t *testing.T) {
	if _, err := New([]byte("short")); !errors.Is(err, ErrWeakSecret) {
		t.Fatalf("got %v, want ErrWeakSecret", err)
	}
}

// Sum allocates nothing once its pool is warm, and a long key after a short
// one (or the reverse) is named as if it came first.
func TestSumAllocs(t *testing.T) {
	h, err := New([]byte(strings.Repeat("s", MinSecretLen)))
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("k", 512)
	want := h.Sum("p", long)
	h.Sum("p", "short")
	if got := h.Sum("p", long); got != want {
		t.Error("a long key after a short one is named differently")
	}
	// The pool's own churn aside (the race detector makes it drop what it
	// is given), a summer allocates nothing.
	s := h.pool.Get().(*summer)
	if got := s.sum("p", long); got != want {
		t.Error("a summer names a key unlike Sum")
	}
	if n := testing.AllocsPerRun(100, func() { s.sum("prefix:", "alice@example.com") }); n != 0 {
		t.Errorf("a summer allocates %v times per call, want 0", n)
	}
}
