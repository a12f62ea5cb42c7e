// Package acl decides which requests rustle serves: an ordered list of
// allow and deny rules, the first matching rule wins, as in Squid's
// http_access. A rule matches on the client's address, the user and the
// groups the user belongs to, the destination host (exact name, "*.suffix",
// ".suffix", IP address or CIDR), the destination port, the method and the
// protocol; every criterion a rule leaves empty matches anything, and the
// entries of one criterion are alternatives.
//
// When no rule matches, the policy's default applies: deny unless the
// configuration says otherwise, as in Squid. Whoever writes rules has said
// what to allow, and a request nobody thought of is the one an open relay
// is abused with; a deny list ends with a catch-all allow rule or sets the
// default to allow. A configuration without rules builds no Policy at all,
// and then every request that passes authentication and the
// private-destination guard is served: denying everything would make the
// default configuration useless, and the guard and the refusal of
// unauthenticated non-loopback listeners already keep it from being an open
// relay.
//
// A [Policy] is compiled once from its [Config]; [Policy.Decide] and
// [Policy.Check] allocate nothing and are safe for concurrent use.
//
// Rules with IP or CIDR host entries match the address a host name resolves
// to: for a request that names a host, [Policy.Decide] may return a pending
// [Decision], which the dialer completes for each resolved address with
// [Decision.Permit] before connecting to it.
//
// A rule can be rolled out before it is enforced: a "report" rule, and
// every deny rule (and a default of deny) of a policy in audit mode,
// lets the requests it would refuse through, and the decision names it
// in [Decision.WouldDeny]. The private-destination guard, which is the
// dialer's, is never in audit mode.
//
// Besides its own entries, a rule's hosts and clients can be [List]s
// loaded from files and URLs (package lists), of a million entries and
// more: a hashed table of names, looked up once for a name and once for
// each domain it is under, and sorted address ranges.
//
// Rules with a sni_hosts criterion match the server_name of the TLS
// ClientHello a tunnel's client sends (see package sni), which rustle
// reads after the tunnel is answered and before it is dialled: for a
// tunnel whose hello is not read yet ([Request.HelloRead] false),
// [Policy.Decide] returns a decision pending on it
// ([Decision.PendingSNI]) when the first rule that could match has such
// a criterion; the tunnel then reads its hello and is decided again
// with it. A rule may also set the SNI check's mode for the requests it
// allows ([Decision.SNIMode]).
package acl

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/rustle-proxy/rustle/internal/sni"
)

// Protocol is the protocol a request arrived with; a rule's protocols
// criterion is a set of them.
type Protocol uint16

// The protocols a rule can name, with their configuration names.
const (
	// HTTP is a forwarded HTTP request ("http").
	HTTP Protocol = 1 << iota
	// Connect is an HTTP CONNECT tunnel ("connect").
	Connect
	// WebSocket is an HTTP WebSocket handshake ("websocket").
	WebSocket
	// SOCKS5 is a SOCKS5 CONNECT ("socks5").
	SOCKS5
	// SOCKS5UDP is a datagram of a SOCKS5 UDP association ("socks5-udp").
	SOCKS5UDP
	// SOCKS4 is a SOCKS4 or SOCKS4a CONNECT ("socks4").
	SOCKS4
	// UDP is a CONNECT-UDP flow (RFC 9298, over HTTP/3): its target
	// when the flow is asked for, and each datagram's destination ("udp").
	UDP
	// HTTPS is a request inside a tunnel whose TLS rustle intercepts
	// (see package intercept): an https URL ("https").
	HTTPS
	// Transparent is a connection the kernel redirected to a transparent
	// listener ("transparent"): each HTTP request on it, or the TLS or
	// TCP tunnel it becomes, to its original destination.
	Transparent
)

var protocolNames = []struct {
	p    Protocol
	name string
}{
	{HTTP, "http"}, {Connect, "connect"}, {WebSocket, "websocket"},
	{SOCKS5, "socks5"}, {SOCKS5UDP, "socks5-udp"}, {SOCKS4, "socks4"}, {UDP, "udp"},
	{HTTPS, "https"},
	{Transparent, "transparent"},
}

// HelloProtocols are the tunnels whose client's first bytes rustle can
// read before it dials (a ClientHello), and so the only ones it can
// intercept: HTTP CONNECT on every version and SOCKS CONNECT. A
// WebSocket or a CONNECT-UDP flow carries none, and a transparent
// listener's TLS connections are always spliced.
const HelloProtocols = Connect | SOCKS5 | SOCKS4

// ProtocolNames lists the protocol names a rule accepts, in order.
func ProtocolNames() []string {
	names := make([]string, len(protocolNames))
	for i, pn := range protocolNames {
		names[i] = pn.name
	}
	return names
}

// String returns the configuration name of p, or "" for a value that is
// not one protocol.
func (p Protocol) String() string {
	for _, pn := range protocolNames {
		if pn.p == p {
			return pn.name
		}
	}
	return ""
}

// ParseProtocol returns the Protocol named s ("http", "connect",
// "websocket", "socks5", "socks5-udp", "socks4", "udp", "https" or
// "transparent").
func ParseProtocol(s string) (Protocol, error) {
	for _, pn := range protocolNames {
		if pn.name == s {
			return pn.p, nil
		}
	}
	return 0, fmt.Errorf("acl: protocol %q is not one of %s", s, strings.Join(ProtocolNames(), ", "))
}

// Actions a rule takes.
const (
	// Allow lets the requests the rule matches through.
	Allow = "allow"
	// Deny refuses them.
	Deny = "deny"
	// Report is a deny rule in audit mode: the requests it would refuse
	// are let through, and the decision names the rule in WouldDeny.
	Report = "report"
)

// DefaultRule is the rule name a [Decision] carries when no rule matched.
const DefaultRule = "default"

// Rule is one rule as configured: a name, an action and the criteria, each
// a list of alternatives in the syntax of the configuration file; an empty
// list matches anything.
type Rule struct {
	// Name names the rule in logs; "" means "rules[N]", N its index from 0.
	Name string
	// Action is Allow, Deny or Report.
	Action string
	// Clients are client addresses: IP addresses or CIDR prefixes.
	Clients []string
	// ClientLists are lists of client addresses (ClientList), whose
	// entries are alternatives beside Clients; nil means none. A list
	// that never loaded matches no client in an allow rule and every
	// client in a deny or report rule.
	ClientLists []*List
	// Users and Groups are the rule's [Who], matched by a [Selector]
	// as every table that selects users matches them. Users are user
	// names; Every ("*") is every authenticated user.
	Users []string
	// Groups are names of groups defined in Config.Groups or named in
	// Config.ProviderGroups; a user who is a member of one (listed in
	// Config.Groups, or given it by Request.Groups) matches, as if listed
	// in Users.
	Groups []string
	// Hosts are destinations: a name ("example.com", ASCII, matched
	// without regard to case), "*.example.com" (names under example.com, not
	// example.com itself), ".example.com" (example.com and the names under
	// it), an IP address or a CIDR prefix (matched against IP literals
	// and the addresses names resolve to).
	Hosts []string
	// HostLists are lists of destinations (HostList), whose entries are
	// alternatives beside Hosts; nil means none. A list that never loaded
	// matches no destination in an allow rule and every destination in a
	// deny or report rule.
	HostLists []*List
	// Ports are destination ports ("443") and ranges ("8000-8999").
	Ports []string
	// Methods are request methods, compared exactly ("GET", "CONNECT").
	// A SOCKS CONNECT has the method "CONNECT"; a SOCKS5 UDP datagram has
	// none, so a rule with methods never matches it.
	Methods []string
	// Protocols are protocol names (see [ParseProtocol]).
	Protocols []string
	// Paths are request paths (see [ParsePath]): "/v1/models" matches
	// that path exactly, "/v1/*" every path that begins with "/v1/". They
	// are matched against the path of an HTTP request's target
	// (Request.Path) without its query, its dot segments resolved and
	// its percent-encoded unreserved characters decoded, as an origin
	// reads it; a request without a path (a tunnel, SOCKS, UDP) matches
	// none.
	Paths []string
	// SNIHosts are server names, in the syntax of Hosts without its IP
	// and CIDR entries (a server_name is a name): they match the
	// server_name of the ClientHello a tunnel's client sent
	// (Request.SNI), and nothing on a request that has none (plain HTTP,
	// WebSocket, UDP, a tunnel whose first bytes were no ClientHello or
	// one without a server_name). Before a tunnel's hello is read, a rule
	// with them leaves the decision pending (see [Decision.PendingSNI]).
	SNIHosts []string
	// AllowPrivate lists private destination ranges (CIDR prefixes) that
	// requests this rule allows may reach despite the private-destination
	// guard. Only for allow rules; empty means none.
	AllowPrivate []string
	// SNI is the SNI check's mode (see package sni: "off", "log",
	// "match") for the tunnels this rule allows; "" means the listener's.
	// Only for allow rules.
	SNI string
}

// Config is a policy as configured.
type Config struct {
	// Rules are tried in order; the first that matches decides.
	Rules []Rule
	// Groups maps a group name to its members' user names.
	Groups map[string][]string
	// ProviderGroups names the groups identity providers put users in
	// (Request.Groups), which rules may name besides those of Groups; a
	// name in both has the members of either. nil means none.
	ProviderGroups []string
	// Default is the action when no rule matches, Allow or Deny; "" means
	// Deny.
	Default string
	// Audit puts the whole policy in audit mode: every request a rule or
	// the default would deny is let through, with the rule in
	// Decision.WouldDeny, as if every deny rule were a report rule;
	// false enforces it (report rules still report).
	Audit bool
}

// Policy is a compiled rule list. It is immutable and safe for concurrent
// use.
type Policy struct {
	rules        []rule
	defaultAllow bool
	audit        bool
}

// New compiles cfg. It fails when a rule has an unknown action, an entry
// that does not parse, a group that is not defined, or allow_private on a
// deny rule; the error names the rule and the criterion.
func New(cfg Config) (*Policy, error) {
	p := &Policy{audit: cfg.Audit}
	switch cfg.Default {
	case "", Deny:
	case Allow:
		p.defaultAllow = true
	default:
		return nil, fmt.Errorf("acl: default %q is neither %q nor %q", cfg.Default, Allow, Deny)
	}
	var errs []error
	for i, rc := range cfg.Rules {
		r, err := compile(rc, cfg.Groups, cfg.ProviderGroups)
		if err != nil {
			name := rc.Name
			if name == "" {
				name = fmt.Sprintf("rules[%d]", i)
			}
			errs = append(errs, fmt.Errorf("acl: rule %s: %w", name, err))
			continue
		}
		if r.name == "" {
			r.name = fmt.Sprintf("rules[%d]", i)
		}
		p.rules = append(p.rules, r)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

// Len returns the number of rules.
func (p *Policy) Len() int { return len(p.rules) }

// Audited returns p in audit mode (see Config.Audit): the same rules,
// compiled once, for a listener that audits a policy others enforce.
func (p *Policy) Audited() *Policy {
	if p.audit {
		return p
	}
	q := *p
	q.audit = true
	return &q
}

// Auditing reports whether p is in audit mode as a whole.
func (p *Policy) Auditing() bool { return p.audit }

// Request is what a policy decides on. Its strings are only read during
// the call.
type Request struct {
	// Client is the client's address; the zero Addr matches no clients
	// criterion.
	Client netip.Addr
	// User is the authenticated user; "" (no authentication) matches no
	// users or groups criterion.
	User string
	// Groups are the groups the user's identity provider put it in
	// (sorted or not), matched against rules' groups named in
	// Config.ProviderGroups; nil = none.
	Groups []string
	// Host is the destination as the client named it: a host name or an
	// IP literal without brackets.
	Host string
	// Addr is the address Host resolved to; the zero Addr before
	// resolution. It is set from Host when Host is an IP literal.
	Addr netip.Addr
	// Port is the destination port.
	Port uint16
	// Protocol is the protocol the request arrived with.
	Protocol Protocol
	// HelloRead says the tunnel's first bytes were read (see package
	// sni): SNI is then what they named. false for a tunnel whose first
	// bytes are not read yet, which rules with sni_hosts leave pending,
	// and for any other request, which they do not match. (Port,
	// Protocol and HelloRead share a word: a Request is kept in the
	// decision of every idle tunnel and flow.)
	HelloRead bool
	// Method is the request method; "" for none.
	Method string
	// Path is the request target's path and query as the client sent it
	// (origin form: "/a/b?q"); "" for a request without one (a tunnel).
	// A rule's paths are matched against it normalized (see Rule.Paths).
	Path string
	// SNI is the server_name of the ClientHello the tunnel's client sent,
	// once HelloRead; "" when its first bytes were no ClientHello or one
	// without a server_name.
	SNI string
}

// Decision is the outcome of [Policy.Decide]. Its zero value allows, with
// no rule and no private exceptions, as a missing policy does.
type Decision struct {
	// Allow reports whether the request may proceed. For a pending
	// decision it is true: the verdict is made per address by Permit.
	Allow bool
	// pending and pendingSNI share Allow's word (see Request).
	pending    bool
	pendingSNI bool
	// Rule names the rule that decided, DefaultRule when none matched, or
	// "" while pending (Permit sets it to the rule that decided the last
	// address it was asked about).
	Rule string
	// WouldDeny names the rule that would have refused the request, and
	// let it through only because it is a report rule or the policy is
	// in audit mode (DefaultRule for the default); "" when nothing
	// would have refused it. Allow is then true. Permit sets it for the
	// last address it was asked about.
	WouldDeny string

	policy  *Policy
	req     Request
	matched *rule // nil when the default decided or while pending
}

// Undecided returns a Decision that decides nothing yet: it holds r (see
// Request) for a decision to come, with Allow false and no rule. A
// holder of a request and its decision keeps the request there once,
// not beside the decision's own copy.
func Undecided(r Request) Decision { return Decision{req: r} }

// Request returns the request d was made for: Undecided's, or the one
// Decide decided (as a decision pending on the SNI is made again, with
// the hello read, when Permit or PermitUnresolved decide it). The
// caller may change it before deciding it (Decide(*d.Request())).
func (d *Decision) Request() *Request { return &d.req }

// PendingSNI reports whether the verdict depends on the server_name of
// the tunnel's ClientHello, which is not read yet: the request is to be
// decided again once it is (Request.HelloRead). Allow is true meanwhile,
// Rule "". A pending decision asked for a verdict regardless (Permit,
// PermitUnresolved) is made as if the hello had no server_name.
func (d *Decision) PendingSNI() bool { return d.pendingSNI }

// SNIMode returns the SNI check's mode of the rule that decided (its
// sni), sni.Unset when it sets none, when the default decided, or while
// the decision is pending.
func (d *Decision) SNIMode() sni.Mode {
	if d.matched == nil {
		return sni.Unset
	}
	return d.matched.sniMode
}

// Pending reports whether the verdict depends on the address the
// destination resolves to, to be decided by Permit for each address.
func (d *Decision) Pending() bool { return d.pending }

// AddrDependent reports whether Permit may refuse an address or allow a
// private one: the decision is pending, or its rule has allow_private
// ranges. A connection made under another decision for the same
// destination must then be checked with Permit before it is reused.
func (d *Decision) AddrDependent() bool {
	return d.pending || d.pendingSNI || d.matched != nil && len(d.matched.allowPrivate) > 0
}

// Permit decides an allowed request for one address its destination
// resolved to: ok reports whether the address may be connected to, and
// private whether the deciding rule lets it through the private-
// destination guard (its allow_private contains ip). Permit is not safe
// for concurrent use on one Decision.
func (d *Decision) Permit(ip netip.Addr) (ok, private bool) {
	if !d.Allow {
		return false, false
	}
	if d.pendingSNI {
		d.noHello()
		if !d.Allow {
			return false, false
		}
	}
	m := d.matched
	if d.pending {
		r := d.req
		r.Addr = ip.Unmap()
		nd := d.policy.Decide(r)
		d.Rule, d.WouldDeny = nd.Rule, nd.WouldDeny
		if !nd.Allow {
			return false, false
		}
		m = nd.matched
	}
	if m == nil {
		return true, false
	}
	ip = ip.Unmap()
	for _, pfx := range m.allowPrivate {
		if pfx.Contains(ip) {
			return true, true
		}
	}
	return true, false
}

// PermitUnresolved decides an allowed request whose host name rustle will
// not resolve (a parent proxy resolves it): a pending decision is made as
// if the name resolved to no address, IP and CIDR host entries not
// matching it, as [Policy.Check] decides. A decision that is not pending
// is its own verdict.
func (d *Decision) PermitUnresolved() bool {
	if !d.Allow {
		return false
	}
	if d.pendingSNI {
		d.noHello()
		if !d.Allow {
			return false
		}
	}
	if !d.pending {
		return true
	}
	nd := d.policy.decideUnresolved(&d.req)
	d.Rule, d.WouldDeny = nd.Rule, nd.WouldDeny
	return nd.Allow
}

// noHello decides a decision pending on the SNI as if the tunnel's hello
// had no server_name.
func (d *Decision) noHello() {
	r := d.req
	r.HelloRead, r.SNI = true, ""
	*d = d.policy.Decide(r)
}

// Check decides r and returns whether it is allowed and the name of the
// deciding rule (DefaultRule when none matched); a request a report rule
// or audit mode lets through is allowed. A decision that depends on the
// destination's address, for a host name, is made as if the name
// resolved to no address; use Decide and Permit to decide it per address.
func (p *Policy) Check(r Request) (allow bool, rule string) {
	d := p.Decide(r)
	if d.pendingSNI {
		d.noHello()
	}
	if d.pending {
		d = p.decideUnresolved(&r)
	}
	return d.Allow, d.Rule
}

// decideUnresolved decides r treating IP host entries as not matching a
// host name: a decision that is never pending.
func (p *Policy) decideUnresolved(r *Request) Decision {
	var buf [maxName]byte
	host, addr := normalizeHost(r, &buf)
	for i := range p.rules {
		ru := &p.rules[i]
		if m := ru.match(r, host, addr); m == matchYes {
			return p.decided(ru, r)
		}
	}
	return p.byDefault(r)
}

// decided returns the decision of ru, the rule that matched r.
func (p *Policy) decided(ru *rule, r *Request) Decision {
	d := Decision{Allow: ru.allow, Rule: ru.name, policy: p, req: *r, matched: ru}
	if !ru.allow && (ru.report || p.audit) {
		d.Allow, d.WouldDeny = true, ru.name
	}
	return d
}

// byDefault returns the decision of r when no rule matched it.
func (p *Policy) byDefault(r *Request) Decision {
	d := Decision{Allow: p.defaultAllow, Rule: DefaultRule, policy: p, req: *r}
	if !d.Allow && p.audit {
		d.Allow, d.WouldDeny = true, DefaultRule
	}
	return d
}

// Decide decides r. The result is pending (see [Decision.Pending]) when r
// names a host, no earlier rule decides, and the first rule that could
// match depends on the address the name resolves to; pending on the SNI
// (see [Decision.PendingSNI]) when r is a tunnel whose ClientHello is not
// read yet and the first rule that could match has a sni_hosts
// criterion.
func (p *Policy) Decide(r Request) Decision {
	var buf [maxName]byte
	host, addr := normalizeHost(&r, &buf)
	for i := range p.rules {
		ru := &p.rules[i]
		switch ru.match(&r, host, addr) {
		case matchYes:
			return p.decided(ru, &r)
		case matchPending:
			return Decision{Allow: true, policy: p, req: r, pending: true}
		case matchSNI:
			return Decision{Allow: true, policy: p, req: r, pendingSNI: true}
		}
	}
	return p.byDefault(&r)
}
