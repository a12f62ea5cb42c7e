package auth

import (
	"slices"
	"time"
)

// Outcome is what checking credentials concluded.
type Outcome uint8

// The outcomes of a check.
const (
	// Refused: the credentials are wrong, unknown, expired or malformed.
	Refused Outcome = iota
	// Accepted: the credentials name a user.
	Accepted
	// Unavailable: no provider accepted the credentials and one that
	// might have could not be asked (a directory or key set
	// unreachable). The client should try again later; it is neither let
	// in nor told its credentials are wrong.
	Unavailable
)

// String returns o's name: "refused", "accepted" or "unavailable".
func (o Outcome) String() string {
	switch o {
	case Accepted:
		return "accepted"
	case Unavailable:
		return "unavailable"
	}
	return "refused"
}

// Result is what [Authenticator.Authenticate] concluded of a
// Proxy-Authorization value.
type Result struct {
	// User is the user the credentials name when Outcome is Accepted;
	// "" otherwise.
	User string
	// Groups are the rustle groups the user's provider mapped it to
	// (directory groups, token claims), sorted; nil = none. The slice is
	// shared by every result of the same verdict: never modify it.
	Groups []string
	// Outcome says whether the credentials were accepted.
	Outcome Outcome
}

// Verdict is a [Provider]'s answer on one set of credentials.
type Verdict struct {
	// User and Groups are as in [Result]: the user when Outcome is
	// Accepted and its rustle groups (sorted, never modified after).
	User   string
	Groups []string
	// Outcome is the provider's conclusion.
	Outcome Outcome
	// TTL is how long the verdict may be cached: 0 means the
	// Authenticator's Config.CacheTTL, a negative TTL means not at all
	// (a token whose key is not known yet). An Unavailable verdict is
	// never cached.
	TTL time.Duration
}

// Provider is a source of identities tried by an Authenticator besides
// its own users (see Config.Providers): a directory or a token issuer.
// Its methods are called on a cache miss only, one at a time per
// credential, and must return within a bounded time (the provider's own
// timeouts): an Authenticator has no context to cancel them with. They
// are called concurrently for different credentials. A provider logs
// its own failures (once per change between reachable and not, not per
// call) and never logs a password or a token.
type Provider interface {
	// Name names the provider in logs.
	Name() string
	// VerifyPassword checks a user name and password, as a Basic
	// credential or a SOCKS5 login gives them. user is not empty.
	// Neither slice may be kept after the call.
	VerifyPassword(user, pass []byte) Verdict
	// VerifyToken checks a bearer token (Proxy-Authorization: Bearer).
	// A provider that takes no tokens refuses it. token may not be kept
	// after the call.
	VerifyToken(token []byte) Verdict
}

// Local stands in Config.Providers for the Authenticator's own users
// (Config.Files and Config.Users), at the place in the order where they
// are tried. Its methods refuse everything: only an Authenticator knows
// the users it stands for.
var Local Provider = localMarker{}

type localMarker struct{}

func (localMarker) Name() string                       { return "local" }
func (localMarker) VerifyPassword(_, _ []byte) Verdict { return Verdict{} }
func (localMarker) VerifyToken([]byte) Verdict         { return Verdict{} }

// SortGroups returns groups sorted and without repeats, reusing its
// array; providers call it on the groups they return.
func SortGroups(groups []string) []string {
	if len(groups) == 0 {
		return nil
	}
	slices.Sort(groups)
	return slices.Clip(slices.Compact(groups))
}

// resolveChain asks each provider of chain in turn with ask until one
// accepts; the local marker asks a's own users. It returns the accepting
// verdict, or a refusal, cached for the shortest TTL of the refusals,
// or, when a provider was unavailable and none accepted, Unavailable
// (not cached).
func (a *Authenticator) resolveChain(ask func(p Provider) Verdict) entry {
	unavailable := false
	negTTL := a.cache.ttl
	for _, p := range a.chain {
		v := ask(p)
		ttl := v.TTL
		if ttl == 0 {
			ttl = a.cache.ttl
		}
		switch v.Outcome {
		case Accepted:
			return entry{user: v.User, groups: v.Groups, outcome: Accepted, local: p == Local, ttl: ttl}
		case Unavailable:
			unavailable = true
		default:
			negTTL = min(negTTL, ttl)
		}
	}
	if unavailable {
		return entry{outcome: Unavailable}
	}
	return entry{outcome: Refused, ttl: negTTL}
}
