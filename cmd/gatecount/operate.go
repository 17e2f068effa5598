package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gatecount/gatecount/config"
	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store"

	// RATE_LIMIT_STORE_URL=redis://… opens through the Redis store's driver;
	// the PostgreSQL and SQLite stores are linked for migrate.
	_ "github.com/gatecount/gatecount/store/redis"
)

// operateTimeout bounds one unlock, show or reset command.
const operateTimeout = 30 * time.Second

// defaultSignIn is the name of the sign-in guard -account acts on when
// -limiter is not given, the name middleware.SignIn gives by default.
const defaultSignIn = "login"

// request is what an unlock, show or reset command was asked.
type request struct {
	cmd     string
	account string
	limiter string
	key     string
	ips     []netip.Addr
	json    bool
	// normalize keys the account as the guard does; nil for -key.
	normalize func(string) (string, error)
}

// normalizers are the values of -normalize: how the guard keys accounts.
var normalizers = map[string]func(string) (string, error){
	"username": keyfunc.NormalizeUsername,
	"email":    keyfunc.NormalizeEmail,
	"phone":    keyfunc.NormalizePhone,
}

// ambiguous reports the keys account has under user-name and e-mail
// normalisation when both accept it and they differ: the command cannot
// tell which the guard counts, so -normalize must say.
func ambiguous(account string) (user, email string, ok bool) {
	user, errU := keyfunc.NormalizeUsername(account)
	email, errE := keyfunc.NormalizeEmail(account)
	return user, email, errU == nil && errE == nil && user != email
}

// addrs is the -ip flag: a client address, given once per address.
type addrs struct{ list *[]netip.Addr }

// String returns the addresses given, comma-separated (flag.Value).
func (a addrs) String() string {
	if a.list == nil {
		return ""
	}
	var s []string
	for _, ip := range *a.list {
		s = append(s, ip.String())
	}
	return strings.Join(s, ",")
}

// Set adds the address v, refusing anything but one IPv4 or IPv6 address
// (flag.Value).
func (a addrs) Set(v string) error {
	ip, err := netip.ParseAddr(strings.TrimSpace(v))
	if err != nil {
		return fmt.Errorf("want an IPv4 or IPv6 address: %w", err)
	}
	*a.list = append(*a.list, ip)
	return nil
}

// parseRequest reads the flags of an unlock, show or reset command. It
// returns an error, already written to stderr with the command's usage, for
// flags that do not make a command.
func parseRequest(cmd string, args []string, stderr io.Writer) (request, error) {
	q := request{cmd: cmd}
	var norm string
	fs := flag.NewFlagSet("gatecount "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	if cmd != "reset" {
		fs.StringVar(&q.account, "account", "", "the account, as users type it at sign-in")
		fs.Var(addrs{&q.ips}, "ip", "a client address whose budgets to "+cmd+" with the account's (repeatable)")
		fs.StringVar(&norm, "normalize", "", "how the guard normalises accounts: username (as SignIn by default), email or phone")
	}
	fs.StringVar(&q.limiter, "limiter", "", "the limiter's name: with -account, a sign-in guard (default "+defaultSignIn+"); with -key, any limiter")
	if cmd != "unlock" {
		fs.StringVar(&q.key, "key", "", "the key, as the limiter counts it (with -limiter)")
	}
	fs.BoolVar(&q.json, "json", false, "write JSON, for scripts")
	if err := fs.Parse(args); err != nil {
		return q, err
	}
	var err error
	switch {
	case fs.NArg() > 0:
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case q.account != "" && q.key != "":
		err = errors.New("give -account or -key, not both")
	case q.account == "" && q.key == "" && cmd == "unlock":
		err = errors.New("-account is required")
	case q.account == "" && q.key == "" && cmd == "show":
		err = errors.New("give -account NAME, or -limiter NAME -key KEY")
	case q.key == "" && cmd == "reset":
		err = errors.New("-limiter and -key are required")
	case q.key != "" && q.limiter == "":
		err = errors.New("-key needs -limiter: the name of the limiter that counts it")
	case q.key != "" && len(q.ips) > 0:
		err = errors.New("-ip goes with -account")
	case q.key != "" && norm != "":
		err = errors.New("-normalize goes with -account")
	case norm != "" && normalizers[norm] == nil:
		err = fmt.Errorf("-normalize %q: want username, email or phone", norm)
	}
	if user, email, amb := ambiguous(q.account); err == nil && norm == "" && amb {
		err = fmt.Errorf("-account %q is %q as a user name and %q as an e-mail address: give -normalize username or -normalize email, as the guard normalises", q.account, user, email)
	}
	if err != nil {
		fmt.Fprintf(stderr, "gatecount %s: %v\n", cmd, err)
		fs.Usage()
		return q, err
	}
	if q.account != "" && q.limiter == "" {
		q.limiter = defaultSignIn
	}
	if q.account != "" {
		q.normalize = normalizers[cmp.Or(norm, "username")]
	}
	return q, nil
}

// operate runs an unlock, show or reset command and returns the exit
// status.
func operate(ctx context.Context, cmd string, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	q, err := parseRequest(cmd, args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	lookup := func(k string) (string, bool) { v := getenv(k); return v, v != "" }
	c, err := config.Parse(lookup)
	vars := config.NewVars(lookup)
	budgets := vars.SignInBudgets()
	if err = errors.Join(err, vars.Err()); err != nil {
		fmt.Fprintf(stderr, "gatecount %s: %v\n", cmd, err)
		return 2
	}
	if c.Store == config.Memory {
		fmt.Fprintf(stderr, "gatecount %s: no shared store: set DATABASE_URL or RATE_LIMIT_STORE_URL (and GATECOUNT_SECRET) as the app has them; the memory store lives in each app process\n", cmd)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, operateTimeout)
	defer cancel()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opened, err := config.Open(ctx, c, store.Options{Logger: log})
	if err != nil {
		fmt.Fprintf(stderr, "gatecount %s: cannot open the limit store: %v\n", cmd, err)
		return 1
	}
	defer opened.Close()
	if err := opened.Store.CheckSecret(ctx); err != nil {
		if errors.Is(err, store.ErrSecretMismatch) {
			fmt.Fprintf(stderr, "gatecount %s: GATECOUNT_SECRET is not the secret the app counts under: %v\n", cmd, err)
		} else {
			fmt.Fprintf(stderr, "gatecount %s: cannot reach the limit store: %v\n", cmd, err)
		}
		return 1
	}
	h, err := opened.Store.Handle(q.limiter + ":")
	if err != nil {
		fmt.Fprintf(stderr, "gatecount %s: -limiter %q: %v\n", cmd, q.limiter, err)
		return 2
	}
	if q.account != "" {
		o := middleware.SignInOptions{
			Name:                q.limiter,
			AccountIPFailures:   budgets.AccountIPFailures,
			AccountFailures:     budgets.AccountFailures,
			IPAttempts:          budgets.IPAttempts,
			NetworkAttempts:     budgets.NetworkAttempts,
			ConsecutiveFailures: budgets.ConsecutiveFailures,
			IP:                  c.IP(),
			Normalize:           q.normalize,
			Device:              middleware.DeviceOptions{Off: true}, // a device's keys are its own
			Spray:               middleware.SprayOptions{Off: true},  // nor does it read a password's
			Unavailable:         limiter.Deny,                        // nothing to count alone, and no fleet to join
			Logger:              log,
		}
		g, err := middleware.SignIn(h, o)
		if err != nil {
			fmt.Fprintf(stderr, "gatecount %s: %v\n", cmd, err)
			return 2
		}
		defer g.Close()
		return report(cmd, accountCommand(ctx, g, q, stdout), stderr)
	}
	// Any limiter: its budget is not known here, so the count is read
	// under the widest one.
	l, err := limiter.New(h, limiter.Options{Name: q.limiter, Budget: limiter.Budget{Limit: limiter.MaxLimit, Window: limiter.MaxWindow}, Unavailable: limiter.Deny, Logger: log})
	if err != nil {
		fmt.Fprintf(stderr, "gatecount %s: %v\n", cmd, err)
		return 2
	}
	defer l.Close()
	return report(cmd, keyCommand(ctx, l, h, q, stdout), stderr)
}

// report writes err, if any, and returns the exit status.
func report(cmd string, err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	if errors.Is(err, store.ErrUnavailable) {
		fmt.Fprintf(stderr, "gatecount %s: cannot reach the limit store: %v\n", cmd, err)
	} else {
		fmt.Fprintf(stderr, "gatecount %s: %v\n", cmd, err)
	}
	return 1
}

// accountCommand unlocks or shows an account on the sign-in guard g.
func accountCommand(ctx context.Context, g *middleware.SignInGuard, q request, stdout io.Writer) error {
	if q.cmd == "unlock" {
		if err := g.Unlock(ctx, q.account, q.ips...); err != nil {
			return err
		}
		s, err := g.Show(ctx, q.account)
		if err != nil {
			return err
		}
		if q.json {
			return json.NewEncoder(stdout).Encode(unlocked{Limiter: q.limiter, Account: s.Key, Unlocked: true, Addresses: addrStrings(q.ips)})
		}
		fmt.Fprintf(stdout, "unlocked account %s on %s", s.Key, q.limiter)
		if len(q.ips) > 0 {
			fmt.Fprintf(stdout, ", and from %s", strings.Join(addrStrings(q.ips), ", "))
		}
		fmt.Fprintln(stdout, "; every instance sees it within about a second")
		return nil
	}
	s, err := g.Show(ctx, q.account, q.ips...)
	if err != nil {
		return err
	}
	return writeStanding(stdout, q, s)
}

// unlocked is the JSON answer of unlock.
type unlocked struct {
	Limiter   string   `json:"limiter"`
	Account   string   `json:"account"`
	Unlocked  bool     `json:"unlocked"`
	Addresses []string `json:"addresses"`
}

// budgetJSON is one budget in the JSON answer of show -account.
type budgetJSON struct {
	Budget  string     `json:"budget"`
	Address string     `json:"address,omitempty"`
	Used    int        `json:"used"`
	Limit   int        `json:"limit"`
	Reset   *time.Time `json:"reset,omitempty"`
	Refused bool       `json:"refused"`
}

// writeStanding writes what show -account read.
func writeStanding(w io.Writer, q request, s middleware.Standing) error {
	if q.json {
		out := struct {
			Limiter string       `json:"limiter"`
			Account string       `json:"account"`
			Refused bool         `json:"refused"`
			Budgets []budgetJSON `json:"budgets"`
		}{Limiter: q.limiter, Account: s.Key, Refused: s.Refused, Budgets: []budgetJSON{}}
		for _, b := range s.Budgets {
			j := budgetJSON{Budget: b.Budget, Used: b.Used, Limit: b.Limit, Refused: b.Refused}
			if b.Addr.IsValid() {
				j.Address = b.Addr.String()
			}
			if !b.Reset.IsZero() {
				r := b.Reset.UTC()
				j.Reset = &r
			}
			out.Budgets = append(out.Budgets, j)
		}
		return json.NewEncoder(w).Encode(out)
	}
	state := "not refused"
	if s.Refused {
		state = "REFUSED from every address (but known devices)"
	}
	fmt.Fprintf(w, "account %s on %s: %s\n", s.Key, q.limiter, state)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BUDGET\tADDRESS\tUSED\tLIMIT\tRESETS\tREFUSED")
	for _, b := range s.Budgets {
		addr := "-"
		if b.Addr.IsValid() {
			addr = b.Addr.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", b.Budget, addr, b.Used, b.Limit, resets(b.Reset), yes(b.Refused))
	}
	return tw.Flush()
}

// keyCommand shows or resets one key of the limiter l.
//
// On a Redis Cluster a limiter of one key per request keeps its keys spread
// over the masters (store.Handle.Spread) and a guard does not, so the key
// is looked for, and reset, in both places: first as a guard keeps it,
// then, once h is spread, as a spread limiter does.
func keyCommand(ctx context.Context, l *limiter.Limiter, h *store.Handle, q request, stdout io.Writer) error {
	if q.cmd == "reset" {
		err := l.Reset(ctx, q.key)
		if err == nil && h.Spread() > 1 {
			err = l.Reset(ctx, q.key)
		}
		if err != nil {
			return err
		}
		if q.json {
			return json.NewEncoder(stdout).Encode(struct {
				Limiter string `json:"limiter"`
				Key     string `json:"key"`
				Reset   bool   `json:"reset"`
			}{q.limiter, q.key, true})
		}
		fmt.Fprintf(stdout, "reset key %q of %s; every instance sees it within about a second\n", q.key, q.limiter)
		return nil
	}
	d, err := peekKey(ctx, l, q.key)
	if err == nil && h.Spread() > 1 {
		var spread limiter.Decision
		if spread, err = peekKey(ctx, l, q.key); err == nil && spread.RemainingOf(0) < d.RemainingOf(0) {
			d = spread
		}
	}
	if err != nil {
		return err
	}
	count := limiter.MaxLimit - d.RemainingOf(0)
	reset := d.ResetOf(0)
	if q.json {
		out := struct {
			Limiter string     `json:"limiter"`
			Key     string     `json:"key"`
			Count   int        `json:"count"`
			Reset   *time.Time `json:"reset,omitempty"`
		}{Limiter: q.limiter, Key: q.key, Count: count}
		if !reset.IsZero() {
			r := reset.UTC()
			out.Reset = &r
		}
		return json.NewEncoder(stdout).Encode(out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LIMITER\tKEY\tCOUNT\tRESETS")
	fmt.Fprintf(tw, "%s\t%q\t%d\t%s\n", q.limiter, q.key, count, resets(reset))
	return tw.Flush()
}

// peekKey is l's Peek of key, a store that cannot answer an error.
func peekKey(ctx context.Context, l *limiter.Limiter, key string) (limiter.Decision, error) {
	d, err := l.Peek(ctx, key)
	if err == nil && d.Unavailable {
		err = d.Cause
	}
	return d, err
}

// resets says when a window ends.
func resets(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%s (in %s)", t.UTC().Format(time.RFC3339), max(time.Until(t), 0).Round(time.Second))
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func addrStrings(ips []netip.Addr) []string {
	out := []string{}
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	return out
}
