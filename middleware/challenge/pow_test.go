package challenge

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"
)

var powSecret = []byte("a proof-of-work secret of 32 bytes or more")

func newTestPoW(t testing.TB, o ProofOfWorkOptions) *ProofOfWork {
	t.Helper()
	p, err := NewProofOfWork(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestProofOfWorkVerify(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := newTestPoW(t, ProofOfWorkOptions{Secret: powSecret, Bits: 6, MaxBits: 9})
	p.now = func() time.Time { return now }
	alice := For{Account: "alice", Addr: "192.0.2.1"}
	is, err := p.Issue(ctx, alice)
	if err != nil || is.Scheme != ProofOfWorkScheme || is.Bits != 6 || len(is.Token) != puzzleToken {
		t.Fatalf("Issue = %+v, %v; want a pow token of %d bytes and 6 bits", is, err, puzzleToken)
	}
	answer, _, err := Solve(ctx, is.Token, is.Bits)
	if err != nil {
		t.Fatal(err)
	}
	// short is an answer to the puzzle with too few zero bits.
	short := ""
	for c := 0; short == ""; c++ {
		a := is.Token + "." + itoa(c)
		if leadingZeros(sha256.Sum256([]byte(a))) < is.Bits {
			short = a
		}
	}
	other := newTestPoW(t, ProofOfWorkOptions{Secret: []byte("another secret of at least 32 bytes!!"), Bits: 6})
	forged, _ := other.Issue(ctx, alice)
	forgedAnswer, _, _ := Solve(ctx, forged.Token, forged.Bits)
	for _, tc := range []struct {
		name   string
		answer string
		c      For
		at     time.Time
		ok     bool
	}{
		{"valid", answer, alice, now, true},
		{"valid until its last second", answer, alice, now.Add(defaultLifetime - time.Second), true},
		{"expired", answer, alice, now.Add(defaultLifetime), false},
		{"another account", answer, For{Account: "alicf", Addr: "192.0.2.1"}, now, false},
		{"another address", answer, For{Account: "alice", Addr: "192.0.2.2"}, now, false},
		{"account and address shifted", answer, For{Account: "alice1", Addr: "92.0.2.1"}, now, false},
		{"too few zero bits", short, alice, now, false},
		{"another key", forgedAnswer, alice, now, false},
		{"no counter", is.Token, alice, now, false},
		{"empty counter", is.Token + ".", alice, now, false},
		{"leading zero", is.Token + ".0" + answer[len(is.Token)+1:], alice, now, false},
		{"counter of 21 digits", is.Token + ".123456789012345678901", alice, now, false},
		{"counter over 64 bits", is.Token + ".99999999999999999999", alice, now, false},
		{"a sign", is.Token + ".+1", alice, now, false},
		{"token cut", answer[1:], alice, now, false},
		{"padded token", is.Token + "=" + answer[len(is.Token):], alice, now, false},
		{"empty", "", alice, now, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p.now = func() time.Time { return tc.at }
			defer func() { p.now = func() time.Time { return now } }()
			s, err := p.Verify(ctx, tc.answer, tc.c)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrAnswer)) {
				t.Fatalf("Verify = %+v, %v; want ok %v (or ErrAnswer)", s, err, tc.ok)
			}
			if tc.ok && (len(s.ID) != 2*puzzleNonce || !s.Expires.Equal(now.Add(defaultLifetime))) {
				t.Fatalf("Verify = %+v, want an ID of %d hex digits expiring at %v", s, 2*puzzleNonce, now.Add(defaultLifetime))
			}
		})
	}
}

func itoa(c int) string { b, _ := json.Marshal(c); return string(b) }

func TestProofOfWorkBits(t *testing.T) {
	p := newTestPoW(t, ProofOfWorkOptions{Bits: 5, MaxBits: 8})
	for failures, want := range map[int]int{-1: 5, 0: 5, 1: 6, 3: 8, 4: 8, 1000: 8} {
		if got := p.Bits(failures); got != want {
			t.Errorf("Bits(%d) = %d, want %d", failures, got, want)
		}
		is, _ := p.Issue(context.Background(), For{Account: "a", Addr: "b", Failures: failures})
		if is.Bits != want {
			t.Errorf("Issue with %d failures: %d bits, want %d", failures, is.Bits, want)
		}
	}
}

func TestNewProofOfWorkInvalid(t *testing.T) {
	for _, o := range []ProofOfWorkOptions{
		{Bits: -1},
		{Bits: 10, MaxBits: 9},
		{Bits: 10, MaxBits: MaxBits + 1},
		{Bits: MaxBits + 1},
		{Lifetime: time.Hour + time.Second},
		{Lifetime: 1500 * time.Millisecond},
		{Secret: []byte("short")},
	} {
		if _, err := NewProofOfWork(o); err == nil {
			t.Errorf("NewProofOfWork(%+v) = nil error", o)
		}
	}
}

// The Go solver and the served script find the same answer in as many
// hashes, over puzzles of one and two SHA-256 blocks.
func TestProofOfWorkScriptMatchesSolver(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the script is not run")
	}
	w := httptest.NewRecorder()
	newTestPoW(t, ProofOfWorkOptions{}).Script().ServeHTTP(w, httptest.NewRequest("GET", "/pow.js", nil))
	if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/javascript") {
		t.Fatalf("Content-Type %q", ct)
	}
	p := newTestPoW(t, ProofOfWorkOptions{Bits: 10})
	is, _ := p.Issue(context.Background(), For{Account: "alice", Addr: "192.0.2.1"})
	type run struct {
		Token string `json:"token"`
		Bits  int    `json:"bits"`
	}
	runs := []run{{"abc", 8}, {strings.Repeat("x", 46), 9}, {strings.Repeat("y", 54), 9}, {strings.Repeat("z", 119), 7}, {is.Token, is.Bits}}
	in, _ := json.Marshal(runs)
	script := w.Body.String() + "\nconsole.log(JSON.stringify(" + string(in) + ".map(r => gatecountSolve(r.token, r.bits))));\n"
	cmd := exec.Command(node, "-e", script)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	var got []struct {
		Answer string `json:"answer"`
		Hashes int    `json:"hashes"`
	}
	if err := json.Unmarshal(out, &got); err != nil || len(got) != len(runs) {
		t.Fatalf("node printed %q: %v", out, err)
	}
	for i, r := range runs {
		answer, hashes, err := Solve(context.Background(), r.Token, r.Bits)
		if err != nil || got[i].Answer != answer || got[i].Hashes != hashes {
			t.Errorf("puzzle %q of %d bits: script %+v, Go %q in %d hashes (%v)", r.Token, r.Bits, got[i], answer, hashes, err)
		}
	}
	if _, err := p.Verify(context.Background(), got[len(got)-1].Answer, For{Account: "alice", Addr: "192.0.2.1"}); err != nil {
		t.Errorf("the script's answer to an issued puzzle: %v", err)
	}
}

// FuzzVerifyAnswer feeds Verify untrusted answers: it never panics, and
// accepts only answers whose hash has the puzzle's zero bits.
func FuzzVerifyAnswer(f *testing.F) {
	p := newTestPoW(f, ProofOfWorkOptions{Secret: powSecret, Bits: 1, MaxBits: 1})
	c := For{Account: "alice", Addr: "192.0.2.1"}
	is, _ := p.Issue(context.Background(), c)
	answer, _, _ := Solve(context.Background(), is.Token, is.Bits)
	f.Add(answer)
	f.Add(is.Token + ".0")
	f.Add("")
	f.Add(".")
	f.Add(strings.Repeat("A", puzzleToken) + ".1")
	f.Fuzz(func(t *testing.T, a string) {
		s, err := p.Verify(context.Background(), a, c)
		if err != nil {
			if !errors.Is(err, ErrAnswer) {
				t.Fatalf("error %v does not match ErrAnswer", err)
			}
			return
		}
		if leadingZeros(sha256.Sum256([]byte(a))) < 1 || s.ID == "" {
			t.Fatalf("accepted %q as %+v", a, s)
		}
		readAnswerWire(t, a)
	})
}

// readAnswerWire checks that an accepted answer fits the header it travels
// in: printable ASCII.
func readAnswerWire(t *testing.T, a string) {
	for i := 0; i < len(a); i++ {
		if a[i] <= ' ' || a[i] >= 0x7f {
			t.Fatalf("accepted answer %q holds byte %#x", a, a[i])
		}
	}
}
