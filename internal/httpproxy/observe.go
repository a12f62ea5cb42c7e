package httpproxy

import (
	"net"
	"net/netip"
	"strings"
	"time"
	"unsafe"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// observation is what the metrics and the access log learn of the
// request being served. It is filled only when either is configured.
type observation struct {
	on       bool // metrics or access log configured
	start    time.Time
	proto    accesslog.Protocol
	status   int
	up, down int64          // body bytes client->upstream, bytes written to the client
	upstream netip.AddrPort // the origin's address, once connected
}

// begin starts observing a parsed request.
func (cn *conn) begin() {
	o := &cn.obs
	if !o.on {
		return
	}
	*o = observation{on: true, start: time.Now(), proto: accesslog.ProtoHTTP}
}

// finish reports the request that just ended to the metrics and the
// access log.
func (cn *conn) finish() {
	o := &cn.obs
	if !o.on || o.status == 0 {
		return
	}
	p := cn.p
	p.cfg.Metrics.Request(o.status, o.up, o.down)
	cn.userMetrics().Request(o.up, o.down)
	if p.cfg.AccessLog != nil {
		rec := cn.record()
		p.cfg.AccessLog.Log(&rec)
	}
}

// record returns the access log record of the current request. Its
// strings alias the connection's buffers: Log copies them at once.
func (cn *conn) record() accesslog.Record {
	o := &cn.obs
	req := &cn.req
	return accesslog.Record{
		Time:      o.start,
		Listener:  cn.p.cfg.Listener,
		Client:    cn.clientAddrPort,
		User:      cn.user,
		Protocol:  o.proto,
		Method:    bytesString(req.method.of(req.buf)),
		Target:    bytesString(req.target.of(req.buf)),
		Status:    o.status,
		BytesUp:   o.up,
		BytesDown: o.down,
		Duration:  time.Since(o.start),
		Upstream:  o.upstream,
		Rule:      cn.decision.Rule,
	}
}

// userMetrics returns the per-user series of the request's user, or nil
// (whose methods do nothing).
func (cn *conn) userMetrics() *metrics.UserMetrics {
	if cn.p.cfg.UserMetrics == nil || cn.user == "" {
		return nil
	}
	return cn.p.cfg.UserMetrics(cn.user)
}

// tunnelDone returns the callback that reports a tunnel opened for the
// current request (CONNECT or WebSocket) when it ends, or nil when
// nothing is observed. It copies what it needs: the connection's buffers
// are reused before the tunnel ends.
func (cn *conn) tunnelDone() func(up, down int64, err error) {
	o := &cn.obs
	if !o.on {
		return nil
	}
	p := cn.p
	p.cfg.Metrics.TunnelOpened()
	p.cfg.Metrics.Request(o.status, 0, 0)
	rec := cn.record()
	rec.Method, rec.Target = strings.Clone(rec.Method), strings.Clone(rec.Target)
	um := cn.userMetrics()
	return func(up, down int64, _ error) {
		p.cfg.Metrics.Bytes(up, down)
		um.Bytes(up, down)
		if p.cfg.AccessLog != nil {
			rec.BytesUp, rec.BytesDown = up, down
			rec.Duration = time.Since(rec.Time)
			p.cfg.AccessLog.Log(&rec)
		}
	}
}

// engineDone adapts a tunnel report to the engine's callback.
func engineDone(report func(up, down int64, err error), next func(tunnel.Result)) func(tunnel.Result) {
	if report == nil {
		return next
	}
	return func(r tunnel.Result) {
		report(r.Up, r.Down, r.Err)
		if next != nil {
			next(r)
		}
	}
}

// dialed reports an upstream dial that took since start.
func (cn *conn) dialed(start time.Time, c *net.TCPConn, err error) {
	if !cn.obs.on {
		return
	}
	cn.p.cfg.Metrics.Dialed(time.Since(start), err == nil)
	if c != nil {
		cn.obs.upstream = remoteAddrPort(c)
	}
}

// bytesString views b as a string without copying; the string must not
// outlive b's contents.
func bytesString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
