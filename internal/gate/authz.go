package gate

import (
	"log/slog"
	"sync"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/authz"
)

// The decision service ([authz], Policy.Authz). It is asked about every
// request the access rules (and the limits) let through, once the route
// is chosen: in Authorize, before the request is answered, so that a
// refusal is a 403 (or a 503 when it cannot decide under on_error =
// "deny"); for a tunnel that reads its ClientHello (NeedsHello), in
// CheckHello instead, once the hello is read, so that the service sees
// the tunnel's server name: a refusal then closes the tunnel, answered
// already, before it is dialled, as an SNI mismatch does. A SOCKS5 UDP
// association is asked about once, in AuthorizeAssociation, without a
// destination: its datagrams are decided by the access rules alone.
//
// The wait is the asking goroutine's (the connection's, or the
// stream's), bounded by authz.timeout; no worker of the splice engine
// waits, as the tunnel is handed to it only after. Whatever the service
// answers, the private-destination guard checks the destination at the
// dial: an allowing answer never lets a private address through.

// askAuthz asks the decision service about the granted request, with
// sni the server name of its ClientHello ("" when it was not read, or
// named none): OK, or Denied (reason authz-denied) or AuthzUnavailable.
// Under on_error = "allow" a request the service could not decide is
// let through, its debug line saying so.
func (g *Grant) askAuthz(sni string) Kind {
	s := g.s
	p := s.p
	ar := g.req()
	in := authz.Input{
		Listener: p.Listener, User: g.User, Groups: g.groups, Client: s.ip,
		Host: ar.Host, Addr: ar.Addr, Port: ar.Port, Method: ar.Method, Protocol: ar.Protocol.String(), SNI: sni,
	}
	bp := authzBufs.Get().(*[]byte)
	d, buf := p.Authz.Decide(s.ctx, &in, (*bp)[:0])
	*bp = buf
	authzBufs.Put(bp)
	switch {
	case d.Err != nil && !d.Allow:
		g.cause = d.Err
		return g.refuse(AuthzUnavailable)
	case d.Err != nil:
		s.debug("gate: the decision service could not decide; on_error lets the request through",
			slog.String("user", g.User), slog.String("target", string(g.target)), slog.Any("err", d.Err))
	case !d.Allow:
		g.reason = accesslog.ReasonAuthzDenied
		return Denied
	}
	g.authzHeaders = d.Headers
	return OK
}

// authzBufs holds the buffers the decision service's documents are built
// in: a grant keeps none of its own, as every idle tunnel and flow keeps
// its grant.
var authzBufs = sync.Pool{New: func() any { return new([]byte) }}

// AuthzHeaders returns the fields the decision service's answer asks to
// add to the request, sorted by name; nil when there are none, or no
// service. They are for a forwarded HTTP request's exchange with its
// origin (a tunnel's bytes are the client's). Valid once the request is
// granted; shared, never to be modified.
func (g *Grant) AuthzHeaders() []authz.Header { return g.authzHeaders }
