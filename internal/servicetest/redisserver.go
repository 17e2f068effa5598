package servicetest

import (
	"bufio"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StartRedis starts a Redis server of the test's own on the loopback port,
// keeping nothing on disk unless args say otherwise (they are passed to
// redis-server after the defaults, so they win), and stops it when the test
// ends. It returns the server's address. Without redis-server installed it
// fails under CI=true and skips otherwise.
func StartRedis(t testing.TB, port int, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		Missing(t, "redis-server", err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	StopRedis(addr) // one left over by a test run that was killed
	argv := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir()}, args...)
	cmd := exec.Command(bin, argv...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting redis-server on %s: %v", addr, err)
	}
	t.Cleanup(func() {
		StopRedis(addr)
		cmd.Process.Kill()
		cmd.Wait()
	})
	for i := 0; ; i++ {
		if redisCommand(addr, "PING") == "+PONG" {
			return addr
		}
		if i == 100 {
			t.Fatalf("redis-server on %s does not answer", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// StopRedis shuts down the Redis server at addr, if one answers there,
// without saving.
func StopRedis(addr string) { redisCommand(addr, "SHUTDOWN", "NOSAVE") }

// redisCommand sends one command to the Redis server at addr and returns
// the first line of its answer, or "" when there is none.
func redisCommand(addr string, args ...string) string {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return ""
	}
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}
