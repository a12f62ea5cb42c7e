package auth

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-ldap/ldap/v3"
)

// Defaults of an LDAP provider.
const (
	// DefaultLDAPTimeout bounds a verification (the dial, TLS, the binds
	// and searches) when LDAPConfig.Timeout is zero.
	DefaultLDAPTimeout = 5 * time.Second
	// DefaultLDAPConnections is the most verifications in progress at
	// once when LDAPConfig.MaxConnections is zero.
	DefaultLDAPConnections = 8
	// DefaultNegativeCacheTTL is how long a refusal is cached when a
	// provider's negative TTL is zero.
	DefaultNegativeCacheTTL = 30 * time.Second
	// retryInterval is how long a provider that could not reach its
	// server answers Unavailable without trying again, so that a
	// directory or key set that is down costs nothing per request.
	retryInterval = time.Second
)

// LDAPConfig configures an LDAP provider made by [NewLDAP].
type LDAPConfig struct {
	// Name names the provider in logs; "" means "ldap".
	Name string
	// URL is the directory's address: ldaps://host[:port] (TLS from the
	// start) or ldap://host[:port] (with StartTLS, or plain text when
	// InsecurePlaintext allows it). Required.
	URL string
	// StartTLS upgrades an ldap:// connection to TLS before anything is
	// sent; false sends nothing over ldap:// unless InsecurePlaintext.
	StartTLS bool
	// InsecurePlaintext allows an ldap:// URL without StartTLS, which
	// sends passwords in clear: only to a loopback address (tests, a
	// directory on the same host). false refuses such a URL.
	InsecurePlaintext bool
	// TLS configures TLS towards the directory (ldaps://, StartTLS); nil
	// means the system's roots and the URL's host as the server name.
	TLS *tls.Config
	// BindDN and BindPassword are the service account that searches for
	// users; "" binds anonymously for the search.
	BindDN, BindPassword string
	// UserDN is a DN template for a direct bind, "{user}" standing for
	// the user name (escaped as a DN value), as in
	// "uid={user},ou=people,dc=example,dc=org"; "" means search-then-bind
	// with BaseDN and UserFilter.
	UserDN string
	// BaseDN is where users are searched for (the whole subtree);
	// required without UserDN.
	BaseDN string
	// UserFilter is the filter that finds a user, "{user}" standing for
	// the user name (escaped for a filter), as in
	// "(&(objectClass=inetOrgPerson)(uid={user}))": a user it does not
	// find, or finds twice, is refused. With UserDN it is checked on the
	// bound user's own entry; "" means "(objectClass=*)" there, and is
	// an error without UserDN.
	UserFilter string
	// NameAttribute is the user entry's attribute whose value becomes the
	// user name, as "uid", so that a directory whose matching ignores
	// case (or accepts other spellings) still gives one name per user; an
	// entry without it is refused. "" means the name as the client gave
	// it.
	NameAttribute string
	// GroupAttribute is the user entry's attribute that lists the DNs of
	// the user's groups, as "memberOf"; "" reads none.
	GroupAttribute string
	// GroupBaseDN and GroupFilter search for the user's groups, "{dn}"
	// standing for the user's DN and "{user}" for the user name, as in
	// "(&(objectClass=groupOfNames)(member={dn}))", with the service
	// account's rights when there is one (BindDN), else the user's; ""
	// GroupFilter searches none. GroupBaseDN "" means BaseDN.
	GroupBaseDN, GroupFilter string
	// Groups maps a rustle group to the DNs of the directory groups whose
	// members are in it (compared without regard to case); a user's
	// directory groups that no entry names are ignored. nil means no
	// rustle groups.
	Groups map[string][]string
	// Timeout bounds a verification as a whole (the dial, TLS, the binds
	// and searches), and the wait for a free connection slot before it;
	// 0 means DefaultLDAPTimeout.
	Timeout time.Duration
	// MaxConnections bounds the verifications in progress at once, each
	// on a connection of its own; 0 means DefaultLDAPConnections.
	MaxConnections int
	// CacheTTL is how long an accepted verdict is cached; 0 means the
	// Authenticator's CacheTTL. NegativeCacheTTL is how long a refusal
	// is; 0 means DefaultNegativeCacheTTL.
	CacheTTL, NegativeCacheTTL time.Duration
	// Logger receives the directory becoming unreachable (warn),
	// reachable again (info), and refusals for its answers rather than
	// the password (warn), each line naming the provider (provider=Name);
	// nil = discard.
	Logger *slog.Logger
}

// LDAP is a [Provider] that verifies user names and passwords against an
// LDAP directory: search-then-bind with a service account, or a direct
// bind with a DN template. Each verification opens a connection of its
// own, bounded by MaxConnections and the timeouts; the Authenticator's
// cache keeps the directory from being asked per request. The user's
// entry, and with a service account the user's groups, are searched
// with the service account's rights. A directory that cannot be
// reached, or whose service account cannot bind, answers Unavailable,
// and for a second after that answers so without trying; any other
// answer of the directory is a verdict (a refusal when it is an error).
// It takes no tokens. It is safe for concurrent use.
type LDAP struct {
	cfg     LDAPConfig
	name    string
	url     string
	addr    string // host:port to dial
	ldaps   bool   // TLS from the start
	tls     *tls.Config
	slots   chan struct{}
	groups  []groupDN
	log     *slog.Logger
	health  health
	timeout time.Duration
	// answerLogged is when a refusal by errAnswer was last logged
	// (monoNanos); 0 = never.
	answerLogged atomic.Int64
}

// groupDN is a directory group of LDAPConfig.Groups, parsed.
type groupDN struct {
	dn    *ldap.DN
	group string
}

// NewLDAP returns the provider cfg describes, without connecting.
func NewLDAP(cfg LDAPConfig) (*LDAP, error) {
	p := &LDAP{cfg: cfg, name: cfg.Name, log: cfg.Logger, timeout: cfg.Timeout}
	if p.name == "" {
		p.name = "ldap"
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.timeout == 0 {
		p.timeout = DefaultLDAPTimeout
	}
	n := cfg.MaxConnections
	if n == 0 {
		n = DefaultLDAPConnections
	}
	if p.timeout < 0 || n < 0 || cfg.CacheTTL < 0 || cfg.NegativeCacheTTL < 0 {
		return nil, fmt.Errorf("auth: ldap %s: negative timeout, connections or cache TTL", p.name)
	}
	p.slots = make(chan struct{}, n)
	u, err := url.Parse(cfg.URL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("auth: ldap %s: url %q: want ldaps://host[:port] or ldap://host[:port]", p.name, cfg.URL)
	}
	switch {
	case u.Scheme == "ldaps" && cfg.StartTLS:
		return nil, fmt.Errorf("auth: ldap %s: start_tls is for ldap:// URLs; ldaps:// is TLS already", p.name)
	case u.Scheme == "ldaps", u.Scheme == "ldap" && cfg.StartTLS:
	case u.Scheme == "ldap" && cfg.InsecurePlaintext:
		if !loopbackHost(u.Hostname()) {
			return nil, fmt.Errorf("auth: ldap %s: insecure_plaintext is only for a loopback address, not %q", p.name, u.Hostname())
		}
	case u.Scheme == "ldap":
		return nil, fmt.Errorf("auth: ldap %s: ldap:// sends passwords in clear: use ldaps://, start_tls = true, or insecure_plaintext = true for a loopback address", p.name)
	default:
		return nil, fmt.Errorf("auth: ldap %s: url %q: the scheme is neither ldaps nor ldap", p.name, cfg.URL)
	}
	p.url = cfg.URL
	p.ldaps = u.Scheme == "ldaps"
	port := u.Port()
	if port == "" {
		port = "389"
		if p.ldaps {
			port = "636"
		}
	}
	p.addr = net.JoinHostPort(u.Hostname(), port)
	if cfg.TLS != nil {
		p.tls = cfg.TLS.Clone()
	} else {
		p.tls = &tls.Config{}
	}
	if p.tls.ServerName == "" {
		p.tls.ServerName = u.Hostname()
	}
	if cfg.UserDN == "" && (cfg.BaseDN == "" || cfg.UserFilter == "") {
		return nil, fmt.Errorf("auth: ldap %s: give user_dn (direct bind) or base_dn and user_filter (search then bind)", p.name)
	}
	if cfg.UserDN != "" && !strings.Contains(cfg.UserDN, "{user}") {
		return nil, fmt.Errorf("auth: ldap %s: user_dn %q has no {user}", p.name, cfg.UserDN)
	}
	if cfg.UserFilter != "" && cfg.UserDN == "" && !strings.Contains(cfg.UserFilter, "{user}") {
		return nil, fmt.Errorf("auth: ldap %s: user_filter %q has no {user}", p.name, cfg.UserFilter)
	}
	if cfg.GroupFilter != "" && cfg.GroupBaseDN == "" && cfg.BaseDN == "" {
		return nil, fmt.Errorf("auth: ldap %s: group_filter needs group_base_dn or base_dn", p.name)
	}
	for group, dns := range cfg.Groups {
		for _, s := range dns {
			dn, err := ldap.ParseDN(s)
			if err != nil {
				return nil, fmt.Errorf("auth: ldap %s: group %s: DN %q: %w", p.name, group, s, err)
			}
			p.groups = append(p.groups, groupDN{dn, group})
		}
	}
	return p, nil
}

// loopbackHost reports whether host is "localhost" or a loopback IP.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// Name returns the provider's name.
func (p *LDAP) Name() string { return p.name }

// VerifyToken refuses every token: a directory takes passwords.
func (p *LDAP) VerifyToken([]byte) Verdict { return Verdict{} }

// errRefused is a verification that ended in a refusal.
var errRefused = errors.New("refused")

// errAnswer is a refusal because the directory answered an operation
// with a result that is no verdict on the credentials (No Such Object
// for a base, Insufficient Access, ...): a configuration or access
// control to fix, which is logged.
var errAnswer = fmt.Errorf("the directory's answer: %w", errRefused)

// answerLogInterval is the least time between two log lines of refusals
// by errAnswer, so that a misconfiguration refusing every user logs
// about once per interval.
const answerLogInterval = 10 * time.Second

// answered wraps err, the failure of the operation what, as a refusal
// (errAnswer) when it is an answer of the directory: a result code other
// than those saying it cannot answer now. A transport failure (the
// connection failed, closed or timed out, a reply could not be read) and
// Busy, Unavailable and Time Limit Exceeded are the directory not being
// asked: they are wrapped as they are, which makes the provider
// Unavailable.
func answered(what string, err error) error {
	var le *ldap.Error
	if !errors.As(err, &le) {
		return fmt.Errorf("%s: %w", what, err)
	}
	switch c := le.ResultCode; {
	case c == ldap.LDAPResultBusy, c == ldap.LDAPResultUnavailable, c == ldap.LDAPResultTimeLimitExceeded,
		c >= ldap.LDAPResultServerDown && c <= ldap.LDAPResultUnknownType, // the client API's own codes
		c >= ldap.ErrorNetwork:
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: %w: %w", what, errAnswer, err)
}

// logAnswer logs err, a refusal by errAnswer, unless one was logged in
// the last answerLogInterval.
func (p *LDAP) logAnswer(err error) {
	now := monoNanos()
	last := p.answerLogged.Load()
	if last != 0 && now-last < int64(answerLogInterval) || !p.answerLogged.CompareAndSwap(last, now) {
		return
	}
	p.log.LogAttrs(context.Background(), slog.LevelWarn, "auth: ldap: a user was refused for the directory's answer, not the password: check the provider's DNs and filters and the directory's access control",
		slog.String("provider", p.name), slog.String("error", err.Error()))
}

// VerifyPassword checks user and pass against the directory. An empty
// password is refused unasked: a directory takes it as an anonymous bind.
func (p *LDAP) VerifyPassword(user, pass []byte) Verdict {
	refused := Verdict{TTL: p.negativeTTL()}
	if len(pass) == 0 || !validName(user) {
		return refused
	}
	if !p.health.ready() {
		return Verdict{Outcome: Unavailable}
	}
	timer := time.NewTimer(p.timeout)
	select {
	case p.slots <- struct{}{}:
		timer.Stop()
	case <-timer.C:
		p.log.Warn("auth: ldap: every connection slot is busy", slog.String("provider", p.name),
			slog.Int("max_connections", cap(p.slots)))
		return Verdict{Outcome: Unavailable}
	}
	defer func() { <-p.slots }()
	name, groups, err := p.verify(string(user), string(pass))
	switch {
	case err == nil:
		p.health.up(p.log, p.name, "ldap")
		return Verdict{User: name, Groups: groups, Outcome: Accepted, TTL: p.cfg.CacheTTL}
	case errors.Is(err, errRefused):
		p.health.up(p.log, p.name, "ldap")
		if errors.Is(err, errAnswer) {
			p.logAnswer(err)
		}
		return refused
	default:
		p.health.down(p.log, p.name, "ldap", err)
		return Verdict{Outcome: Unavailable}
	}
}

func (p *LDAP) negativeTTL() time.Duration {
	if p.cfg.NegativeCacheTTL > 0 {
		return p.cfg.NegativeCacheTTL
	}
	return DefaultNegativeCacheTTL
}

// validName reports whether a user name may be looked up: not empty, no
// control character, no ':'.
func validName(user []byte) bool {
	if len(user) == 0 {
		return false
	}
	for _, c := range user {
		if c < ' ' || c == 0x7f || c == ':' {
			return false
		}
	}
	return true
}

// verify runs one verification on a connection of its own. It returns
// the user and its rustle groups, an error wrapping errRefused for
// credentials the directory refuses or an operation it answers with an
// error (errAnswer), or another error when the directory could not be
// asked or its service account could not bind.
func (p *LDAP) verify(user, pass string) (string, []string, error) {
	c, err := p.dial()
	if err != nil {
		return "", nil, err
	}
	defer c.Close()
	var dn string
	var entry *ldap.Entry // nil when nothing was read of it
	if p.cfg.UserDN == "" {
		if entry, err = p.search(c, user); err != nil {
			return "", nil, err
		}
		dn = entry.DN
		if err := p.bindUser(c, dn, pass); err != nil {
			return "", nil, err
		}
	} else {
		dn = strings.ReplaceAll(p.cfg.UserDN, "{user}", ldap.EscapeDN(user))
		if err := p.bindUser(c, dn, pass); err != nil {
			return "", nil, err
		}
		if entry, err = p.ownEntry(c, dn, user); err != nil {
			return "", nil, err
		}
	}
	name := user
	if p.cfg.NameAttribute != "" {
		if name = entry.GetEqualFoldAttributeValue(p.cfg.NameAttribute); !validName([]byte(name)) {
			return "", nil, fmt.Errorf("entry %s has no usable %s: %w", dn, p.cfg.NameAttribute, errRefused)
		}
	}
	var dirGroups []string
	if entry != nil {
		dirGroups = p.attrGroups(entry)
	}
	if p.cfg.GroupFilter != "" {
		if p.cfg.UserDN == "" && p.cfg.BindDN != "" {
			// The user is bound now; the groups are searched with the
			// service account's rights, as the user's entry was read.
			if err := c.Bind(p.cfg.BindDN, p.cfg.BindPassword); err != nil {
				return "", nil, fmt.Errorf("bind again as the service account %s: %w", p.cfg.BindDN, err)
			}
		}
		more, err := p.searchGroups(c, dn, user)
		if err != nil {
			return "", nil, err
		}
		dirGroups = append(dirGroups, more...)
	}
	return name, p.mapGroups(dirGroups), nil
}

// dial connects to the directory, with TLS from the start or by
// StartTLS as configured, and binds the service account if there is one
// and the provider searches. The connection's socket has a deadline of
// the timeout from now: the whole verification, TLS handshakes included,
// ends within it.
func (p *LDAP) dial() (*ldap.Conn, error) {
	d := &net.Dialer{Timeout: p.timeout}
	nc, err := d.Dial("tcp", p.addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", p.url, err)
	}
	nc.SetDeadline(time.Now().Add(p.timeout))
	if p.ldaps {
		tc := tls.Client(nc, p.tls)
		if err := tc.Handshake(); err != nil {
			nc.Close()
			return nil, fmt.Errorf("TLS handshake with %s: %w", p.url, err)
		}
		nc = tc
	}
	c := ldap.NewConn(nc, p.ldaps)
	c.Start()
	c.SetTimeout(p.timeout)
	if p.cfg.StartTLS {
		if err := c.StartTLS(p.tls); err != nil {
			c.Close()
			return nil, fmt.Errorf("start TLS with %s: %w", p.url, err)
		}
	}
	if p.cfg.UserDN == "" && p.cfg.BindDN != "" {
		if err := c.Bind(p.cfg.BindDN, p.cfg.BindPassword); err != nil {
			c.Close()
			return nil, fmt.Errorf("bind as the service account %s: %w", p.cfg.BindDN, err)
		}
	}
	return c, nil
}

// search finds the user's entry with UserFilter under BaseDN, with its
// NameAttribute and GroupAttribute.
func (p *LDAP) search(c *ldap.Conn, user string) (*ldap.Entry, error) {
	filter := strings.ReplaceAll(p.cfg.UserFilter, "{user}", ldap.EscapeFilter(user))
	res, err := c.Search(p.request(p.cfg.BaseDN, ldap.ScopeWholeSubtree, filter))
	switch {
	case ldap.IsErrorWithCode(err, ldap.LDAPResultSizeLimitExceeded):
		return nil, fmt.Errorf("user filter matches more than one entry: %w", errRefused)
	case err != nil:
		return nil, answered("search "+p.cfg.BaseDN+" for a user", err)
	case len(res.Entries) != 1:
		return nil, fmt.Errorf("user filter matches %d entries: %w", len(res.Entries), errRefused)
	}
	return res.Entries[0], nil
}

// ownEntry reads, after a direct bind, the user's entry, checking that
// it matches UserFilter, with its NameAttribute and GroupAttribute; it
// reads nothing (nil) when none of them is configured.
func (p *LDAP) ownEntry(c *ldap.Conn, dn, user string) (*ldap.Entry, error) {
	if p.cfg.UserFilter == "" && p.cfg.GroupAttribute == "" && p.cfg.NameAttribute == "" {
		return nil, nil
	}
	filter := "(objectClass=*)"
	if p.cfg.UserFilter != "" {
		filter = strings.ReplaceAll(p.cfg.UserFilter, "{user}", ldap.EscapeFilter(user))
	}
	res, err := c.Search(p.request(dn, ldap.ScopeBaseObject, filter))
	switch {
	case ldap.IsErrorWithCode(err, ldap.LDAPResultNoSuchObject):
		return nil, fmt.Errorf("no entry %s: %w", dn, errRefused)
	case err != nil:
		return nil, answered("read "+dn, err)
	case len(res.Entries) != 1:
		return nil, fmt.Errorf("entry does not match the user filter: %w", errRefused)
	}
	return res.Entries[0], nil
}

// request returns a search for the entries under (or at) base matching
// filter, asking for NameAttribute and GroupAttribute (or no attribute).
func (p *LDAP) request(base string, scope int, filter string) *ldap.SearchRequest {
	var attrs []string
	for _, a := range []string{p.cfg.NameAttribute, p.cfg.GroupAttribute} {
		if a != "" {
			attrs = append(attrs, a)
		}
	}
	if attrs == nil {
		attrs = []string{"1.1"} // no attributes (RFC 4511 section 4.5.1.8)
	}
	secs := int((p.timeout + time.Second - 1) / time.Second)
	return ldap.NewSearchRequest(base, scope, ldap.NeverDerefAliases, 2, secs, false, filter, attrs, nil)
}

// attrGroups returns the values of e's GroupAttribute.
func (p *LDAP) attrGroups(e *ldap.Entry) []string {
	if p.cfg.GroupAttribute == "" {
		return nil
	}
	return e.GetEqualFoldAttributeValues(p.cfg.GroupAttribute)
}

// searchGroups returns the DNs of the groups GroupFilter finds for the
// user, with the rights of the identity c is bound as.
func (p *LDAP) searchGroups(c *ldap.Conn, dn, user string) ([]string, error) {
	base := p.cfg.GroupBaseDN
	if base == "" {
		base = p.cfg.BaseDN
	}
	filter := strings.NewReplacer("{dn}", ldap.EscapeFilter(dn), "{user}", ldap.EscapeFilter(user)).Replace(p.cfg.GroupFilter)
	secs := int((p.timeout + time.Second - 1) / time.Second)
	res, err := c.Search(ldap.NewSearchRequest(base, ldap.ScopeWholeSubtree, ldap.NeverDerefAliases, 0, secs, false,
		filter, []string{"1.1"}, nil))
	if err != nil {
		return nil, answered("search "+base+" for groups", err)
	}
	dns := make([]string, len(res.Entries))
	for i, e := range res.Entries {
		dns[i] = e.DN
	}
	return dns, nil
}

// bindUser binds as dn with pass: the directory's verdict on the
// password. Invalid credentials, a DN that does not exist or does not
// parse, and a directory unwilling to bind the user (a disabled or
// locked account) are refusals; any other answer of the directory is a
// refusal by errAnswer (see [answered]).
func (p *LDAP) bindUser(c *ldap.Conn, dn, pass string) error {
	err := c.Bind(dn, pass)
	switch {
	case err == nil:
		return nil
	case ldap.IsErrorAnyOf(err, ldap.LDAPResultInvalidCredentials, ldap.LDAPResultUnwillingToPerform,
		ldap.LDAPResultInsufficientAccessRights, ldap.LDAPResultInappropriateAuthentication,
		ldap.LDAPResultInvalidDNSyntax, ldap.LDAPResultNoSuchObject):
		return fmt.Errorf("bind: %w", errRefused)
	}
	return answered("bind as the user", err)
}

// mapGroups returns the rustle groups of the directory groups dns.
func (p *LDAP) mapGroups(dns []string) []string {
	if len(p.groups) == 0 || len(dns) == 0 {
		return nil
	}
	var out []string
	for _, s := range dns {
		dn, err := ldap.ParseDN(s)
		if err != nil {
			continue
		}
		for _, g := range p.groups {
			if g.dn.EqualFold(dn) {
				out = append(out, g.group)
			}
		}
	}
	return SortGroups(out)
}

// health tracks whether a provider's server answered lately: after a
// failure it is not asked again for retryInterval, and each change
// between reachable and not is logged once.
type health struct {
	downUntil atomic.Int64 // monotonic nanoseconds since epoch; 0 = up
	isDown    atomic.Bool
}

// ready reports whether the server may be asked now.
func (h *health) ready() bool {
	until := h.downUntil.Load()
	return until == 0 || monoNanos() >= until
}

// down notes a failure to reach the server, logging it when the server
// was up.
func (h *health) down(log *slog.Logger, name, kind string, err error) {
	h.downUntil.Store(monoNanos() + int64(retryInterval))
	if !h.isDown.Swap(true) {
		log.LogAttrs(context.Background(), slog.LevelWarn, "auth: "+kind+": unavailable: credentials it would check are answered 503",
			slog.String("provider", name), slog.String("error", err.Error()))
	}
}

// up notes an answer from the server, logging it when it was down.
func (h *health) up(log *slog.Logger, name, kind string) {
	if h.isDown.Load() && h.isDown.Swap(false) {
		h.downUntil.Store(0)
		log.LogAttrs(context.Background(), slog.LevelInfo, "auth: "+kind+": available again", slog.String("provider", name))
	}
}

// epoch is the origin of monoNanos.
var epoch = time.Now()

// monoNanos returns the monotonic nanoseconds since the process started.
func monoNanos() int64 { return int64(time.Since(epoch)) }
