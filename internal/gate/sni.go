package gate

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/sni"
)

// The SNI check. A tunnel (CONNECT on every HTTP version, SOCKS CONNECT)
// whose policy wants its ClientHello (NeedsHello) is answered first, as
// its client sends the hello only then; the front-end reads the client's
// first bytes (package sni, bounded by sni.MaxBytes and
// Policy.HelloTimeout), and CheckHello decides with them: the access
// rules on sni_hosts, the route and the egress source are chosen again
// with the server name, and under sni = "match" a hello that does not
// name the tunnel's host closes the tunnel. Only then does the front-end
// dial, and it writes the bytes read to the upstream first, unchanged:
// nothing reaches the origin, and no connection is made to it, before
// the check passed.

// helloState is what a grant knows of its tunnel's ClientHello.
type helloState uint8

const (
	helloNone helloState = iota // not read: the check is off, or not a tunnel
	helloRead                   // read; Grant.sni says what it named
)

// NeedsHello reports whether the granted tunnel is to read its client's
// ClientHello before it dials: its SNI mode (the sni of the rule that
// allowed it, else the listener's Policy.SNI) is log or match, or the
// access rules, the route or the user's egress rule may depend on the
// server name (sni_hosts). A front-end that gets true answers the tunnel
// (200, a SOCKS success: its client sends the hello only then), reads
// the client's first bytes with sni.Read or sni.Parse within
// HelloTimeout, asks CheckHello, and dials only on OK, writing every
// byte it read to the upstream before the relay. False for a request
// that is no tunnel.
func (g *Grant) NeedsHello() bool { return g.wantHello }

// HelloTimeout returns how long the client of a tunnel that NeedsHello
// has, from its answer, to send its whole ClientHello; 0 = no limit.
func (g *Grant) HelloTimeout() time.Duration { return g.s.p.HelloTimeout }

// wantsHello decides NeedsHello for an authorized request (see
// Authorize): ar is what the rules decided.
func (g *Grant) wantsHello(ar *acl.Request, routePending bool) bool {
	if ar.Protocol&acl.HelloProtocols == 0 {
		return false
	}
	p := g.s.p
	switch {
	case g.decision.SNIMode().Or(p.SNI).Reads():
		return true
	case g.decided && g.decision.PendingSNI(), routePending:
		return true
	}
	return p.Egress.pendsOnHello(g.User, g.groups)
}

// helloInfo returns what the grant's ClientHello named, for the egress
// rules: read or not, and its server name.
func (g *Grant) helloInfo() helloInfo {
	if g.hello != helloRead {
		return noHello
	}
	return helloInfo{read: true, name: g.serverName()}
}

// serverName returns the server name of the tunnel's ClientHello; ""
// when it was not read or named none.
func (g *Grant) serverName() string {
	if strings.HasPrefix(g.sni, "[") {
		return ""
	}
	return g.sni
}

// CheckHello decides a tunnel that NeedsHello with what its client's
// first bytes were: h and err as sni.Read or sni.Parse returned them (err
// nil: a ClientHello; one that wraps sni.ErrNotTLS, sni.ErrSSLv2,
// sni.ErrMalformed or sni.ErrTooLarge; or the read's error: the client
// closed, or HelloTimeout passed). It notes what was read for the access
// log (Grant.SNI) and the metrics, decides the request again with the
// server name if the access rules were pending on it (Denied when they
// refuse it), chooses the route again if it was pending, and applies
// the SNI mode: under match, SNIMismatch when the hello names another
// host than the tunnel's, none where the tunnel named a host, or when
// the bytes were no ClientHello; a tunnel to an IP address is decided by
// the rules as if it had named the server name (with the address as its
// address), and may have a hello without a name. The decision service,
// when there is one, is asked last, with the server name (Denied with
// the reason authz-denied, or AuthzUnavailable; see authz.go). On a
// refusal the front-end closes the tunnel, dialled nowhere, and calls
// Finish; the client's answer was sent already. On OK it dials.
//
// With ECH, the server name checked is the outer hello's, the public
// name of the origin's ECH configuration: the name the client means to
// reach is encrypted, which is what ECH is for.
func (g *Grant) CheckHello(h sni.Hello, err error) Kind {
	p := g.s.p
	g.hello = helloRead
	res := helloResult(err)
	name := ""
	if err == nil {
		name = h.ServerName
	}
	g.sni = name
	if name == "" {
		g.sni = sniWords[res]
		if err == nil {
			g.sni = sniWords[metrics.SNIMissing]
		}
	}
	ar := *g.req()
	ar.HelloRead, ar.SNI = true, name
	if g.decided && g.decision.PendingSNI() {
		g.decision = p.ACL.Decide(ar)
		g.Rule = g.decision.Rule
		if !g.decision.Allow {
			p.Metrics.SNIChecked(res, false)
			p.Metrics.ACLDenied()
			g.cause = fmt.Errorf("gate: the rules refuse the tunnel's server name %s", g.sni)
			return g.refuse(Denied)
		}
	}
	if g.routePending {
		g.chooseRoute(&ar)
	}
	mode := g.decision.SNIMode().Or(p.SNI)
	if err == nil {
		res = g.compareName(&ar, name, mode)
	}
	refused := mode == sni.Match && res != metrics.SNIMatched
	p.Metrics.SNIChecked(res, refused)
	if !refused {
		if kind := g.checkIntercept(&ar, err); kind != OK {
			return kind
		}
		if p.Authz != nil {
			return g.askAuthz(name) // the tunnel's decision waited for its hello
		}
		return OK
	}
	addr, _ := g.dest()
	switch res {
	case metrics.SNIDiffers:
		g.cause = fmt.Errorf("gate: the ClientHello names %q, the tunnel %s", name, addr)
	case metrics.SNIMissing:
		g.cause = fmt.Errorf("gate: the ClientHello names no server, the tunnel %s", addr)
	default:
		g.cause = fmt.Errorf("gate: read the ClientHello of the tunnel to %s: %w", addr, err)
	}
	return g.refuse(SNIMismatch)
}

// checkIntercept asks the policy's Interceptor, for a tunnel it
// considers (interceptOn), whether a rule names it now that its hello is
// read (ar, with its server name; err as CheckHello got it): OK, the
// tunnel then Intercepting or dialled as any other; NotInterceptable for
// one a rule names whose first bytes are no ClientHello.
func (g *Grant) checkIntercept(ar *acl.Request, err error) Kind {
	if !g.interceptOn {
		return OK
	}
	p := g.s.p
	g.icept = int32(p.Intercept.Intercepts(ar)) // an index of the configuration's rules
	if g.icept < 0 || err == nil {
		return OK
	}
	addr, _ := g.dest()
	g.cause = fmt.Errorf("gate: an interception rule names the tunnel to %s, whose first bytes are no ClientHello: %w", addr, err)
	p.Metrics.Intercepted(metrics.InterceptNotTLS)
	return g.refuse(NotInterceptable)
}

// compareName compares the server name of the tunnel's ClientHello with
// its destination: the same name (ASCII case and a trailing dot aside),
// or, for a destination given as an address, a name the rules allow for
// it (any name without rules), or none. ar is the request with its
// server name. Only for Match does an address's name cost a decision.
func (g *Grant) compareName(ar *acl.Request, name string, mode sni.Mode) metrics.SNIResult {
	host := g.dst.host
	isIP := host == ""
	if !isIP {
		if _, ip, _ := dialer.ParseHost(host); ip {
			isIP = true
		}
	}
	switch {
	case isIP && name == "" && g.original.IsValid():
		return metrics.SNIMissing // a transparent connection's hello is all that names its host
	case isIP && name == "":
		return metrics.SNIMatched // clients send no name for an address
	case isIP:
		if p := g.s.p; mode == sni.Match && p.ACL != nil {
			r := *ar
			r.Host, r.Addr = name, g.destAddr()
			if ok, rule := p.ACL.Check(r); !ok {
				g.Rule = rule
				return metrics.SNIDiffers
			}
		}
		return metrics.SNIMatched
	case name == "":
		return metrics.SNIMissing
	case strings.EqualFold(strings.TrimSuffix(host, "."), name):
		return metrics.SNIMatched
	}
	return metrics.SNIDiffers
}

// destAddr returns the destination's address, for a destination given
// as an address (Request.Addr, or an IP literal in Request.Host).
func (g *Grant) destAddr() netip.Addr {
	if g.dst.addr.IsValid() {
		return g.dst.addr
	}
	ip, _, _ := dialer.ParseHost(g.dst.host)
	return ip.WithZone("").Unmap()
}

// helloResult classifies the error of reading a ClientHello; for a hello
// read (err nil) SNIMatched, which compareName refines.
func helloResult(err error) metrics.SNIResult {
	switch {
	case err == nil:
		return metrics.SNIMatched
	case errors.Is(err, sni.ErrNotTLS), errors.Is(err, sni.ErrSSLv2):
		return metrics.SNINotTLS
	case errors.Is(err, sni.ErrMalformed):
		return metrics.SNIMalformed
	case errors.Is(err, sni.ErrTooLarge):
		return metrics.SNITooLarge
	}
	return metrics.SNIIncomplete
}

// sniWords are the access log's sni field for a tunnel whose first bytes
// named no server, by what they were.
var sniWords = [...]string{
	metrics.SNIMissing:    "[no-sni]",
	metrics.SNINotTLS:     "[not-tls]",
	metrics.SNIMalformed:  "[malformed]",
	metrics.SNITooLarge:   "[too-large]",
	metrics.SNIIncomplete: "[incomplete]",
}

// SNI returns what the tunnel's ClientHello named for the access log:
// its server name, or why there is none in brackets; "" when it was not
// read.
func (g *Grant) SNI() string { return g.sni }

// ReadHello reads the ClientHello of a tunnel that NeedsHello from c,
// behind buf (bytes of c's read already, nil for none), within
// HelloTimeout, and decides it with CheckHello. It returns every byte
// read, buf's included, which the front-end writes to the upstream
// first once it has dialled, and CheckHello's verdict. c's read
// deadline is cleared on return.
func (g *Grant) ReadHello(c net.Conn, buf []byte) ([]byte, Kind) {
	if t := g.HelloTimeout(); t > 0 {
		c.SetReadDeadline(time.Now().Add(t))
	}
	b, h, err := sni.Read(c, buf)
	c.SetReadDeadline(time.Time{})
	if err != nil && !isHelloVerdict(err) {
		g.s.debug("gate: read the ClientHello", slog.Any("err", err))
	}
	return b, g.CheckHello(h, err)
}

// isHelloVerdict reports whether err is Parse's verdict on bytes read,
// rather than a failed read.
func isHelloVerdict(err error) bool {
	return errors.Is(err, sni.ErrNotTLS) || errors.Is(err, sni.ErrSSLv2) ||
		errors.Is(err, sni.ErrMalformed) || errors.Is(err, sni.ErrTooLarge)
}
