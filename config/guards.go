package config

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/middleware/challenge"
)

// SignInBudgets reads the sign-in guard's budgets (RATE_LIMIT_LOGIN_*),
// middleware's defaults where unset: as [Parse] reads them into
// Config.SignIn, for a tool that reads no other setting.
// Its proof of work, under RATE_LIMIT_LOGIN_CHALLENGE=pow, has a key of
// this process.
func (v *Vars) SignInBudgets() SignInBudgets { return v.r.signIn(nil) }

// SendBudgets reads the send guard's budgets (RATE_LIMIT_RESET_*), middleware's
// defaults where unset, as [Parse] reads them into Config.Send.
func (v *Vars) SendBudgets() SendBudgets { return v.r.send() }

func (r *reader) signIn(secret []byte) SignInBudgets {
	d := middleware.SignInOptions{}.WithDefaults()
	return SignInBudgets{
		AccountIPFailures:   r.budget("RATE_LIMIT_LOGIN_ACCOUNT_IP_FAILURES", d.AccountIPFailures),
		AccountFailures:     r.budget("RATE_LIMIT_LOGIN_ACCOUNT_FAILURES", d.AccountFailures),
		IPAttempts:          r.budget("RATE_LIMIT_LOGIN_IP_ATTEMPTS", d.IPAttempts),
		ConsecutiveFailures: r.consecutive("RATE_LIMIT_LOGIN_CONSECUTIVE_FAILURES"),
		DelayAfter:          cmp.Or(r.count("RATE_LIMIT_LOGIN_DELAY_AFTER", middleware.MaxConsecutiveFailures), d.Delay.After),
		Spray:               r.spray(),
		Challenge:           r.challenge("RATE_LIMIT_LOGIN_CHALLENGE", "RATE_LIMIT_LOGIN_CHALLENGE_BITS", secret),
		ChallengeAttempts:   r.budget("RATE_LIMIT_LOGIN_CHALLENGE_ATTEMPTS", d.ChallengeBudget),
		NetworkAttempts:     r.budget("RATE_LIMIT_LOGIN_NETWORK_ATTEMPTS", d.NetworkAttempts),
	}
}

// challenge reads a guard's challenge: off (or unset) or pow, a proof of
// work of the variable bits' base difficulty, keyed by secret.
func (r *reader) challenge(name, bits string, secret []byte) challenge.Provider {
	n := r.count(bits, challenge.MaxBits)
	switch v := r.str(name); v {
	case "", "off":
		return nil
	case challenge.ProofOfWorkScheme:
		p, err := challenge.NewProofOfWork(challenge.ProofOfWorkOptions{Secret: secret, Bits: n})
		if err != nil {
			r.fail(bits, r.str(bits), err.Error())
			return nil
		}
		return p
	default:
		r.fail(name, v, "off, or pow: a proof of work (challenge.ProofOfWork)")
		return nil
	}
}

// spray reads the count of failures per password: RATE_LIMIT_LOGIN_SPRAY,
// the accounts a password may fail against per hour, or off; and
// RATE_LIMIT_LOGIN_SPRAY_FIELD, the body field of the password.
func (r *reader) spray() middleware.SprayOptions {
	const name = "RATE_LIMIT_LOGIN_SPRAY"
	o := middleware.SignInOptions{}.WithDefaults().Spray
	switch v := r.str(name); {
	case strings.EqualFold(v, "off"):
		o.Off = true
	case v != "":
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > limiter.MaxLimit {
			r.fail(name, v, fmt.Sprintf("a whole number from 1 to %d, or off", limiter.MaxLimit))
			break
		}
		o.Budget.Limit = n
	}
	if f := r.str("RATE_LIMIT_LOGIN_SPRAY_FIELD"); f != "" {
		o.Field = f
	}
	return o
}

// consecutive reads a cap on consecutive failures: 1 to NIST SP
// 800-63B's 100, which it names when refusing more.
func (r *reader) consecutive(name string) int {
	v := r.str(name)
	n := r.count(name, limiter.MaxLimit)
	switch {
	case n == 0:
		return middleware.MaxConsecutiveFailures
	case n > middleware.MaxConsecutiveFailures:
		r.fail(name, v, fmt.Sprintf("a whole number from 1 to %d: NIST SP 800-63B (§3.2.2) allows at most %d consecutive failed attempts on an account",
			middleware.MaxConsecutiveFailures, middleware.MaxConsecutiveFailures))
		return middleware.MaxConsecutiveFailures
	}
	return n
}

func (r *reader) send() SendBudgets {
	d := middleware.SendOptions{}.WithDefaults()
	return SendBudgets{
		PerDestination: r.budget("RATE_LIMIT_RESET_PER_DESTINATION", d.PerDestination),
		PerIP:          r.budget("RATE_LIMIT_RESET_PER_IP", d.PerIP),
	}
}
