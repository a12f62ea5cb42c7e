package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ListenerMetrics are the series of one listener and protocol, resolved
// once by [Metrics.Listener]. Its methods are safe for concurrent use, do
// not allocate, and do nothing on a nil receiver.
type ListenerMetrics struct {
	protocol   string // for Read
	accepted   prometheus.Counter
	open       prometheus.Gauge
	requests   [len(statusClasses)]prometheus.Counter
	up, down   prometheus.Counter
	tunnels    prometheus.Counter
	dgUp       prometheus.Counter
	dgDown     prometheus.Counter
	dgRefused  prometheus.Counter
	authFails  prometheus.Counter
	authAsks   prometheus.Counter
	aclDenies  prometheus.Counter
	wouldDeny  *prometheus.CounterVec // by rule
	sniChecks  [len(sniResults)]prometheus.Counter
	sniRefused prometheus.Counter
	intercepts [len(interceptResults)]prometheus.Counter
	dialOK     prometheus.Observer
	dialErr    prometheus.Observer
	ttfb       prometheus.Observer
}

// Accepted counts an accepted client connection, which is open until
// [ListenerMetrics.Closed].
func (l *ListenerMetrics) Accepted() {
	if l == nil {
		return
	}
	l.accepted.Inc()
	l.open.Inc()
}

// Closed counts the end of a connection counted by Accepted.
func (l *ListenerMetrics) Closed() {
	if l != nil {
		l.open.Dec()
	}
}

// Request counts a request answered with an HTTP status (a tunnel's
// counts when it is established, with the status of its reply) and
// adds its body bytes: up from the client, down from the upstream.
func (l *ListenerMetrics) Request(status int, up, down int64) {
	if l == nil {
		return
	}
	i := status / 100
	if status < 100 || i >= len(l.requests) {
		i = 0
	}
	l.requests[i].Inc()
	l.Bytes(up, down)
}

// Bytes adds bytes relayed outside requests, such as a tunnel's, when it
// closes or periodically while it runs.
func (l *ListenerMetrics) Bytes(up, down int64) {
	if l == nil {
		return
	}
	if up > 0 {
		l.up.Add(float64(up))
	}
	if down > 0 {
		l.down.Add(float64(down))
	}
}

// TunnelOpened counts a tunnel established (CONNECT, WebSocket, SOCKS
// CONNECT or UDP association).
func (l *ListenerMetrics) TunnelOpened() {
	if l != nil {
		l.tunnels.Inc()
	}
}

// Datagrams adds a CONNECT-UDP flow's datagrams when it ends: up sent to
// its target, down sent to the client, refused dropped for their
// destination.
func (l *ListenerMetrics) Datagrams(up, down, refused int64) {
	if l == nil {
		return
	}
	if up > 0 {
		l.dgUp.Add(float64(up))
	}
	if down > 0 {
		l.dgDown.Add(float64(down))
	}
	if refused > 0 {
		l.dgRefused.Add(float64(refused))
	}
}

// AuthFailed counts a request or SOCKS login refused for wrong
// credentials: ones the authenticator checked and refused.
func (l *ListenerMetrics) AuthFailed() {
	if l != nil {
		l.authFails.Inc()
	}
}

// AuthChallenged counts a request refused because it offered no
// credentials on a listener that authenticates: the 407 challenge a
// client gets before it sends them, a SOCKS5 greeting without
// username/password, a SOCKS4 request.
func (l *ListenerMetrics) AuthChallenged() {
	if l != nil {
		l.authAsks.Inc()
	}
}

// ACLDenied counts a request refused by the access policy.
func (l *ListenerMetrics) ACLDenied() {
	if l != nil {
		l.aclDenies.Inc()
	}
}

// WouldDeny counts a request let through that rule would have refused
// (see acl.Decision.WouldDeny), a configured rule's name or "default".
func (l *ListenerMetrics) WouldDeny(rule string) {
	if l != nil {
		l.wouldDeny.WithLabelValues(rule).Inc()
	}
}

// SNIResult is what the SNI check found in a tunnel's first bytes: the
// result label of rustle_sni_checks_total.
type SNIResult uint8

// The results of the SNI check.
const (
	// SNIMatched: a ClientHello whose server_name is the tunnel's host
	// (for a tunnel to an IP address, one the rules allow as its host,
	// or none).
	SNIMatched SNIResult = iota
	// SNIDiffers: a server_name other than the tunnel's host.
	SNIDiffers
	// SNIMissing: a ClientHello without a server_name, to a host name.
	SNIMissing
	// SNINotTLS: the first bytes were no TLS handshake (an SSLv2-style
	// hello included).
	SNINotTLS
	// SNIMalformed: a TLS handshake record without a well-formed
	// ClientHello.
	SNIMalformed
	// SNITooLarge: a ClientHello over the reader's bound.
	SNITooLarge
	// SNIIncomplete: the client closed, or did not finish its hello in
	// time.
	SNIIncomplete
)

// sniResults names the results, in the order of the constants.
var sniResults = [...]string{"matched", "differs", "no-sni", "not-tls", "malformed", "too-large", "incomplete"}

// String returns r's label value.
func (r SNIResult) String() string {
	if int(r) < len(sniResults) {
		return sniResults[r]
	}
	return ""
}

// SNIChecked counts a tunnel whose first bytes the SNI check read, with
// what it found, and whether the check closed it.
func (l *ListenerMetrics) SNIChecked(r SNIResult, refused bool) {
	if l == nil || int(r) >= len(l.sniChecks) {
		return
	}
	l.sniChecks[r].Inc()
	if refused {
		l.sniRefused.Inc()
	}
}

// InterceptResult is how an interception of a tunnel went: the result
// label of rustle_intercepts_total.
type InterceptResult uint8

// The results of an interception.
const (
	// InterceptServed: the client took the minted certificate; the
	// requests inside were served.
	InterceptServed InterceptResult = iota
	// InterceptBypassed: an interception rule named the tunnel and an
	// intercept.bypass entry its host: spliced.
	InterceptBypassed
	// InterceptClientRejected: the client refused the minted certificate
	// (a TLS alert during the handshake): it does not trust the CA, or
	// pins the origin's key.
	InterceptClientRejected
	// InterceptHandshakeFailed: the handshake with the client failed
	// otherwise (it closed, timed out, spoke no TLS rustle takes).
	InterceptHandshakeFailed
	// InterceptNotTLS: the tunnel's first bytes were no ClientHello; it
	// was closed.
	InterceptNotTLS
)

// interceptResults names the results, in the order of the constants.
var interceptResults = [...]string{"intercepted", "bypassed", "client-rejected-certificate", "handshake-failed", "not-tls"}

// String returns r's label value.
func (r InterceptResult) String() string {
	if int(r) < len(interceptResults) {
		return interceptResults[r]
	}
	return ""
}

// Intercepted counts a tunnel an interception rule named, with what
// came of it.
func (l *ListenerMetrics) Intercepted(r InterceptResult) {
	if l == nil || int(r) >= len(l.intercepts) {
		return
	}
	l.intercepts[r].Inc()
}

// Dialed observes the time a dial to an upstream took, and whether it
// succeeded. A request served by a pooled connection does not dial.
func (l *ListenerMetrics) Dialed(d time.Duration, ok bool) {
	if l == nil {
		return
	}
	if ok {
		l.dialOK.Observe(d.Seconds())
	} else {
		l.dialErr.Observe(d.Seconds())
	}
}

// FirstByte observes the time from a request's head being written
// upstream to the first byte of the response.
func (l *ListenerMetrics) FirstByte(d time.Duration) {
	if l != nil {
		l.ttfb.Observe(d.Seconds())
	}
}

// UserMetrics are the series of one user, resolved by [Metrics.User].
// Its methods are safe for concurrent use, do not allocate, and do
// nothing on a nil receiver.
type UserMetrics struct {
	name     string // for Users
	requests prometheus.Counter
	up, down prometheus.Counter
}

// Request counts a request or tunnel of the user and adds its bytes.
func (u *UserMetrics) Request(up, down int64) {
	if u == nil {
		return
	}
	u.requests.Inc()
	u.Bytes(up, down)
}

// Bytes adds bytes relayed for the user outside a request, as a
// tunnel's.
func (u *UserMetrics) Bytes(up, down int64) {
	if u == nil {
		return
	}
	if up > 0 {
		u.up.Add(float64(up))
	}
	if down > 0 {
		u.down.Add(float64(down))
	}
}
