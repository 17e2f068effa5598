package main

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatecount/gatecount/internal/servicetest"
)

// The README's SQLite and Redis quick starts, run twice in a row as a new
// user would (a shell in an empty directory, the lines as written, go run
// standing for the example built once), keep their counts across the
// restart: the secret is made once and kept.
func TestREADMEQuickStartsKeepCounts(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "stdlib")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		name    string
		replace func(t *testing.T) map[string]string
	}{
		{"sqlite", func(*testing.T) map[string]string { return nil }},
		{"redis", func(t *testing.T) map[string]string {
			return map[string]string{"redis://127.0.0.1:6379/0": servicetest.RedisURL(t)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := quickStart(t, tc.name)
			script := strings.Join(lines, "\n")
			if !strings.Contains(script, "go run ./examples/stdlib") {
				t.Fatalf("the %s quick start does not run the example:\n%s", tc.name, script)
			}
			script = strings.ReplaceAll(script, "go run ./examples/stdlib", bin)
			for old, repl := range tc.replace(t) {
				script = strings.ReplaceAll(script, old, repl)
			}
			dir := t.TempDir()
			first := runQuickStart(t, dir, script, 3)
			secret, err := os.ReadFile(filepath.Join(dir, ".gatecount-secret"))
			if err != nil {
				t.Fatalf("the quick start kept no secret: %v", err)
			}
			second := runQuickStart(t, dir, script, 1)
			again, _ := os.ReadFile(filepath.Join(dir, ".gatecount-secret"))
			if string(again) != string(secret) {
				t.Fatalf("the second run made a new secret")
			}
			if first != 27 || second != 26 {
				t.Fatalf("requests left after 3 requests, then 1 after a restart: %d and %d, want 27 and 26 (the count kept)", first, second)
			}
		})
	}
}

// quickStart returns the command lines of the README's quick start name,
// the indented block after its <!-- quickstart:name --> marker.
func quickStart(t *testing.T, name string) []string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "<!-- quickstart:"+name)
	if !ok {
		t.Fatalf("README.md has no quick start %q", name)
	}
	var lines []string
	for _, line := range strings.Split(after, "\n")[1:] {
		switch {
		case strings.HasPrefix(line, "    "):
			lines = append(lines, strings.TrimPrefix(line, "    "))
		case strings.TrimSpace(line) == "" && len(lines) == 0:
		default:
			return lines
		}
	}
	return lines
}

var listening = regexp.MustCompile(`kind=server-listening addr=(\S+)`)

// runQuickStart runs script in dir until the example listens, sends n
// POST /execute as alice, stops it with SIGTERM and returns the requests
// left the last answer said.
func runQuickStart(t *testing.T, dir, script string, n int) int {
	t.Helper()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "ADDR=127.0.0.1:0"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
			cmd.Wait()
		}
	}
	defer stop()
	addr := make(chan string, 1)
	var logs strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs.WriteString(sc.Text() + "\n")
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		close(addr)
	}()
	a, ok := <-addr
	if !ok {
		stop()
		t.Fatalf("the example did not start:\n%s", logs.String())
	}
	left := -1
	client := &http.Client{Timeout: 10 * time.Second}
	for range n {
		req, _ := http.NewRequest("POST", "http://"+a+"/execute", nil)
		req.Header.Set("Authorization", "Bearer alice-token")
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("POST /execute: %d", res.StatusCode)
		}
		m := regexp.MustCompile(`r=(\d+)`).FindStringSubmatch(res.Header.Get("RateLimit"))
		if m == nil {
			t.Fatalf("RateLimit %q", res.Header.Get("RateLimit"))
		}
		left = atoi(m[1])
	}
	stop()
	return left
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}
