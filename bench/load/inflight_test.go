package main

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"
)

// inflightHandler answers GETs with 1 KB once want requests are in
// progress at once (or after a second without them), and records the
// most it saw in progress and the connections they came on.
type inflightHandler struct {
	want int

	mu      sync.Mutex
	cond    *sync.Cond
	now     int
	most    int
	clients map[string]bool
}

func newInflightHandler(want int) *inflightHandler {
	h := &inflightHandler{want: want, clients: map[string]bool{}}
	h.cond = sync.NewCond(&h.mu)
	return h
}

func (h *inflightHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.now++
	h.most = max(h.most, h.now)
	h.clients[r.RemoteAddr] = true
	h.cond.Broadcast()
	deadline := time.AfterFunc(time.Second, func() { h.mu.Lock(); h.cond.Broadcast(); h.mu.Unlock() })
	start := time.Now()
	for h.most < h.want && time.Since(start) < time.Second {
		h.cond.Wait()
	}
	deadline.Stop()
	h.now--
	h.mu.Unlock()
	w.Header().Set("Content-Length", "1024")
	w.Write([]byte(strings.Repeat("b", 1024)))
}

func (h *inflightHandler) seen() (most, conns int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.most, len(h.clients)
}

// TestInflight checks -inflight of "load h2" and "load h3": one connection
// carries that many requests at once, each worker counting its own.
func TestInflight(t *testing.T) {
	const inflight = 4
	cert, pool := testCert(t)
	tests := []struct {
		name  string
		serve func(t *testing.T, h http.Handler) (d dialer)
		run   func(d dialer, end time.Time, c []counts)
	}{
		{"h2", func(t *testing.T, h http.Handler) dialer {
			conf := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}
			srv := &http2.Server{}
			addr := serveConns(t, listen(t), func(c net.Conn) {
				tc := tls.Server(c, conf)
				if tc.Handshake() == nil {
					srv.ServeConn(tc, &http2.ServeConnOpts{Handler: h})
				}
			})
			return h2Dialer("", "", addr, pool)
		}, func(d dialer, end time.Time, c []counts) {
			h2MultiWorker(context.Background(), d, "/1k", end, 5*time.Second, c)
		}},
		{"h3", func(t *testing.T, h http.Handler) dialer {
			udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			srv := &http3.Server{TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert}}), Handler: h}
			done := make(chan struct{})
			go func() { defer close(done); srv.Serve(udp) }()
			t.Cleanup(func() { srv.Close(); udp.Close(); <-done })
			d := newDialer("", "", udp.LocalAddr().String(), 5*time.Second)
			d.tlsConf = &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{http3.NextProtoH3}}
			return d
		}, func(d dialer, end time.Time, c []counts) {
			h3Worker(context.Background(), d, "https://"+d.target+"/1k", false, end, 5*time.Second, c)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newInflightHandler(inflight)
			d := tt.serve(t, h)
			c := make([]counts, inflight)
			tt.run(d, time.Now().Add(loadWindow), c)
			var total counts
			for i := range c {
				if c[i].requests == 0 {
					t.Errorf("worker %d completed no request", i)
				}
				total.merge(&c[i])
			}
			if total.bytes != total.requests*1024 || total.firstErr != nil {
				t.Errorf("%d bytes for %d requests, first error %v", total.bytes, total.requests, total.firstErr)
			}
			if most, conns := h.seen(); most != inflight || conns != 1 {
				t.Errorf("the server saw at most %d requests at once on %d connections, want %d on 1", most, conns, inflight)
			}
		})
	}
}
