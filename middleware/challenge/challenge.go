// Package challenge provides the tests a sign-in guard may ask of a client
// before one more attempt on an account whose windowed budget is spent
// (middleware.SignInOptions.Challenge). A [Provider] issues challenges and
// verifies answers. [ProofOfWork] is one that needs no third party; a
// CAPTCHA of the app's provider is another.
//
// The guard answers a challenged refusal 429 with the challenge in
// [Header] and in the problem document's "challenge" member. The client
// answers in [AnswerHeader], or in the body field [AnswerField].
package challenge

import (
	"context"
	"errors"
	"time"
)

// The wire names of a challenge.
const (
	// Header carries the challenge of a challenged refusal, as a
	// structured-field dictionary: scheme="pow", token="…", bits=17.
	Header = "Gatecount-Challenge"
	// AnswerHeader carries a client's answer to a challenge.
	AnswerHeader = "Gatecount-Challenge-Answer"
	// AnswerField is the body field that carries the answer when
	// [AnswerHeader] is absent: a form's hidden input, a JSON member.
	AnswerField = "gatecount-challenge-answer"
	// MaxAnswerBytes bounds an answer in [AnswerHeader]; one in the body is
	// bounded as the account field is (middleware.SignInOptions.Body).
	MaxAnswerBytes = 4096
	// MaxID bounds [Solved].ID.
	MaxID = 128
)

// Provider issues challenges and verifies their answers: a CAPTCHA of the
// app's provider, or [ProofOfWork]. Its methods must be safe for
// concurrent use, and must not tell whether the account exists.
type Provider interface {
	// Issue returns a new challenge for a client of c.
	Issue(ctx context.Context, c For) (Issued, error)
	// Verify checks answer, as the client sent it, for c, without recording
	// it. The guard records its ID in the same store update that counts the
	// attempt, so that an answer is taken once on every instance. An answer
	// it refuses is an error.
	Verify(ctx context.Context, answer string, c For) (Solved, error)
}

// For is whom a challenge is issued to, or answered by.
type For struct {
	// Account is the account, normalised as the guard counts it.
	Account string
	// Addr is the client address's key (keyfunc.IPKeyer.Key).
	Addr string
	// Failures is how many challenged attempts on the account failed in
	// the window of its challenge budget, for a difficulty that grows. In
	// Verify it is the count when the answer comes, not when the challenge
	// was issued.
	Failures int
}

// Issued is a challenge as the client gets it.
type Issued struct {
	// Scheme names the kind: [ProofOfWorkScheme], or the app's own.
	Scheme string
	// Token is the challenge, for the client's solver or widget: 1 to
	// 1024 bytes of printable ASCII but '"' and '\'.
	Token string
	// Bits is the difficulty of a proof of work; zero otherwise.
	Bits int
}

// Solved is what Verify learns of a valid answer.
type Solved struct {
	// ID names the challenge answered, unique among all challenges: 1 to
	// [MaxID] bytes. The guard refuses it again until Expires.
	ID string
	// Expires is when the challenge stops being answerable.
	Expires time.Time
}

// ErrAnswer is matched by the error of an answer a Provider refuses:
// malformed, forged, expired, for another account or address, or short of
// its difficulty.
var ErrAnswer = errors.New("challenge: answer refused")
