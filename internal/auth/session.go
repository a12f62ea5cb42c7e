package auth

import "strings"

// sessionMark separates a user name from its session key, as scraping
// fleets write it: "alice-session-42".
const sessionMark = "-session-"

// SessionKey returns the session key a user name carries: what follows
// the last "-session-" in it ("42" of "alice-session-42"), or "" when it
// has none (or nothing follows the mark). A session key asks that the
// session's connections share what is chosen per session: one source
// address from an egress prefix (package dialer), one parent of a hashed
// route. A name with a session key that is not itself a configured user
// logs in with its base user's password (see SessionUser; the gate tries
// it when the whole name is refused). It does not allocate.
func SessionKey(user string) string {
	i := strings.LastIndex(user, sessionMark)
	if i <= 0 {
		return ""
	}
	return user[i+len(sessionMark):]
}

// SessionUser returns the user name without its session key ("alice" of
// "alice-session-42"), or user itself when it carries none: the name that
// per-user settings ([[egress.rules]]) match besides the whole name. It
// does not allocate.
func SessionUser(user string) string {
	if SessionKey(user) == "" {
		return user
	}
	return user[:strings.LastIndex(user, sessionMark)]
}
