package middleware

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
)

// With the secret, 100,000 candidate passwords fall in buckets as a
// random 16-bit function spreads them: each bucket, the finest thing a
// stolen store and secret tell, is matched by about 100,000/65,536 of the
// candidates, and a candidate shares its bucket with as many others.
func TestSprayBucketCollisions(t *testing.T) {
	s, err := newSprayer(SprayOptions{}, "username", []byte(strings.Repeat("s", 32)))
	if err != nil {
		t.Fatal(err)
	}
	const n = 100000
	lambda := float64(n) / PasswordBuckets
	counts := make(map[uint16]int, PasswordBuckets)
	for i := range n {
		counts[s.bucket(fmt.Sprintf("candidate-%d", i))]++
	}
	// Buckets matched by at least one candidate: 65,536 × (1 − e^−λ).
	if want := PasswordBuckets * (1 - math.Exp(-lambda)); math.Abs(float64(len(counts))-want) > 0.01*want {
		t.Errorf("%d buckets matched, want about %.0f", len(counts), want)
	}
	most, shared := 0, 0
	for _, c := range counts {
		most = max(most, c)
		shared += c * c
	}
	// A candidate's bucket holds it and, on average, λ others.
	if mean, want := float64(shared)/n, 1+lambda; math.Abs(mean-want) > 0.05*want {
		t.Errorf("a candidate shares its bucket with %.2f candidates, itself included; want about %.2f", mean, want)
	}
	if most > 16 {
		t.Errorf("a bucket matched %d candidates: not spread as 16 random bits", most)
	}
	t.Logf("%d candidates: %d buckets matched, at most %d candidates a bucket, %.2f a candidate's", n, len(counts), most, float64(shared)/n)
}

// recorder is a store backend that records every key it is given.
type recorder struct {
	store.Backend
	mu   sync.Mutex
	keys map[string]bool
}

func (r *recorder) record(keys []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		r.keys[k] = true
	}
}

func (r *recorder) Update(ctx context.Context, prefix string, keys []string, apply store.ApplyFunc) error {
	r.record(keys)
	return r.Backend.Update(ctx, prefix, keys, apply)
}

func (r *recorder) Read(ctx context.Context, prefix string, keys []string) ([]store.Entry, error) {
	r.record(keys)
	return r.Backend.Read(ctx, prefix, keys)
}

// The store is given no key holding more of a password than its 16-bit
// bucket: ("password", H) and ("password-account", H, ACCOUNT), H four
// hexadecimal digits, and nothing that holds a password.
func TestSprayStoredKeysHoldOnlyTheBucket(t *testing.T) {
	rec := &recorder{Backend: memory.NewBackend(memory.Options{}), keys: map[string]bool{}}
	s := store.New(rec, store.Options{Logger: slog.New(slog.DiscardHandler)})
	defer s.Close()
	h, err := s.Handle("signin:")
	if err != nil {
		t.Fatal(err)
	}
	g, err := SignIn(h, SignInOptions{Logger: slog.New(slog.DiscardHandler), Device: DeviceOptions{Secret: []byte(strings.Repeat("s", 32))}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	wrap := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if pw, _ := keyfunc.BodyFields(r, keyfunc.BodyOptions{MaxValueBytes: 1 << 10}, "password"); pw[0] == "correct horse" {
			return
		}
		w.WriteHeader(401)
	}))
	passwords := []string{"correct horse", "hunter2", "Summer2026!", strings.Repeat("long passphrase ", 40)}
	for i, pw := range passwords {
		for j := range 3 {
			body := "username=user" + fmt.Sprint(j) + "&password=" + strings.ReplaceAll(pw, " ", "+")
			r := httptest.NewRequest("POST", "/login", strings.NewReader(body))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			r.RemoteAddr = fmt.Sprintf("192.0.2.%d:1", i*3+j+1)
			wrap.ServeHTTP(httptest.NewRecorder(), r)
		}
	}
	bucket := regexp.MustCompile(`^4:[0-9a-f]{4}$`)
	marker := regexp.MustCompile(`^4:[0-9a-f]{4}5:user[0-9]$`)
	seen := map[string]bool{}
	for k := range rec.keys {
		for _, pw := range passwords {
			for _, part := range []string{pw, pw[:4]} {
				if strings.Contains(k, part) {
					t.Errorf("stored key %q holds a password's text %q", k, part)
				}
			}
		}
		switch {
		case strings.HasPrefix(k, "8:password"):
			if !bucket.MatchString(k[len("8:password"):]) {
				t.Errorf("password key %q holds more than a 16-bit bucket", k)
			}
			seen[k] = true
		case strings.HasPrefix(k, "16:password-account"):
			if !marker.MatchString(k[len("16:password-account"):]) {
				t.Errorf("marker key %q holds more than a 16-bit bucket and the account", k)
			}
		}
	}
	for _, pw := range passwords {
		if k := keyfunc.JoinKeys("password", bucketName(g.spray.bucket(pw))); !seen[k] {
			t.Errorf("the bucket of %.10q, %q, was never counted", pw, k)
		}
	}
}

// Without a secret, a password's bucket is keyed by a random key of the
// process, never by one anyone can compute. A twin of alice's password
// under the key every instance once derived alike, found offline and sent
// on 20 made-up names, leaves her password alone.
func TestSprayNoPublicKey(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	s := memory.New(memory.Options{Store: store.Options{Logger: quiet}})
	defer s.Close()
	h, err := s.Handle("signin:")
	if err != nil {
		t.Fatal(err)
	}
	g, err := SignIn(h, SignInOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	const right = "correct horse"
	// The bucket under the secret-less key of before: HMAC-SHA-256 of the
	// password under HMAC-SHA-256(nil, the label).
	m := hmac.New(sha256.New, nil)
	m.Write([]byte(sprayKeyLabel))
	public := m.Sum(nil)
	publicBucket := func(pw string) uint16 {
		m := hmac.New(sha256.New, public)
		m.Write([]byte(pw))
		return binary.BigEndian.Uint16(m.Sum(nil))
	}
	// A twin under the public key, one that is no twin under the guard's
	// own key if the guard has one: a random key makes the first such
	// almost surely.
	twin := ""
	for i := 0; i < 1<<22 && (twin == "" || g.spray.bucket(twin) == g.spray.bucket(right)); i++ {
		if c := fmt.Sprintf("twin-%d", i); publicBucket(c) == publicBucket(right) {
			twin = c
		}
	}
	if twin == "" {
		t.Fatal("no twin found")
	}
	wrap := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name, _ := Account(r); name == "alice" {
			if pw, _ := keyfunc.BodyFields(r, keyfunc.BodyOptions{}, "password"); pw[0] == right {
				return
			}
		}
		w.WriteHeader(401)
	}))
	try := func(user, pw, addr string) int {
		body := url.Values{"username": {user}, "password": {pw}}.Encode()
		r := httptest.NewRequest("POST", "/login", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.RemoteAddr = addr + ":1"
		w := httptest.NewRecorder()
		wrap.ServeHTTP(w, r)
		return w.Code
	}
	for i := range defaultPasswordSpray.Limit {
		try(fmt.Sprintf("made-up-%d", i), twin, fmt.Sprintf("198.51.%d.1", i))
	}
	if c := try("alice", right, "203.0.113.1"); c != 200 {
		t.Fatalf("alice after %d failures of %q, a twin of her password under a public key: %d, want 200", defaultPasswordSpray.Limit, twin, c)
	}
}
