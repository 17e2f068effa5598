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
