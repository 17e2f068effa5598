package main

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/gatecount/gatecount/examples/internal/demotest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestExample starts the gorilla example for real and checks its limits and its
// sign-in and password-reset routes.
func TestExample(t *testing.T) { demotest.CheckExample(t, routes) }
