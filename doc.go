// Package gatecount is rate-limiting middleware for net/http. It throttles
// sign-ins, password resets, codes sent and any route, counting attempts
// exactly. It counts in memory on one instance, or in a shared store
// (PostgreSQL, SQLite, Redis) when several instances must agree.
//
// # The short form
//
// One line limits a route, or a chi or gorilla/mux route group, per client
// address, counting in this process's memory:
//
//	r.Use(gatecount.LimitByIP(100, time.Minute))                  // chi, gorilla/mux
//	mux.Handle("GET /", gatecount.LimitByIP(100, time.Minute)(h)) // net/http
//
// With several instances, counts must be shared: [FromEnv] opens the store the
// environment names and limits per caller, per address, on that store. The
// program imports the store it uses, which links its driver:
//
//	import _ "github.com/gatecount/gatecount/store/postgres" // or store/sqlite, store/redis
//
//	limits, err := gatecount.FromEnv(ctx)
//	if err != nil {
//		log.Fatal(err)
//	}
//	r.With(authenticate, limits.PerCaller("api", 30, time.Minute)).Post("/api", api)
//
// A limiter that cannot be built (a budget out of range, a name taken) never
// lets requests through unlimited: its routes answer 500 and [Limits.Err]
// returns why.
//
// # Every limiter a route needs
//
// A [Limits] builds each kind in one call ([Limits.PerIP],
// [Limits.PerCaller], [Limits.By], [Limits.SignIn], [Limits.Send]), each
// on a store handle of its own.
// Each kind has one policy for when the store cannot answer. An option
// (Unavailable, or a [RouteOption]) may set another.
//
//	kind            built by                  store down  why
//	per address     Limits.PerIP, LimitByIP   Allow       health checks and cheap routes keep answering
//	per caller      Limits.PerCaller          Local       real work stays limited; an outage stops no caller
//	by any key      Limits.By                 Deny        nothing is known of the route: fail closed
//	sign-in         Limits.SignIn             Local       guessing stays limited per instance; users sign in
//	one-time code   Limits.SignIn, Code       Local       as sign-in
//	send            Limits.Send               Local       sending mail or codes stays limited per instance
//
// Allow lets requests through uncounted while the store is down, Local
// counts them in this process's memory, and Deny answers 503 (see
// [limiter.Policy]). [New] builds a Limits on a store of the program's,
// [FromEnv] on the store the environment names, and [InMemory] is
// LimitByIP's, in this process's memory.
//
// # Which package for what
//
//   - middleware: the full form of each kind, with every option. New limits
//     a route by one key. SignIn guards a sign-in form: failures per
//     account and address, per account, attempts per address, and known
//     devices; with Code, a one-time code. Send guards a route that sends
//     mail or codes, per destination and address, silently by default.
//   - limiter: budgets counted on a store, for code that is not HTTP.
//   - keyfunc: what a request is counted by: client address behind trusted
//     proxies, caller ID, form and JSON fields, account normalisation.
//   - config: the environment (store selection, GATECOUNT_SECRET, bound,
//     trusted proxies, the guards' budgets) read in one place, and the
//     store it chooses opened.
//   - store: the contract every store honours, and the guard (deadline,
//     in-flight bound, breaker) every store gets. The stores:
//     store/memory, store/postgres, store/sqlite, store/redis;
//     store/storetest proves your own.
//   - metrics: decisions and store calls published through expvar;
//     metrics/prometheus and metrics/otel (modules of their own) for
//     Prometheus and OpenTelemetry.
//   - cmd/gatecount: migrate a PostgreSQL database
//     (go run github.com/gatecount/gatecount/cmd/gatecount migrate).
//
// # Examples
//
// examples/stdlib serves the demo on net/http's ServeMux: per-caller and
// per-IP routes, a sign-in form, password resets and one-time codes.
// examples/chi and examples/gorilla, modules of their own, build its core
// limiters with FromEnv's Limits and mount them on their routers.
// examples/outside is an app of its own module using the short forms.
// README.md and the guides in docs/ walk through each. RELIABILITY.md lists
// every promise with the test that proves it.
package gatecount
