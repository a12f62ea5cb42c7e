package httpproxy

import (
	"net"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/http1"
	"github.com/rustle-proxy/rustle/internal/pac"
)

// isPACRequest reports whether the request is a GET or HEAD of the PAC
// file (pac.Path, with or without a query) on a listener that serves
// one: an origin-form request, as a client that fetches a PAC URL
// directly sends it.
func (cn *conn) isPACRequest() bool {
	if cn.p.cfg.PAC == nil || cn.orig.IsValid() {
		return false
	}
	req := &cn.req
	m := string(req.Method.Of(req.Buf))
	if m != "GET" && m != "HEAD" {
		return false
	}
	tgt := req.Target.Of(req.Buf)
	return string(tgt) == pac.Path || len(tgt) > len(pac.Path) && string(tgt[:len(pac.Path)+1]) == pac.Path+"?"
}

// servePAC answers a request for the PAC file: 200 with the file (its
// proxy named by the request's Host, for a generated file without
// pac.proxies) as application/x-ns-proxy-autoconfig, or 400 for a Host
// the file cannot name. It is served to every client that reaches the
// listener, without authentication or rules (a browser fetches its PAC
// before it knows of the proxy), and logged as a request. It reports
// whether the connection serves another request.
func (cn *conn) servePAC() (keep bool) {
	req := &cn.req
	r := gate.Request{Log: accesslog.ProtoHTTP, Method: cn.internMethod(req.Method.Of(req.Buf)), Target: req.Target.Of(req.Buf)}
	cn.sess.Observe(&r, &cn.g)
	keep = !req.Chunked && req.ContentLength <= 0 && !req.ConnClose && (req.Minor == 1 || req.ConnKeepAlive)
	var host []byte
	if req.HostIdx >= 0 {
		host = req.Fields[req.HostIdx].Value.Of(req.Buf)
	}
	var port uint16
	if a, ok := cn.client.C.LocalAddr().(*net.TCPAddr); ok {
		port = uint16(a.Port)
	}
	body, err := cn.p.cfg.PAC.Body(string(host), port)
	if err != nil {
		cn.g.SetReason(accesslog.ReasonBadRequest)
		cn.writeError(400, "the Host names no host the proxy auto-configuration can name", keep)
		return keep
	}
	out := append(cn.out[:0], "HTTP/1.1 200 OK\r\nContent-Type: "+pac.ContentType+"\r\nCache-Control: max-age=300\r\nContent-Length: "...)
	out = appendInt(out, int64(len(body)))
	out = append(out, crlf...)
	if !keep {
		out = append(out, "Connection: close\r\n"...)
	} else if req.Minor == 0 {
		out = append(out, "Connection: keep-alive\r\n"...)
	}
	out = append(out, crlf...)
	cn.out = out
	cn.g.Answer(200, 0)
	cn.client.ArmWriteDeadline(http1.MonoNow(), cn.p.o.WriteTimeout)
	if cn.isHead {
		body = nil
	}
	w, err := cn.vec.Write(cn.client.C, out, body)
	cn.g.Finish(0, max(0, w-int64(len(out))))
	return keep && err == nil
}
