package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gatecount/gatecount/examples/internal/demotest"
)

// The acceptance of issue 27's unlock: on two example servers sharing
// PostgreSQL, or Redis, strangers lock alice out; `gatecount unlock
// -account alice` run against the same environment lets her right password
// in from a fresh address on both servers within 2 s; `gatecount show`
// tells the counts before and after; and a stranger's address that spent
// its own budget on her is still refused.

// cli is the gatecount command, built once for the tests that run it;
// TestMain removes it.
var cli struct {
	once     sync.Once
	dir, bin string
	err      error
}

// gatecountBin returns the gatecount command's binary, building it on
// first use.
func gatecountBin(t *testing.T) string {
	t.Helper()
	cli.once.Do(func() {
		if cli.dir, cli.err = os.MkdirTemp("", "gatecount-bin-"); cli.err != nil {
			return
		}
		cli.bin = filepath.Join(cli.dir, "gatecount")
		out, err := exec.Command("go", "build", "-o", cli.bin, "github.com/gatecount/gatecount/cmd/gatecount").CombinedOutput()
		if err != nil {
			cli.err = fmt.Errorf("go build gatecount: %w\n%s", err, out)
		}
	})
	if cli.err != nil {
		t.Fatal(cli.err)
	}
	return cli.bin
}

// gatecount runs the command with env, as an operator would beside the app,
// and returns its standard output; it fails the test on a non-zero exit.
func gatecount(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, gatecountBin(t), args...)
	cmd.Env = []string{}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("gatecount %q: %v\n%s%s", args, err, out.String(), errOut.String())
	}
	return out.String()
}

// accountShown is what `gatecount show -json -account` says.
type accountShown struct {
	Account string `json:"account"`
	Refused bool   `json:"refused"`
	Budgets []struct {
		Budget string `json:"budget"`
		Used   int    `json:"used"`
		Limit  int    `json:"limit"`
	} `json:"budgets"`
}

func TestUnlockReachesFleet(t *testing.T) {
	const (
		within = 2 * time.Second
		every  = 100 * time.Millisecond
	)
	stranger := "198.51.100.1" // spends its own budget on alice: 5 failures
	spender := func(i int) string { return fmt.Sprintf("198.51.100.%d", i+2) }
	for _, kind := range []string{"postgres", "redis"} {
		t.Run(kind, func(t *testing.T) {
			env := storeEnv(t, kind, "TRUSTED_PROXIES=127.0.0.1/32")
			servers, _ := startFleet(t, 2, env)
			login := func(s *demotest.Server, ip string) int {
				res, _ := demotest.Post(t, s.URL+"/login", ip, aliceSignsIn(0))
				return res.StatusCode
			}
			for i := range accountFailures {
				ip := stranger
				if i >= 5 {
					ip = spender(i)
				}
				if res, body := demotest.Post(t, servers[i%2].URL+"/login", ip, wrongFor("alice")(i)); res.StatusCode != http.StatusUnauthorized {
					t.Fatalf("wrong password %d on alice: %d %s, want 401", i+1, res.StatusCode, body)
				}
			}
			for i, s := range servers {
				if c := login(s, fmt.Sprintf("192.0.2.%d", 10+i)); c != http.StatusTooManyRequests {
					t.Fatalf("alice's right password on server %d once strangers spent her account: %d, want 429", i+1, c)
				}
			}
			show := func() accountShown {
				t.Helper()
				var s accountShown
				if err := json.Unmarshal([]byte(gatecount(t, env, "show", "-json", "-account", "alice")), &s); err != nil {
					t.Fatal(err)
				}
				return s
			}
			before := show()
			if !before.Refused || len(before.Budgets) != 2 || before.Budgets[0].Used != accountFailures || before.Budgets[0].Limit != accountFailures || before.Budgets[1].Used != accountFailures {
				t.Fatalf("gatecount show before unlock: %+v; want alice refused, %d of %d failures", before, accountFailures, accountFailures)
			}

			gatecount(t, env, "unlock", "-account", "alice")
			unlocked := time.Now()
			if after := show(); after.Refused || after.Budgets[0].Used != 0 || after.Budgets[1].Used != 0 {
				t.Fatalf("gatecount show after unlock: %+v; want alice free, 0 failures", after)
			}
			for i, s := range servers {
				polls, last := 0, 0
				for ; polls < 30 && time.Since(unlocked) <= within; polls++ {
					if last = login(s, fmt.Sprintf("192.0.2.%d", 100+30*i+polls)); last == http.StatusOK {
						break
					}
					time.Sleep(every)
				}
				if last != http.StatusOK {
					t.Errorf("server %d did not admit alice's right password from a fresh address within %v of the unlock (%d tries, last %d)", i+1, within, polls, last)
				}
			}
			for i, s := range servers {
				if c := login(s, stranger); c != http.StatusTooManyRequests {
					t.Errorf("server %d answered alice's password from the stranger's spent address %d, want 429", i+1, c)
				}
			}
		})
	}
}
