package h3

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// Test credentials.
const (
	testUser = "alice"
	testPass = "s3cret:pw"
)

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// testProxy is an h3 Server on a loopback UDP socket, each connection in
// a session of policy.
type testProxy struct {
	Addr  string
	Roots *x509.CertPool
	cert  []byte // the proxy's certificate (DER), which Roots trusts
	srv   *Server
	// drain ends the sessions' context, as a shutdown does: every
	// connection is sent GOAWAY.
	drain func()
	// cut ends the policy's Cut, as the end of a shutdown's drain does.
	cut func()
}

// testConfig returns the Config the tests serve with unless they change
// it.
func testConfig() Config {
	return Config{
		Origin:           testOrigin(origin.Config{}),
		HandshakeTimeout: 5 * time.Second,
		IdleTimeout:      30 * time.Second,
		UDPIdleTimeout:   30 * time.Second,
		MaxStreams:       100,
	}
}

// testOrigin returns the origin client of c, its zero fields set: no
// Forwarded field, 64 KiB heads, 10 s timeouts.
func testOrigin(c origin.Config) *origin.Client {
	if c.Forwarded == "" {
		c.Forwarded = origin.ForwardedNone
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = 65536
	}
	if c.ResponseHeaderTimeout == 0 {
		c.ResponseHeaderTimeout = 10 * time.Second
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 10 * time.Second
	}
	oc, err := origin.New(c)
	if err != nil {
		panic(err)
	}
	return oc
}

// startProxy serves cfg's HTTP/3 under policy until the test ends, when
// it drains (GOAWAY) and closes every connection.
func startProxy(t testing.TB, cfg Config, policy *gate.Policy) *testProxy {
	t.Helper()
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cert, roots := proxytest.SelfSigned(t)
	base := &tls.Config{Certificates: []tls.Certificate{cert}}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	ln, err := tr.Listen(TLSConfig(func() *tls.Config { return base }), srv.QUICConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cut, cutNow := context.WithCancel(context.Background())
	p := *policy
	p.Cut = cut
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			wg.Go(func() {
				client := c.RemoteAddr().(*net.UDPAddr).AddrPort()
				sess := p.NewSession(ctx, netip.AddrPortFrom(client.Addr().Unmap(), client.Port()), nil, nil)
				srv.ServeConn(c, sess)
				sess.Close()
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		cancel() // GOAWAY
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cutNow()
			<-done
		}
		cutNow()
		tr.Close()
		srv.Close() // its idle stream workers
	})
	return &testProxy{Addr: udp.LocalAddr().String(), Roots: roots, cert: cert.Certificate[0], srv: srv, drain: cancel, cut: cutNow}
}

// dial opens a QUIC connection to the proxy with HTTP/3's ALPN and
// datagrams on, closed when the test ends.
func (p *testProxy) dial(t testing.TB) *quic.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := quic.DialAddr(ctx, p.Addr, &tls.Config{RootCAs: p.Roots, NextProtos: []string{http3.NextProtoH3}},
		&quic.Config{EnableDatagrams: true, InitialPacketSize: 1350})
	if err != nil {
		t.Fatalf("dial the proxy: %v", err)
	}
	t.Cleanup(func() { c.CloseWithError(0, "") })
	return c
}

// client returns quic-go's HTTP/3 client on a new connection to the
// proxy: its RoundTrip sends a request with :scheme http and the URL's
// authority as it is, the form of a request to a forward proxy.
func (p *testProxy) client(t testing.TB) *http3.ClientConn {
	t.Helper()
	tr := &http3.Transport{EnableDatagrams: true}
	return tr.NewClientConn(p.dial(t))
}

// get sends a GET for url through cc with the Proxy-Authorization value
// authz ("" = none).
func get(t testing.TB, cc *http3.ClientConn, url, authz string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if authz != "" {
		req.Header.Set("Proxy-Authorization", authz)
	}
	resp, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read the body: %v", url, err)
	}
	return resp, body
}
