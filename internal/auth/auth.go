package auth

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// DefaultRealm is the realm used when Config.Realm is empty.
const DefaultRealm = "rustle"

// DefaultCacheTTL is the verdict cache TTL used when Config.CacheTTL is zero.
const DefaultCacheTTL = 5 * time.Minute

// DefaultCacheSize is the verdict cache size used when Config.CacheSize is zero.
const DefaultCacheSize = 10000

// maxBcryptPassword is the longest password bcrypt hashes in full; it
// ignores bytes after the 72nd, so a longer candidate is refused outright
// for a bcrypt user instead of matching on its first 72 bytes.
const maxBcryptPassword = 72

// User is one configured user: exactly one of Password (plain text, compared
// in constant time) or Bcrypt (a bcrypt hash) is set.
type User struct {
	Name     string // user name; not empty, no ':' and no control characters
	Password string // plain-text password; "" when Bcrypt is set
	Bcrypt   string // bcrypt hash ($2a$, $2b$ or $2y$); "" when Password is set
}

// Config configures an Authenticator.
type Config struct {
	// Realm is the realm sent in the Proxy-Authenticate challenge.
	// "" means DefaultRealm ("rustle"). It must not contain control characters.
	Realm string
	// Files are htpasswd files read by New. Only bcrypt lines ($2a$, $2b$,
	// $2y$) are accepted; any other format is an error naming the file and
	// line. Blank lines and # comments are skipped. nil means none.
	Files []string
	// Users are inline users, in addition to those in Files; a name given
	// in both, or twice, is an error. nil means none.
	Users []User
	// CacheTTL is how long a verdict on a Proxy-Authorization value is
	// cached. 0 means DefaultCacheTTL (5m); negative is an error.
	CacheTTL time.Duration
	// CacheSize is the most verdicts cached. 0 means DefaultCacheSize
	// (10000); negative is an error.
	CacheSize int
	// Providers are the sources of identities tried, in order, for each
	// credential the cache has no verdict on, until one accepts it;
	// [Local] stands for the users of Files and Users. nil means
	// []Provider{Local}. A list without Local while Files or Users are
	// set is an error.
	Providers []Provider
}

// account is a configured user, ready for checking.
type account struct {
	name    string
	nameSum [32]byte // SHA-256 of name
	hash    []byte   // bcrypt hash; nil for a plain-password user
	passSum [32]byte // SHA-256 of the plain password; zero for a bcrypt user
}

// Authenticator checks Basic Proxy-Authorization values against a fixed set
// of users. It is safe for concurrent use. Create one with New, or a view
// of one restricted to some of its users with [Authenticator.Only].
type Authenticator struct {
	challenge string
	accounts  []account // read-only after New
	dummy     []byte    // bcrypt hash of a random password, compared on a miss for an unknown or plain user
	salt      [16]byte  // random prefix of hashed cache keys
	cache     *cache
	// only holds the names of the users a view made by Only accepts; nil
	// accepts every user. Read-only.
	only map[string]struct{}
	// chain is Config.Providers, or just Local; read-only.
	chain []Provider
	// tokens says a provider of chain other than Local may take a bearer
	// token: without one a Bearer value is refused unchecked.
	tokens bool

	// now and compare are time.Now and bcrypt.CompareHashAndPassword, set
	// by New and replaced only by tests before first use.
	now     func() time.Time
	compare func(hash, password []byte) error
}

// New returns an Authenticator for cfg, reading cfg.Files. Errors from a
// file name it, and the line for a bad line (as a *ParseError).
func New(cfg Config) (*Authenticator, error) {
	realm := cfg.Realm
	if realm == "" {
		realm = DefaultRealm
	}
	if hasControl(realm) {
		return nil, fmt.Errorf("auth: realm %q contains a control character", realm)
	}
	ttl := cfg.CacheTTL
	switch {
	case ttl == 0:
		ttl = DefaultCacheTTL
	case ttl < 0:
		return nil, fmt.Errorf("auth: negative cache TTL %v", ttl)
	}
	size := cfg.CacheSize
	switch {
	case size == 0:
		size = DefaultCacheSize
	case size < 0:
		return nil, fmt.Errorf("auth: negative cache size %d", size)
	}

	type origin struct {
		file string
		line int
	}
	where := make(map[string]origin)
	var accounts []account
	for _, file := range cfg.Files {
		fus, err := readHtpasswd(file)
		if err != nil {
			return nil, err
		}
		for _, fu := range fus {
			if prev, dup := where[fu.Name]; dup {
				return nil, fmt.Errorf("auth: htpasswd %s:%d: user %q already defined in %s:%d",
					fu.file, fu.line, fu.Name, prev.file, prev.line)
			}
			where[fu.Name] = origin{fu.file, fu.line}
			accounts = append(accounts, newAccount(fu.User))
		}
	}
	for i, u := range cfg.Users {
		if err := checkUser(u); err != nil {
			return nil, fmt.Errorf("auth: user %d (%q): %w", i+1, u.Name, err)
		}
		if prev, dup := where[u.Name]; dup {
			if prev.file == "" {
				return nil, fmt.Errorf("auth: user %q defined twice in the inline users", u.Name)
			}
			return nil, fmt.Errorf("auth: inline user %q also defined in %s:%d", u.Name, prev.file, prev.line)
		}
		where[u.Name] = origin{}
		accounts = append(accounts, newAccount(u))
	}

	chain := cfg.Providers
	if chain == nil {
		chain = []Provider{Local}
	}
	if len(accounts) > 0 && !slices.Contains(chain, Local) {
		return nil, errors.New("auth: users are configured but the providers leave them out")
	}
	tokens := false
	for i, p := range chain {
		if p == nil {
			return nil, fmt.Errorf("auth: provider %d is nil", i+1)
		}
		tokens = tokens || p != Local
	}
	dummy, err := dummyHash(accounts)
	if err != nil {
		return nil, err
	}
	a := &Authenticator{
		challenge: "Basic realm=" + quote(realm),
		accounts:  accounts,
		dummy:     dummy,
		cache:     newCache(size, ttl),
		chain:     slices.Clone(chain),
		tokens:    tokens,
		now:       time.Now,
		compare:   bcrypt.CompareHashAndPassword,
	}
	if _, err := rand.Read(a.salt[:]); err != nil {
		return nil, fmt.Errorf("auth: read random salt: %w", err)
	}
	return a, nil
}

func readHtpasswd(file string) ([]fileUser, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("auth: open htpasswd %s: %w", file, err)
	}
	defer f.Close()
	return parseHtpasswd(f, file)
}

// checkUser validates an inline user.
func checkUser(u User) error {
	if err := checkName(u.Name); err != nil {
		return err
	}
	switch {
	case u.Password != "" && u.Bcrypt != "":
		return errors.New("both password and bcrypt set")
	case u.Password == "" && u.Bcrypt == "":
		return errors.New("neither password nor bcrypt set")
	case u.Bcrypt != "":
		return checkBcrypt(u.Bcrypt)
	}
	return nil
}

func newAccount(u User) account {
	acc := account{name: u.Name, nameSum: sha256.Sum256([]byte(u.Name))}
	if u.Bcrypt != "" {
		acc.hash = []byte(u.Bcrypt)
	} else {
		acc.passSum = sha256.Sum256([]byte(u.Password))
	}
	return acc
}

// dummyHash returns a bcrypt hash of a random password at the cost most
// configured bcrypt hashes use (the higher on a tie), or bcrypt.MinCost when
// there are none, so that a miss for an unknown user costs about what a
// miss for a known one does.
func dummyHash(accounts []account) ([]byte, error) {
	counts := make(map[int]int)
	cost, best := bcrypt.MinCost, 0
	for _, acc := range accounts {
		if acc.hash == nil {
			continue
		}
		c, err := strconv.Atoi(string(acc.hash[4:6])) // checked by checkBcrypt
		if err != nil {
			continue
		}
		counts[c]++
		if n := counts[c]; n > best || (n == best && c > cost) {
			cost, best = c, n
		}
	}
	var pw [16]byte
	if _, err := rand.Read(pw[:]); err != nil {
		return nil, fmt.Errorf("auth: read random dummy password: %w", err)
	}
	h, err := bcrypt.GenerateFromPassword(pw[:], cost)
	if err != nil {
		return nil, fmt.Errorf("auth: hash dummy password at cost %d: %w", cost, err)
	}
	return h, nil
}

// quote returns s as an HTTP quoted-string, escaping '"' and '\'.
func quote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

// Only returns a view of a that accepts only the users named in names:
// the credentials of any other user of a are refused as an unknown user's
// are. The view shares a's users, verdict cache (so bcrypt still runs once
// per credential, whichever view asks) and challenge. Names a does not know
// are left out; check them with [Authenticator.Has] first. A nil or empty
// names gives a view that accepts nobody.
func (a *Authenticator) Only(names []string) *Authenticator {
	v := *a
	v.only = make(map[string]struct{}, len(names))
	for _, n := range names {
		if a.Has(n) {
			v.only[n] = struct{}{}
		}
	}
	return &v
}

// Allows reports whether a lets in the user named name when something else
// than a password vouched for the name (a client certificate): every name
// unless a is a view made by [Authenticator.Only], which allows the names
// it accepts. A nil Authenticator allows every name.
func (a *Authenticator) Allows(name string) bool {
	if a == nil || a.only == nil {
		return true
	}
	_, ok := a.only[name]
	return ok
}

// HasProviders reports whether a tries a provider besides its own users
// (see Config.Providers); false for a nil Authenticator.
func (a *Authenticator) HasProviders() bool { return a != nil && a.tokens }

// Challenge returns the Proxy-Authenticate header value, for example
// `Basic realm="rustle"`, with the realm quoted and escaped.
func (a *Authenticator) Challenge() string { return a.challenge }

// Len returns the number of users a accepts.
func (a *Authenticator) Len() int {
	if a.only != nil {
		return len(a.only)
	}
	return len(a.accounts)
}

// Has reports whether a accepts a user named name; a nil Authenticator
// knows nobody.
func (a *Authenticator) Has(name string) bool {
	return a != nil && a.lookup([]byte(name)) != nil && a.Allows(name)
}

// Check verifies a Proxy-Authorization header value such as
// "Basic dXNlcjpwYXNz"; the scheme is matched case-insensitively. It returns
// the user name and true when the credentials are valid, and "" and false
// otherwise (also when a provider was unavailable): see
// [Authenticator.Authenticate], which tells those apart and gives the
// user's groups.
func (a *Authenticator) Check(value []byte) (user string, ok bool) {
	r := a.Authenticate(value)
	return r.User, r.Outcome == Accepted
}

// Authenticate verifies a Proxy-Authorization header value: Basic
// credentials (RFC 7617), checked against the providers of
// Config.Providers in order (the configured users for [Local]), or a
// bearer token ("Bearer" and a token68), checked against the providers
// other than Local. Schemes are matched case-insensitively.
//
// Verdicts, refusals included, are cached by the salted SHA-256 of value
// for the TTL each carries (Config.CacheTTL for the configured users), so
// that bcrypt, a directory or a token's signature is asked once per
// distinct value, not per request; a hit allocates nothing. Values longer
// than MaxValueLen and malformed values are refused without asking anyone
// and are not cached; neither is Unavailable. A view made by
// [Authenticator.Only] refuses the configured users it leaves out after
// the same work; users of other providers are not its to restrict.
// Authenticate is safe for concurrent use.
func (a *Authenticator) Authenticate(value []byte) Result {
	if len(value) == 0 || len(value) > MaxValueLen {
		return Result{}
	}
	key := a.key(value)
	if v, hit := a.cache.shard(&key).get(&key, a.now()); hit {
		return a.accepted(v.entry)
	}
	if name, pass, ok := parseBasic(value); ok {
		return a.accepted(a.cache.resolve(&key, a.now, func() entry {
			return a.resolveChain(func(p Provider) Verdict {
				if p == Local {
					return a.VerifyPassword(name, pass)
				}
				return p.VerifyPassword(name, pass)
			})
		}))
	}
	if !a.tokens {
		return Result{}
	}
	t, ok := bearerToken(value)
	if !ok {
		return Result{}
	}
	token := bytes.Clone(t) // value must not escape to the providers: it may be on the caller's stack
	return a.accepted(a.cache.resolve(&key, a.now, func() entry {
		return a.resolveChain(func(p Provider) Verdict {
			if p == Local {
				return Verdict{}
			}
			return p.VerifyToken(token)
		})
	}))
}

// accepted returns a verdict of the shared cache as a gives it: refused
// for a configured user a view leaves out.
func (a *Authenticator) accepted(e entry) Result {
	if e.outcome == Accepted && e.local && !a.Allows(e.user) {
		return Result{}
	}
	if e.outcome != Accepted {
		return Result{Outcome: e.outcome}
	}
	return Result{User: e.user, Groups: e.groups, Outcome: Accepted}
}

// CheckUserPassword verifies a user name and password given apart, as in
// SOCKS5 username/password authentication (RFC 1929). It returns what
// [Authenticator.Check] returns for the same pair; see
// [Authenticator.AuthenticateUserPassword].
func (a *Authenticator) CheckUserPassword(user, pass []byte) (string, bool) {
	r := a.AuthenticateUserPassword(user, pass)
	return r.User, r.Outcome == Accepted
}

// AuthenticateUserPassword verifies a user name and password given
// apart, as in SOCKS5 username/password authentication (RFC 1929). It
// returns what [Authenticator.Authenticate] returns for the Basic value
// "Basic " + base64(user ":" pass), which it builds on the stack:
// verdicts are shared with Authenticate through the same cache, a hit
// allocates nothing, and a miss does the same work. An empty user name
// or one containing ':' (no configured user has one), and a pair too
// long to encode within 1024 bytes (a SOCKS5 pair is at most 511), are
// refused without asking anyone and are not cached. It is safe for
// concurrent use.
func (a *Authenticator) AuthenticateUserPassword(user, pass []byte) Result {
	const prefix = "Basic "
	n := len(user) + 1 + len(pass)
	if len(user) == 0 || bytes.IndexByte(user, ':') >= 0 || len(prefix)+basicEncoding.EncodedLen(n) > maxPairLen {
		return Result{}
	}
	var raw [maxPairLen]byte // n < maxPairLen, as its encoding is longer
	copy(raw[:], user)
	raw[len(user)] = ':'
	copy(raw[len(user)+1:], pass)
	var value [maxPairLen]byte
	copy(value[:], prefix)
	basicEncoding.Encode(value[len(prefix):], raw[:n])
	r := a.Authenticate(value[:len(prefix)+basicEncoding.EncodedLen(n)])
	clear(raw[:n])
	return r
}

// maxPairLen bounds the Basic value AuthenticateUserPassword builds.
const maxPairLen = 1024

// Name returns "local", the name of an Authenticator's own users as a
// provider.
func (a *Authenticator) Name() string { return "local" }

// VerifyPassword checks a user name and password against a's own users
// (not its cache, nor its other providers), running exactly one bcrypt
// comparison, as a cache miss of Check does: a's users as a [Provider] of
// another Authenticator, whose verdicts are cached for a's CacheTTL.
func (a *Authenticator) VerifyPassword(user, pass []byte) Verdict {
	name, ok := a.verify(user, pass)
	if !ok {
		return Verdict{TTL: a.cache.ttl}
	}
	return Verdict{User: name, Outcome: Accepted, TTL: a.cache.ttl}
}

// VerifyToken refuses every token: a's own users have passwords.
func (a *Authenticator) VerifyToken([]byte) Verdict { return Verdict{} }

// key returns the cache key of value: the SHA-256 of a.salt followed by
// value, or for a value longer than shortValue (a bearer token) of a.salt
// with its first byte inverted followed by the SHA-256 of value, so that
// the buffer on the stack stays small and no short value has a long one's
// key.
func (a *Authenticator) key(value []byte) cacheKey {
	var buf [len(a.salt) + shortValue]byte
	n := copy(buf[:], a.salt[:])
	if len(value) > shortValue {
		buf[0] = ^buf[0]
		sum := sha256.Sum256(value)
		n += copy(buf[n:], sum[:])
	} else {
		n += copy(buf[n:], value)
	}
	return sha256.Sum256(buf[:n])
}

// shortValue is the longest value key hashes with the salt in one pass.
const shortValue = 1024

// lookup returns the account named name, or nil. It compares the SHA-256 of
// name with every account's in constant time, so its time depends only on
// the number of accounts.
func (a *Authenticator) lookup(name []byte) *account {
	sum := sha256.Sum256(name)
	idx := -1
	for i := range a.accounts {
		eq := subtle.ConstantTimeCompare(a.accounts[i].nameSum[:], sum[:])
		idx = subtle.ConstantTimeSelect(eq, i, idx)
	}
	if idx < 0 {
		return nil
	}
	return &a.accounts[idx]
}

// verify checks a user name and password, running exactly one bcrypt
// comparison: against the user's hash for a bcrypt user, against the dummy
// hash otherwise.
func (a *Authenticator) verify(name, pass []byte) (string, bool) {
	acc := a.lookup(name)
	switch {
	case acc != nil && acc.hash != nil:
		if len(pass) > maxBcryptPassword {
			_ = a.compare(a.dummy, pass[:maxBcryptPassword])
			return "", false
		}
		if a.compare(acc.hash, pass) != nil {
			return "", false
		}
		return acc.name, true
	case acc != nil:
		_ = a.compare(a.dummy, truncate(pass))
		sum := sha256.Sum256(pass)
		if subtle.ConstantTimeCompare(sum[:], acc.passSum[:]) != 1 {
			return "", false
		}
		return acc.name, true
	default:
		_ = a.compare(a.dummy, truncate(pass))
		return "", false
	}
}

func truncate(pass []byte) []byte {
	if len(pass) > maxBcryptPassword {
		return pass[:maxBcryptPassword]
	}
	return pass
}

// HashPassword returns a bcrypt hash of password at bcrypt.DefaultCost, for
// the hash field of an htpasswd line ("user:" + hash). The password must be
// 1 to 72 bytes long.
func HashPassword(password string) (string, error) {
	if password == "" {
		return "", errors.New("auth: hash password: empty password")
	}
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
	if err != nil {
		return "", fmt.Errorf("auth: hash password: %w", err)
	}
	return string(h), nil
}
