package main

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/gatecount/gatecount/examples/internal/demotest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestExample serves the chi example's router and checks its limits, its
// sign-in guard and its password resets.
func TestExample(t *testing.T) { demotest.CheckRoutes(t, newApp) }
