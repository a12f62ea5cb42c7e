package gate

import (
	"net/netip"
	"strings"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
)

// tunnelRecord is what an idle tunnel on the engine keeps of its access
// log record until it ends, when record makes the accesslog.Record of
// it: only what is not held elsewhere in the tunnel's state, in compact
// types (144 bytes, and the target's copy). The listener's name is the
// policy's, the user the tunnel's account when they are the same, and
// the method CONNECT's constant when it is CONNECT; the strings kept
// (the rule, route and parent names, the reason, the would-deny rule
// and the SNI field) are shared with the configuration or constant,
// never the front-end's buffers, and whatever is seldom set (a user or
// method of its own, a reason, an egress source, a route or parent, the
// SNI field, a transparent destination) is in rare, allocated only when
// one of it is set.
type tunnelRecord struct {
	start    time.Time      // Record.Time
	client   netip.AddrPort // Record.Client
	upstream netip.AddrPort // Record.Upstream
	target   string         // a copy of Record.Target
	rule     string         // Record.Rule
	rare     *recordRare    // nil when none of it is set
	status   int32          // Record.Status
	class    int32          // Record.HTTPStatus
	proto    accesslog.Protocol
	flags    recordFlags
}

// recordFlags are a tunnelRecord's yes-or-no facts.
type recordFlags uint8

const (
	// recordAccount: the record's user is the tunnel's account.
	recordAccount recordFlags = 1 << iota
	// recordConnect: the record's method is CONNECT.
	recordConnect
	// recordIntercepted: Record.Intercepted.
	recordIntercepted
)

// recordRare is what a tunnelRecord keeps of the fields seldom set.
type recordRare struct {
	user      string // a copy of Record.User, when not the account
	method    string // a copy of Record.Method, when not CONNECT
	reason    string // Record.Reason as it was at the hand-over
	route     string
	parent    string
	wouldDeny string
	sni       string
	source    netip.AddrPort
	original  netip.AddrPort
}

// methodConnect is the method of most tunnels' records.
const methodConnect = "CONNECT"

// tunnelRecord sets r to the record of g that the tunnel of account
// keeps until it ends (see handOver): what g.record would say of it now,
// with the grant's reason so far and copies of the strings that alias
// g's or its front-end's buffers.
func (g *Grant) tunnelRecord(r *tunnelRecord, account string) {
	*r = tunnelRecord{
		start:    g.start,
		client:   g.s.client,
		upstream: g.upstream,
		rule:     g.Rule,
		status:   int32(g.status),
		class:    int32(max(g.class, 0)),
		proto:    g.proto,
	}
	rare := recordRare{
		reason:    g.reason,
		route:     g.route.Name(),
		parent:    g.parent.Name(),
		wouldDeny: g.wouldDeny(),
		sni:       g.sni,
		source:    g.source,
		original:  g.original,
	}
	// One allocation for the strings that alias the front-end's
	// buffers: the target, and a user or method of its own.
	user, method := g.logUser(), g.method
	n := len(g.target)
	if user == account {
		r.flags |= recordAccount
	} else {
		n += len(user)
	}
	if method == methodConnect {
		r.flags |= recordConnect
	} else {
		n += len(method)
	}
	var b strings.Builder
	b.Grow(n)
	b.Write(g.target)
	if r.flags&recordAccount == 0 {
		b.WriteString(user)
	}
	if r.flags&recordConnect == 0 {
		b.WriteString(method)
	}
	own := b.String()
	r.target, own = own[:len(g.target)], own[len(g.target):]
	if r.flags&recordAccount == 0 {
		rare.user, own = own[:len(user)], own[len(user):]
	}
	if r.flags&recordConnect == 0 {
		rare.method = own
	}
	if g.Intercepted() {
		r.flags |= recordIntercepted
	}
	if rare != (recordRare{}) {
		r.rare = new(recordRare)
		*r.rare = rare
	}
}

// record returns the access log record of the tunnel t, whose record r
// is, as handOver would have had g.record make it: its bytes, duration
// and end's reason are for the caller to fill in.
func (r *tunnelRecord) record(t *engineTunnel) accesslog.Record {
	rec := accesslog.Record{
		Time:        r.start,
		Listener:    t.p.Listener,
		Client:      r.client,
		Protocol:    r.proto,
		Target:      r.target,
		Status:      int(r.status),
		HTTPStatus:  int(r.class),
		Duration:    time.Since(r.start),
		Upstream:    r.upstream,
		Rule:        r.rule,
		Intercepted: r.flags&recordIntercepted != 0,
	}
	if r.flags&recordAccount != 0 {
		rec.User = t.account
	}
	if r.flags&recordConnect != 0 {
		rec.Method = methodConnect
	}
	if m := r.rare; m != nil {
		if r.flags&recordAccount == 0 {
			rec.User = m.user
		}
		if r.flags&recordConnect == 0 {
			rec.Method = m.method
		}
		rec.Reason, rec.Source, rec.Route, rec.Parent = m.reason, m.source, m.route, m.parent
		rec.WouldDeny, rec.SNI, rec.Original = m.wouldDeny, m.sni, m.original
	}
	return rec
}
