package demo

import (
	"net/http"

	"github.com/gatecount/gatecount/middleware/challenge"
)

// signInPage is the demo's sign-in form. It posts with fetch; when the
// guard answers with a proof-of-work challenge, it solves it with the
// served script (gatecountSolve) and posts again with the answer in the
// form's hidden input.
const signInPage = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in</title>
<script src="/login/pow.js" defer></script>
</head>
<body>
<form id="signin" method="post" action="/login">
<label>Username <input name="username" autocomplete="username" required></label>
<label>Password <input name="password" type="password" autocomplete="current-password" required></label>
<input type="hidden" name="` + challenge.AnswerField + `">
<button>Sign in</button>
<p id="status" role="status"></p>
</form>
<script>
document.getElementById("signin").addEventListener("submit", async function (e) {
  e.preventDefault();
  const form = e.target, status = document.getElementById("status");
  form.elements["` + challenge.AnswerField + `"].value = "";
  for (let tries = 0; tries < 2; tries++) {
    const res = await fetch(form.action, {method: "POST", body: new URLSearchParams(new FormData(form))});
    if (res.status !== 429) {
      status.textContent = res.ok ? "Signed in." : "Wrong username or password.";
      return;
    }
    const problem = await res.json();
    const c = problem.challenge;
    if (!c || c.scheme !== "pow" || typeof gatecountSolve !== "function") {
      status.textContent = "Too many attempts: try again in " + res.headers.get("Retry-After") + " s.";
      return;
    }
    status.textContent = "Checking this browser…";
    await new Promise(r => setTimeout(r, 0)); // let the status show
    form.elements["` + challenge.AnswerField + `"].value = gatecountSolve(c.token, c.bits).answer;
  }
  status.textContent = "Too many attempts: try again later.";
});
</script>
</body>
</html>
`

// SignInPageHandler serves the sign-in page (GET /login).
func (a *App) SignInPageHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Write([]byte(signInPage))
	})
}

// ChallengeScriptHandler serves the proof of work's solver (GET
// /login/pow.js) when RATE_LIMIT_LOGIN_CHALLENGE is pow, and 404
// otherwise.
func (a *App) ChallengeScriptHandler() http.Handler {
	if p, ok := a.Config.SignIn.Challenge.(*challenge.ProofOfWork); ok {
		return p.Script()
	}
	return http.NotFoundHandler()
}
