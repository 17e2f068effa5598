package demo

import (
	"bytes"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
)

// contentTypes are the Content-Types the fuzz target chooses from.
var contentTypes = []string{
	"application/x-www-form-urlencoded",
	"application/json",
	"multipart/form-data; boundary=B",
	"application/json; charset",
	"application/x-www-form-urlencoded; charset=utf-8",
	"application/problem+json",
	"text/plain",
	"",
}

func multipartSeed(fields ...string) string {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	mw.SetBoundary("B")
	for i := 0; i+1 < len(fields); i += 2 {
		mw.WriteField(fields[i], fields[i+1])
	}
	mw.Close()
	return b.String()
}

// FuzzOneReading feeds one body to the sign-in guard's parser and to the
// demo handler's own, and checks that they never name different accounts;
// and that through the guard, the handler sees exactly the account the
// guard counted.
func FuzzOneReading(f *testing.F) {
	f.Add(uint8(0), "username=alice&password=correct-horse")
	f.Add(uint8(0), "username=alice&password=correct-horse&username=zzz")
	f.Add(uint8(0), "username=alice"+strings.Repeat("%20", 300))
	f.Add(uint8(0), "username=%20Alice&USERNAME=bob")
	f.Add(uint8(1), `{"username":"alice","password":"correct-horse","USERNAME":"x"}`)
	f.Add(uint8(1), `{"username":"ＡＬＩＣＥ","password":"x"}`)
	f.Add(uint8(3), `{"username":"alice","password":"correct-horse"}`)
	f.Add(uint8(2), multipartSeed("username", "alice", "password", "correct-horse"))
	f.Add(uint8(2), multipartSeed("username", "alice", "Username", "bob"))
	s := memory.New(memory.Options{Store: store.Options{Logger: slog.New(slog.DiscardHandler)}})
	defer s.Close()
	h, err := s.Handle("login:")
	if err != nil {
		f.Fatal(err)
	}
	g, err := middleware.SignIn(h, middleware.SignInOptions{
		Logger: slog.New(slog.DiscardHandler),
		// Budgets no fuzzing run spends, so that the handler keeps running.
		AccountIPFailures: limiter.Budget{Limit: limiter.MaxLimit, Window: time.Hour},
		AccountFailures:   limiter.Budget{Limit: limiter.MaxLimit, Window: time.Hour},
		IPAttempts:        limiter.Budget{Limit: limiter.MaxLimit, Window: time.Hour},
		NetworkAttempts:   limiter.Budget{Limit: limiter.MaxLimit, Window: time.Hour},
		Device:            middleware.DeviceOptions{Off: true},
	})
	if err != nil {
		f.Fatal(err)
	}
	defer g.Close()
	request := func(ct, body string) *http.Request {
		r := httptest.NewRequest("POST", "/login", strings.NewReader(body))
		if ct != "" {
			r.Header.Set("Content-Type", ct)
		}
		return r
	}
	f.Fuzz(func(t *testing.T, kind uint8, body string) {
		ct := contentTypes[int(kind)%len(contentTypes)]
		guard, gerr := g.ReadAccount(request(ct, body))
		r := request(ct, body)
		mine, ok := account(r, credentials(r, "username", "password"), "username", keyfunc.NormalizeUsername)
		if gerr == nil && ok && guard != mine {
			t.Fatalf("the guard reads %q, the handler %q", guard, mine)
		}
		if gerr == nil && guard == "" {
			t.Fatal("the guard read an empty account")
		}
		// Through the guard, the handler's account is the guard's, or the
		// handler does not run.
		ran := false
		wrapped := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ran = true
			a, _ := account(r, credentials(r, "username", "password"), "username", keyfunc.NormalizeUsername)
			if gerr != nil || a != guard {
				t.Errorf("handler ran with account %q; the guard read %q (%v)", a, guard, gerr)
			}
			// A success: it clears the account's consecutive failures and
			// delay, which no budget option puts out of a fuzzing run's way.
			w.WriteHeader(http.StatusOK)
		}))
		rr := request(ct, body)
		rr.RemoteAddr = "192.0.2.1:1"
		w := httptest.NewRecorder()
		wrapped.ServeHTTP(w, rr)
		if ran == (gerr != nil) {
			t.Fatalf("handler ran %v with guard error %v: %d", ran, gerr, w.Code)
		}
	})
}
