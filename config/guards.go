package config

import (
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
)

// SignInBudgets are the budgets of the sign-in guard named login, as the
// environment sets them (see middleware.SignInOptions).
type SignInBudgets struct {
	AccountIPFailures limiter.Budget // RATE_LIMIT_LOGIN_ACCOUNT_IP_FAILURES, per 15 minutes
	AccountFailures   limiter.Budget // RATE_LIMIT_LOGIN_ACCOUNT_FAILURES, per hour
	IPAttempts        limiter.Budget // RATE_LIMIT_LOGIN_IP_ATTEMPTS, per hour
}

// SignIn reads the sign-in guard's budgets, middleware's defaults where
// unset. The app and the gatecount command read them here alike.
func (v *Vars) SignIn() SignInBudgets {
	return SignInBudgets{
		AccountIPFailures: v.Budget("RATE_LIMIT_LOGIN_ACCOUNT_IP_FAILURES", middleware.DefaultAccountIPFailures),
		AccountFailures:   v.Budget("RATE_LIMIT_LOGIN_ACCOUNT_FAILURES", middleware.DefaultAccountFailures),
		IPAttempts:        v.Budget("RATE_LIMIT_LOGIN_IP_ATTEMPTS", middleware.DefaultIPAttempts),
	}
}

// SendBudgets are the budgets of the password-reset send guard, as the
// environment sets them (see middleware.SendOptions).
type SendBudgets struct {
	PerDestination limiter.Budget // RATE_LIMIT_RESET_PER_DESTINATION, per hour
	PerIP          limiter.Budget // RATE_LIMIT_RESET_PER_IP, per hour
}

// Send reads the password-reset guard's budgets, middleware's defaults
// where unset.
func (v *Vars) Send() SendBudgets {
	return SendBudgets{
		PerDestination: v.Budget("RATE_LIMIT_RESET_PER_DESTINATION", middleware.DefaultPerDestination),
		PerIP:          v.Budget("RATE_LIMIT_RESET_PER_IP", middleware.DefaultSendPerIP),
	}
}
