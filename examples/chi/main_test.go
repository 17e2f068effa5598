package main

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/gatecount/gatecount/examples/internal/demotest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLimits(t *testing.T) {
	s := demotest.Start(t, routes, map[string]string{
		"RATE_LIMIT_EXECUTE_PER_MINUTE": "3",
		"RATE_LIMIT_HEALTH_PER_MINUTE":  "2",
	})
	demotest.CheckLimits(t, s)
}

func TestSignIn(t *testing.T) {
	demotest.CheckSignIn(t, demotest.Start(t, routes, demotest.SignInEnv))
}
