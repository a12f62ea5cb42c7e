package gate

import (
	"github.com/rustle-proxy/rustle/internal/auth"
)

// A user name with a session key ("alice-session-42": the part after the
// last "-session-", see auth.SessionKey) that is no configured user
// itself authenticates as its base user (auth.SessionUser: "alice") with
// that user's password. The whole name stays the request's user (Grant
// User): the access log shows it, the access rules and routes match it
// (hash-session hashes it, hash-user its base), and the egress source
// keeps one address per session. What counts per user counts the base
// user, the account: per-user connection limits and rate, per-user
// metrics, and revocation on reload. The mark is auth's "-session-"
// whatever a route's session_separator says (which only splits a name for
// hash-user).

// account returns the account user authenticated as: user itself, or the
// base user of a name with a session key that is no configured user.
func (p *Policy) account(user string) string {
	if auth.SessionKey(user) == "" || p.Auth == nil || p.Auth.Has(user) {
		return user
	}
	return auth.SessionUser(user)
}

// checkSessionUser checks the password pass of user, a name with a
// session key that the authenticator refused as a whole, as its base
// user's (through every identity provider, as a whole name is); on
// success it returns the base user's result with the whole name as its
// User. Never called for a name without a session key.
func (p *Policy) checkSessionUser(user, pass []byte) (auth.Result, bool) {
	name := string(user)
	base := auth.SessionUser(name)
	if base == name {
		return auth.Result{}, false
	}
	r := p.Auth.AuthenticateUserPassword([]byte(base), pass)
	if r.Outcome != auth.Accepted {
		return auth.Result{}, false
	}
	r.User = name
	return r, true
}
