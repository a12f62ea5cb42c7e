package main

import (
	"crypto/tls"
	"net"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/net/http2"
)

// h2SinkPath is the path of the HTTP/2 sink: the body of a POST there is
// counted into the sink's byte counter. It matches load's H2SinkPath.
const h2SinkPath = "/_sink"

// serveH2 returns the handler of the h2 listener, the far end of the "no
// proxy" column of the HTTP/2 rows: TLS with ALPN "h2", then
// golang.org/x/net/http2's server, answering GET of the fixed bodies and
// streaming POSTs to h2SinkPath into the sink's counter. Unlike the other
// listeners it is not written by hand: it serves only the no-proxy column
// (through a proxy the origin side is HTTP/1.1), so it costs the load core
// nothing when a proxy is measured.
func (o *origin) serveH2(cert tls.Certificate) func(net.Conn) {
	conf := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}
	srv := &http2.Server{}
	opts := &http2.ServeConnOpts{Handler: http.HandlerFunc(o.handleH2)}
	return func(c net.Conn) {
		tc := tls.Server(c, conf)
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil || tc.ConnectionState().NegotiatedProtocol != "h2" {
			tc.Close()
			return
		}
		tc.SetDeadline(time.Time{})
		srv.ServeConn(tc, opts)
		tc.Close()
	}
}

// handleH2 answers one HTTP/2 request.
func (o *origin) handleH2(w http.ResponseWriter, r *http.Request) {
	o.httpRequests.Add(1)
	if r.Method == "POST" && r.URL.Path == h2SinkPath {
		o.sinkConns.Add(1)
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		buf := make([]byte, 64<<10)
		for {
			n, err := r.Body.Read(buf)
			o.sinkBytes.Add(int64(n))
			if err != nil {
				return
			}
		}
	}
	resp, ok := o.responses[r.URL.Path]
	if !ok || (r.Method != "GET" && r.Method != "HEAD") {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	h := w.Header()
	h["Content-Type"] = []string{"application/octet-stream"}
	h["Content-Length"] = []string{strconv.Itoa(resp.bodyLen)}
	if r.Method == "HEAD" {
		return
	}
	w.Write(resp.keepAlive[len(resp.keepAlive)-resp.bodyLen:])
}
