package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/middleware/challenge"
)

// The guards' defaults, as their options' WithDefaults give them.
var (
	signInDefaults = middleware.SignInOptions{}.WithDefaults()
	sendDefaults   = middleware.SendOptions{}.WithDefaults()
)

// Vars reads the guards' budgets as Parse does, for a tool that reads
// no other setting.
func TestVarsGuardBudgets(t *testing.T) {
	per := func(n int, w time.Duration) limiter.Budget { return limiter.Budget{Limit: n, Window: w} }
	for _, tc := range []struct {
		name   string
		env    []string
		signIn SignInBudgets
		send   SendBudgets
		bad    string // the variable at fault
	}{
		{"unset", nil,
			SignInBudgets{signInDefaults.AccountIPFailures, signInDefaults.AccountFailures, signInDefaults.IPAttempts, middleware.MaxConsecutiveFailures, signInDefaults.Delay.After, defSpray, nil, signInDefaults.ChallengeBudget, signInDefaults.NetworkAttempts},
			SendBudgets{sendDefaults.PerDestination, sendDefaults.PerIP}, ""},
		{"set", []string{"RATE_LIMIT_LOGIN_ACCOUNT_IP_FAILURES", "3", "RATE_LIMIT_LOGIN_ACCOUNT_FAILURES", "9", "RATE_LIMIT_LOGIN_IP_ATTEMPTS", "50",
			"RATE_LIMIT_RESET_PER_DESTINATION", "2", "RATE_LIMIT_RESET_PER_IP", "7"},
			SignInBudgets{per(3, 15*time.Minute), per(9, time.Hour), per(50, time.Hour), middleware.MaxConsecutiveFailures, signInDefaults.Delay.After, defSpray, nil, signInDefaults.ChallengeBudget, signInDefaults.NetworkAttempts},
			SendBudgets{per(2, time.Hour), per(7, time.Hour)}, ""},
		{"bad", []string{"RATE_LIMIT_LOGIN_ACCOUNT_FAILURES", "many"},
			SignInBudgets{signInDefaults.AccountIPFailures, signInDefaults.AccountFailures, signInDefaults.IPAttempts, middleware.MaxConsecutiveFailures, signInDefaults.Delay.After, defSpray, nil, signInDefaults.ChallengeBudget, signInDefaults.NetworkAttempts},
			SendBudgets{sendDefaults.PerDestination, sendDefaults.PerIP}, "RATE_LIMIT_LOGIN_ACCOUNT_FAILURES"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := NewVars(env(tc.env...))
			signIn, send := v.SignInBudgets(), v.SendBudgets()
			if !reflect.DeepEqual(signIn, tc.signIn) || send != tc.send {
				t.Errorf("SignIn, Send = %v, %v; want %v, %v", signIn, send, tc.signIn, tc.send)
			}
			var ve *VarError
			if err := v.Err(); (err != nil) != (tc.bad != "") || tc.bad != "" && (!errors.As(err, &ve) || ve.Var != tc.bad) {
				t.Errorf("Err = %v, want one naming %q", err, tc.bad)
			}
		})
	}
}

var defSpray = middleware.SprayOptions{Field: signInDefaults.Spray.Field, Budget: signInDefaults.Spray.Budget}

// The count of failures per password is read with its field, or turned
// off; a bad value is named.
func TestVarsSpray(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want middleware.SprayOptions
		bad  bool
	}{
		{nil, defSpray, false},
		{[]string{"RATE_LIMIT_LOGIN_SPRAY", "50", "RATE_LIMIT_LOGIN_SPRAY_FIELD", "pw"},
			middleware.SprayOptions{Field: "pw", Budget: limiter.Budget{Limit: 50, Window: time.Hour}}, false},
		{[]string{"RATE_LIMIT_LOGIN_SPRAY", "Off"}, middleware.SprayOptions{Off: true, Field: "password", Budget: signInDefaults.Spray.Budget}, false},
		{[]string{"RATE_LIMIT_LOGIN_SPRAY", "0"}, defSpray, true},
		{[]string{"RATE_LIMIT_LOGIN_SPRAY", "20/1h"}, defSpray, true},
	} {
		v := NewVars(env(tc.env...))
		if got := v.SignInBudgets().Spray; !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%v: %+v, want %+v", tc.env, got, tc.want)
		}
		var ve *VarError
		if err := v.Err(); tc.bad != (err != nil) || tc.bad && (!errors.As(err, &ve) || ve.Var != "RATE_LIMIT_LOGIN_SPRAY" || !strings.Contains(err.Error(), "or off")) {
			t.Errorf("%v: Err = %v", tc.env, err)
		}
	}
}

// A cap above NIST SP 800-63B's 100 is refused with an error naming it.
func TestConsecutiveAboveNIST(t *testing.T) {
	_, err := Parse(env("RATE_LIMIT_LOGIN_CONSECUTIVE_FAILURES", "500"))
	var ve *VarError
	if !errors.As(err, &ve) || ve.Var != "RATE_LIMIT_LOGIN_CONSECUTIVE_FAILURES" || !strings.Contains(err.Error(), "NIST SP 800-63B") {
		t.Fatalf("RATE_LIMIT_LOGIN_CONSECUTIVE_FAILURES=500: %v, want an error naming NIST SP 800-63B", err)
	}
}

// RATE_LIMIT_LOGIN_CHALLENGE=pow gives the sign-in guard a proof of work
// of RATE_LIMIT_LOGIN_CHALLENGE_BITS under GATECOUNT_SECRET; off is the
// default, and anything else an error naming the variable.
func TestSignInChallengeParse(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		bits int // 0: no challenge
		bad  string
	}{
		{nil, 0, ""},
		{[]string{"RATE_LIMIT_LOGIN_CHALLENGE", "off"}, 0, ""},
		{[]string{"RATE_LIMIT_LOGIN_CHALLENGE", "pow"}, 17, ""}, // the proof of work's default
		{[]string{"RATE_LIMIT_LOGIN_CHALLENGE", "pow", "RATE_LIMIT_LOGIN_CHALLENGE_BITS", "8", "GATECOUNT_SECRET", secret}, 8, ""},
		{[]string{"RATE_LIMIT_LOGIN_CHALLENGE", "captcha"}, 0, "RATE_LIMIT_LOGIN_CHALLENGE"},
		{[]string{"RATE_LIMIT_LOGIN_CHALLENGE", "pow", "RATE_LIMIT_LOGIN_CHALLENGE_BITS", "41"}, 0, "RATE_LIMIT_LOGIN_CHALLENGE_BITS"},
		{[]string{"RATE_LIMIT_LOGIN_CHALLENGE_ATTEMPTS", "0"}, 0, "RATE_LIMIT_LOGIN_CHALLENGE_ATTEMPTS"},
	} {
		c, err := Parse(env(tc.env...))
		var ve *VarError
		if (err != nil) != (tc.bad != "") || tc.bad != "" && (!errors.As(err, &ve) || ve.Var != tc.bad) {
			t.Errorf("%q: %v, want an error naming %q", tc.env, err, tc.bad)
			continue
		}
		if tc.bad != "" {
			continue
		}
		p, _ := c.SignIn.Challenge.(*challenge.ProofOfWork)
		if (tc.bits == 0) != (c.SignIn.Challenge == nil) || (tc.bits != 0 && (p == nil || p.Bits(0) != tc.bits)) {
			t.Errorf("%q: challenge %v, want a proof of work of %d bits", tc.env, c.SignIn.Challenge, tc.bits)
		}
		if o := c.SignInOptions(); o.Challenge != c.SignIn.Challenge || o.ChallengeBudget != signInDefaults.ChallengeBudget {
			t.Errorf("%q: SignInOptions %+v do not carry the challenge", tc.env, o)
		}
	}
}
