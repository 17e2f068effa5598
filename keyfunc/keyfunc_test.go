package keyfunc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// peer is keyed by the immediate peer address, as a zero IPKeyer keys.
var peer Func = new(IPKeyer).Key

func TestJoinKeysNoCollision(t *testing.T) {
	tests := []struct {
		a, b []string
	}{
		{[]string{"a|b", "c"}, []string{"a", "b|c"}},
		{[]string{"a:b", "c"}, []string{"a", "b:c"}},
		{[]string{"1:a", ""}, []string{"", "1:a"}},
		{[]string{"ab"}, []string{"a", "b"}},
		{[]string{""}, []string{}},
		{[]string{"", ""}, []string{""}},
		{[]string{"10:aaaaaaaaaa"}, []string{"10:", "aaaaaaaaaa"}},
	}
	for _, tt := range tests {
		ka, kb := JoinKeys(tt.a...), JoinKeys(tt.b...)
		if ka == kb {
			t.Errorf("JoinKeys(%q) == JoinKeys(%q) == %q", tt.a, tt.b, ka)
		}
	}
	if got := JoinKeys("a|b", "c"); got != "3:a|b1:c" {
		t.Errorf(`JoinKeys("a|b", "c") = %q, want "3:a|b1:c"`, got)
	}
	if got := JoinKeys(); got != "" {
		t.Errorf("JoinKeys() = %q, want empty", got)
	}
}

func constFunc(k string) Func {
	return func(*http.Request) (string, error) { return k, nil }
}

func TestJoin(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.1:1"
	got, err := Join(constFunc("alice"), peer)(r)
	if err != nil || got != JoinKeys("alice", "192.0.2.1") {
		t.Errorf("Join = %q, %v", got, err)
	}
	if a, b := mustJoin(t, r, constFunc("a|b"), constFunc("c")), mustJoin(t, r, constFunc("a"), constFunc("b|c")); a == b {
		t.Errorf("Join keys collide: %q", a)
	}

	_, err = Join(constFunc("x"), CallerID)(r)
	if !errors.Is(err, ErrNoCallerID) || !errors.Is(err, ErrNoKey) || !strings.Contains(err.Error(), "part 2 of 2") {
		t.Errorf("Join with failing part: %v", err)
	}
	foreign := errors.New("foreign")
	_, err = Join(func(*http.Request) (string, error) { return "", foreign })(r)
	if !errors.Is(err, foreign) || !errors.Is(err, ErrNoKey) {
		t.Errorf("Join with foreign error: %v", err)
	}
	for _, f := range []Func{Join(), Join(peer, nil)} {
		if _, err := f(r); !errors.Is(err, ErrInvalidOption) || !errors.Is(err, ErrNoKey) {
			t.Errorf("misconfigured Join: %v", err)
		}
	}
}

func mustJoin(t *testing.T, r *http.Request, fs ...Func) string {
	t.Helper()
	k, err := Join(fs...)(r)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestCallerID(t *testing.T) {
	tests := []struct {
		name string
		ctx  context.Context
		want string
		ok   bool
	}{
		{"absent", context.Background(), "", false},
		{"empty", WithCallerID(context.Background(), ""), "", false},
		{"set", WithCallerID(context.Background(), "user-42"), "user-42", true},
		{"overridden", WithCallerID(WithCallerID(context.Background(), "a"), "b"), "b", true},
		{"foreign key", context.WithValue(context.Background(), otherKey{}, "x"), "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(tt.ctx)
			k, err := CallerID(r)
			if tt.ok {
				if err != nil || k != tt.want {
					t.Errorf("CallerID = %q, %v; want %q", k, err, tt.want)
				}
				return
			}
			if !errors.Is(err, ErrNoCallerID) || !errors.Is(err, ErrNoKey) {
				t.Errorf("CallerID error = %v; want ErrNoCallerID and ErrNoKey", err)
			}
		})
	}
}

func TestHeader(t *testing.T) {
	tests := []struct {
		name    string
		header  string
		lines   []string
		want    string
		wantErr error
	}{
		{name: "present", header: "X-Api-Key", lines: []string{"abc"}, want: "abc"},
		{name: "name case-insensitive", header: "x-api-key", lines: []string{"abc"}, want: "abc"},
		{name: "trimmed", header: "X-Api-Key", lines: []string{" \tabc "}, want: "abc"},
		{name: "absent", header: "X-Api-Key", wantErr: ErrNoKey},
		{name: "empty", header: "X-Api-Key", lines: []string{"  "}, wantErr: ErrNoKey},
		{name: "repeated", header: "X-Api-Key", lines: []string{"a", "b"}, wantErr: ErrNoKey},
		{name: "at bound", header: "X-Api-Key", lines: []string{strings.Repeat("k", maxHeaderValue)}, want: strings.Repeat("k", maxHeaderValue)},
		{name: "too long", header: "X-Api-Key", lines: []string{strings.Repeat("k", maxHeaderValue+1)}, wantErr: ErrValueTooLong},
		{name: "bad name", header: "X Api", lines: []string{"abc"}, wantErr: ErrInvalidOption},
		{name: "empty name", header: "", wantErr: ErrInvalidOption},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			for _, l := range tt.lines {
				r.Header.Add("X-Api-Key", l)
			}
			got, err := Header(tt.header)(r)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !errors.Is(err, ErrNoKey) {
					t.Errorf("Header error = %v; want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("Header = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

type otherKey struct{}

// JoinKeys allocates its key alone, of the key's own length, on every
// count of digits in a part's length.
func TestJoinKeysAllocs(t *testing.T) {
	for _, parts := range [][]string{{"ip", "192.0.2.7"}, {"account-ip", "alice", strings.Repeat("x", 12345)}, {}, {""}} {
		var k string
		if n := testing.AllocsPerRun(100, func() { k = JoinKeys(parts...) }); n > 1 {
			t.Errorf("JoinKeys(%d parts): %v allocations, want at most 1", len(parts), n)
		}
		var want strings.Builder
		for _, p := range parts {
			fmt.Fprintf(&want, "%d:%s", len(p), p)
		}
		if k != want.String() {
			t.Errorf("JoinKeys(%q) = %q, want %q", parts, k, want.String())
		}
	}
}
