package config

import "github.com/gatecount/gatecount/middleware"

// SignIn reads the sign-in guard's budgets (RATE_LIMIT_LOGIN_*),
// middleware's defaults where unset: as FromEnv reads them into
// Config.SignIn, for a tool that reads no other setting.
func (v *Vars) SignIn() SignInBudgets { return v.r.signIn() }

// Send reads the send guard's budgets (RATE_LIMIT_RESET_*), middleware's
// defaults where unset, as FromEnv reads them into Config.Send.
func (v *Vars) Send() SendBudgets { return v.r.send() }

func (r *reader) signIn() SignInBudgets {
	return SignInBudgets{
		AccountIPFailures: r.budget("RATE_LIMIT_LOGIN_ACCOUNT_IP_FAILURES", middleware.DefaultAccountIPFailures),
		AccountFailures:   r.budget("RATE_LIMIT_LOGIN_ACCOUNT_FAILURES", middleware.DefaultAccountFailures),
		IPAttempts:        r.budget("RATE_LIMIT_LOGIN_IP_ATTEMPTS", middleware.DefaultIPAttempts),
	}
}

func (r *reader) send() SendBudgets {
	return SendBudgets{
		PerDestination: r.budget("RATE_LIMIT_RESET_PER_DESTINATION", middleware.DefaultPerDestination),
		PerIP:          r.budget("RATE_LIMIT_RESET_PER_IP", middleware.DefaultSendPerIP),
	}
}
