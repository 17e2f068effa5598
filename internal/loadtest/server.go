package loadtest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// LibraryModule is the module ServerPackage belongs to.
const LibraryModule = "github.com/gatecount/gatecount"

// ServerPackage is the example server Build compiles.
const ServerPackage = LibraryModule + "/examples/stdlib"

// CommandPackage is the gatecount command Build compiles beside the server:
// StartCluster migrates the store with it.
const CommandPackage = LibraryModule + "/cmd/gatecount"

// Defaults of the shared stores' locations: the local test servers.
const (
	DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test"
	DefaultRedisURL    = "redis://127.0.0.1:6379/0"
)

// Store names the limit store the servers count in.
type Store string

// The stores a cluster can count in.
const (
	Memory   Store = "memory"
	SQLite   Store = "sqlite"
	Postgres Store = "postgres"
	Redis    Store = "redis"
)

// Shared reports whether every server of a cluster sees the same counts.
func (s Store) Shared() bool { return s != Memory }

// ParseStore reads a store's name.
func ParseStore(name string) (Store, error) {
	switch s := Store(strings.ToLower(name)); s {
	case Memory, SQLite, Postgres, Redis:
		return s, nil
	}
	return "", fmt.Errorf("%w: unknown store %q, want memory, sqlite, postgres or redis", ErrUsage, name)
}

// ErrUsage is returned for a configuration the load tool cannot run.
var ErrUsage = errors.New("loadtest: invalid configuration")

// ErrServer is matched by the errors of a server that would not start or
// answer.
var ErrServer = errors.New("loadtest: server failed")

// LibraryDir returns the directory of LibraryModule's source, as the go
// command found on PATH resolves it from the current directory: the
// repository root, from the library's module or from one that replaces it
// with its local copy (the tools module).
func LibraryDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", LibraryModule).Output()
	if err != nil {
		return "", fmt.Errorf("loadtest: go list -m %s: %w", LibraryModule, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("loadtest: %s has no local copy", LibraryModule)
	}
	return dir, nil
}

// Build compiles ServerPackage and CommandPackage into dir with the go
// command found on PATH, in LibraryDir (so with the library's own go.mod),
// and returns the server binary's path.
func Build(ctx context.Context, dir string) (string, error) {
	root, err := LibraryDir(ctx)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator), ServerPackage, CommandPackage)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("loadtest: go build %s %s: %w\n%s", ServerPackage, CommandPackage, err, out)
	}
	return filepath.Join(dir, "stdlib"), nil
}

// NewSecret returns a fresh random GATECOUNT_SECRET, so that a run's counts
// in a shared store never meet another run's.
func NewSecret() string {
	b := make([]byte, 32)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Caller is one API caller of the example server: its name and bearer
// token.
type Caller struct {
	Name, Token string
}

// NewCallers returns n callers named caller-000, caller-001, … with fresh
// random tokens.
func NewCallers(n int) []Caller {
	out := make([]Caller, n)
	for i := range out {
		b := make([]byte, 12)
		rand.Read(b)
		out[i] = Caller{Name: fmt.Sprintf("caller-%03d", i), Token: "tok-" + hex.EncodeToString(b)}
	}
	return out
}

// APIKeys formats callers as the example server's API_KEYS.
func APIKeys(callers []Caller) string {
	var b strings.Builder
	for i, c := range callers {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(c.Name + ":" + c.Token)
	}
	return b.String()
}

// ClusterConfig describes the servers StartCluster runs.
type ClusterConfig struct {
	// Bin is the example server's binary, with the gatecount command beside
	// it (see Build). Required.
	Bin string
	// Dir holds the servers' logs and the SQLite file. Required.
	Dir string
	// Servers is how many servers to run; 0 means 2.
	Servers int
	// Store is where they count; "" means Memory.
	Store Store
	// DatabaseURL is PostgreSQL's URL; "" means DefaultPostgresURL.
	DatabaseURL string
	// RedisURL is Redis's URL; "" means DefaultRedisURL.
	RedisURL string
	// Budget is RATE_LIMIT_EXECUTE_PER_MINUTE; 0 means 30.
	Budget int
	// Callers become API_KEYS. Required.
	Callers []Caller
	// Secret is GATECOUNT_SECRET; "" means a fresh NewSecret.
	Secret string
	// Env adds variables to every server's environment, as KEY=VALUE.
	Env []string
}

// Cluster is a set of example servers sharing one configuration.
type Cluster struct {
	Servers []*Server
	// Env is the environment every server was started with.
	Env []string
}

// StartCluster prepares the store (migrating PostgreSQL and SQLite), starts
// the servers on free loopback ports and returns once each answers GET
// /health. On error, the servers it started are stopped.
func StartCluster(ctx context.Context, c ClusterConfig) (*Cluster, error) {
	if c.Bin == "" || c.Dir == "" || len(c.Callers) == 0 {
		return nil, fmt.Errorf("%w: Bin, Dir and Callers are required", ErrUsage)
	}
	if c.Servers <= 0 {
		c.Servers = 2
	}
	if c.Store == "" {
		c.Store = Memory
	}
	if c.Budget <= 0 {
		c.Budget = 30
	}
	if c.Secret == "" {
		c.Secret = NewSecret()
	}
	env := []string{
		"ADDR=127.0.0.1:0",
		"API_KEYS=" + APIKeys(c.Callers),
		"RATE_LIMIT_EXECUTE_PER_MINUTE=" + strconv.Itoa(c.Budget),
		"RATE_LIMIT_HEALTH_PER_MINUTE=100000",
		"GATECOUNT_SECRET=" + c.Secret,
	}
	switch c.Store {
	case Memory:
		env = append(env, "RATE_LIMIT_STORE=memory")
	case Postgres:
		if c.DatabaseURL == "" {
			c.DatabaseURL = DefaultPostgresURL
		}
		if err := migrate(ctx, c.Bin, c.DatabaseURL); err != nil {
			return nil, err
		}
		env = append(env, "DATABASE_URL="+c.DatabaseURL)
	case SQLite:
		path := filepath.Join(c.Dir, "limits.db")
		if err := migrate(ctx, c.Bin, "sqlite:"+path); err != nil {
			return nil, err
		}
		env = append(env, "DATABASE_URL=sqlite:"+path)
	case Redis:
		if c.RedisURL == "" {
			c.RedisURL = DefaultRedisURL
		}
		env = append(env, "RATE_LIMIT_STORE_URL="+c.RedisURL)
	default:
		return nil, fmt.Errorf("%w: unknown store %q", ErrUsage, c.Store)
	}
	env = append(env, c.Env...)
	cl := &Cluster{Env: env}
	for i := range c.Servers {
		s, err := Start(ctx, c.Bin, env, filepath.Join(c.Dir, fmt.Sprintf("server-%d.log", i+1)))
		if err != nil {
			cl.Close()
			return nil, fmt.Errorf("server %d: %w", i+1, err)
		}
		s.Name = fmt.Sprintf("server-%d", i+1)
		cl.Servers = append(cl.Servers, s)
	}
	return cl, nil
}

// URLs returns the servers' base URLs, in order.
func (c *Cluster) URLs() []string {
	out := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		out[i] = s.URL
	}
	return out
}

// Close stops every server (see Server.Stop), all at once, and waits for
// them.
func (c *Cluster) Close() error {
	errs := make([]error, len(c.Servers))
	var wg sync.WaitGroup
	for i, s := range c.Servers {
		wg.Go(func() { errs[i] = s.Stop() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// migrate runs "gatecount migrate" on the database url names, with the
// command Build made beside the server bin.
func migrate(ctx context.Context, bin, url string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(filepath.Dir(bin), "gatecount"), "migrate")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("loadtest: gatecount migrate: %w\n%s", err, out)
	}
	return nil
}

// stopGrace is how long Stop waits after SIGTERM before it kills.
const stopGrace = 5 * time.Second

// Server is one running example server process.
type Server struct {
	// Name names the server in reports.
	Name string
	// URL is its base URL, http://127.0.0.1:PORT.
	URL string
	// Log is the path of the file its standard error goes to.
	Log string

	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been waited for
	err  error         // what Wait returned, set before done is closed
}

// Start runs bin with exactly env (nothing of this process's environment),
// its standard error copied to logPath, and returns once it has logged the
// address it listens on and answered GET /health with 200. The process is
// in a process group of its own, so a Ctrl-C meant for the caller does not
// reach it; on Linux it is killed if the caller dies. Stop or Kill it.
func Start(ctx context.Context, bin string, env []string, logPath string) (*Server, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("loadtest: %w", err)
	}
	cmd := exec.Command(bin)
	cmd.Env = env
	cmd.SysProcAttr = sysProcAttr()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("loadtest: %w", err)
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("%w: start %s: %w", ErrServer, bin, err)
	}
	s := &Server{Log: logPath, cmd: cmd, done: make(chan struct{})}
	addr := make(chan string, 1)
	go s.copyLog(stderr, logf, addr)

	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	select {
	case a := <-addr:
		s.URL = "http://" + a
	case <-s.done:
		return nil, fmt.Errorf("%w: exited before listening (%v):\n%s", ErrServer, s.err, s.LogTail(20))
	case <-wait.Done():
		s.Kill()
		return nil, fmt.Errorf("%w: not listening: %w:\n%s", ErrServer, wait.Err(), s.LogTail(20))
	}
	if err := s.waitHealthy(wait); err != nil {
		s.Kill()
		return nil, err
	}
	return s, nil
}

// copyLog copies the server's standard error to logf, sends the address it
// listens on to addr, and reaps the process at EOF. It owns s.done.
func (s *Server) copyLog(r io.Reader, logf *os.File, addr chan<- string) {
	defer close(s.done)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	found := false
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(logf, line)
		// the app's listener, not DEBUG_ADDR's (server=debug)
		if !found && strings.Contains(line, "kind=server-listening") && !strings.Contains(line, "server=debug") {
			if _, a, ok := strings.Cut(line, " addr="); ok {
				a, _, _ = strings.Cut(a, " ")
				found = true
				addr <- a
			}
		}
	}
	io.Copy(logf, r) // a line too long for the scanner: keep the rest
	s.err = s.cmd.Wait()
	logf.Close()
}

func (s *Server) waitHealthy(ctx context.Context) error {
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/health", nil)
		if err != nil {
			return fmt.Errorf("loadtest: %w", err)
		}
		res, err := client.Do(req)
		if err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s/health never answered 200 (last: %v):\n%s", ErrServer, s.URL, err, s.LogTail(20))
		case <-s.done:
			return fmt.Errorf("%w: exited (%v):\n%s", ErrServer, s.err, s.LogTail(20))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Done is closed once the process has exited.
func (s *Server) Done() <-chan struct{} { return s.done }

// Pid returns the process's ID.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Kill kills the process with SIGKILL, at once, and waits for it.
func (s *Server) Kill() error {
	select {
	case <-s.done:
		return nil
	default:
	}
	if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("loadtest: kill %s: %w", s.Name, err)
	}
	<-s.done
	return nil
}

// Stop asks the process to shut down with SIGTERM, kills it if it has not
// exited within 5 seconds, and waits for it. It returns an error when the
// server had to be killed or exited with a failure; a server already gone
// is not an error.
func (s *Server) Stop() error {
	select {
	case <-s.done:
		return nil
	default:
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("loadtest: stop %s: %w", s.Name, err)
	}
	select {
	case <-s.done:
		if s.err != nil {
			return fmt.Errorf("loadtest: %s: %w", s.Name, s.err)
		}
		return nil
	case <-time.After(stopGrace):
		s.Kill()
		return fmt.Errorf("loadtest: %s did not stop within %v of SIGTERM: killed", s.Name, stopGrace)
	}
}

// LogTail returns the last n lines of the server's log.
func (s *Server) LogTail(n int) string {
	b, err := os.ReadFile(s.Log)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
