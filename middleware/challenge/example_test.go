package challenge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"time"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/middleware/challenge"
	"github.com/gatecount/gatecount/store/memory"
)

// Strangers spend alice's budget; from a new address, without a device
// cookie, she is challenged instead of locked out, solves the puzzle and
// signs in.
func ExampleProofOfWork() {
	secret := []byte("the app's GATECOUNT_SECRET, 32 bytes or more")
	signIn := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if pw, _ := url.ParseQuery(readBody(r)); pw.Get("password") == "correct-horse" { // your check
			fmt.Fprintln(w, "signed in")
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
	})

	s := memory.New(memory.Options{})
	defer s.Close()
	h, err := s.Handle("login:")
	if err != nil {
		log.Fatal(err)
	}
	pow, err := challenge.NewProofOfWork(challenge.ProofOfWorkOptions{
		Secret: secret, // GATECOUNT_SECRET
		Bits:   8,      // 17, the default, takes a phone about a second
	})
	if err != nil {
		log.Fatal(err)
	}
	guard, err := middleware.SignIn(h, middleware.SignInOptions{
		AccountFailures: limiter.Budget{Limit: 3, Window: time.Hour},
		Challenge:       pow,
		Logger:          slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer guard.Close()
	mux := http.NewServeMux()
	mux.Handle("GET /pow.js", pow.Script()) // the solver, for your sign-in page
	mux.Handle("POST /login", guard.Wrap(signIn))

	attempt := func(ip, password, answer string) *httptest.ResponseRecorder {
		body := url.Values{"username": {"alice"}, "password": {password}}.Encode()
		r := httptest.NewRequest("POST", "/login", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if answer != "" {
			r.Header.Set(challenge.AnswerHeader, answer)
		}
		r.RemoteAddr = ip + ":4000"
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w
	}
	for _, ip := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.3"} {
		attempt(ip, "guess", "")
	}
	w := attempt("203.0.113.7", "correct-horse", "")
	var problem struct {
		Challenge struct {
			Scheme, Token string
			Bits          int
		}
	}
	json.Unmarshal(w.Body.Bytes(), &problem)
	fmt.Println(w.Code, problem.Challenge.Scheme, problem.Challenge.Bits)

	answer, _, err := challenge.Solve(context.Background(), problem.Challenge.Token, problem.Challenge.Bits)
	if err != nil {
		panic(err)
	}
	w = attempt("203.0.113.7", "correct-horse", answer)
	fmt.Print(w.Code, " ", w.Body)
	w = attempt("203.0.113.7", "correct-horse", answer) // an answer is taken once
	fmt.Println(w.Code, w.Header().Get(challenge.Header) != "")
	// Output:
	// 429 pow 8
	// 200 signed in
	// 429 true
}

func readBody(r *http.Request) string {
	b, _ := io.ReadAll(r.Body)
	return string(b)
}
