package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/quic-go/masque-go"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/yosida95/uritemplate/v3"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// dialH3 opens a QUIC connection to addr (the https listener's port, over
// UDP) with quic-go's HTTP/3 client on it.
func dialH3(t *testing.T, addr string, roots *x509.CertPool) (*quic.Conn, *http3.ClientConn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qc, err := quic.DialAddr(ctx, addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{http3.NextProtoH3}},
		&quic.Config{EnableDatagrams: true})
	if err != nil {
		t.Fatalf("QUIC to %s: %v", addr, err)
	}
	t.Cleanup(func() { qc.CloseWithError(0, "") })
	return qc, (&http3.Transport{EnableDatagrams: true}).NewClientConn(qc)
}

// h3Get sends a GET for target through cc with the Proxy-Authorization
// value authz, and returns the status and body.
func h3Get(t *testing.T, cc *http3.ClientConn, target, authz string) (int, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", target, nil)
	if authz != "" {
		req.Header.Set("Proxy-Authorization", authz)
	}
	resp, err := cc.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// TestHTTPSListenerH3 checks that an https listener with http3 on serves
// HTTP/3 on its port number over UDP, with its certificate and users: a
// forwarded GET, a 407, and a CONNECT tunnel that a shutdown lets run to
// its end (GOAWAY, then drain).
func TestHTTPSListenerH3(t *testing.T) {
	tl, roots := proxyCerts(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "h3 origin "+r.URL.Path+" "+r.Proto)
	}))
	t.Cleanup(origin.Close)
	echo := proxytest.NewEcho(t)
	s, addrs := startListeners(t, 5*time.Second,
		config.Listener{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl, HTTP3: true})
	_, cc := dialH3(t, addrs[0], roots)
	auth := basicValue("alice", "pw")

	if code, body, err := h3Get(t, cc, origin.URL+"/page", auth); err != nil || code != 200 || body != "h3 origin /page HTTP/1.1" {
		t.Fatalf("GET over h3: %d %q %v", code, body, err)
	}
	if code, _, err := h3Get(t, cc, origin.URL+"/page", ""); err != nil || code != 407 {
		t.Fatalf("GET over h3 without credentials: %d %v, want 407", code, err)
	}

	pr, pw := io.Pipe()
	req, _ := http.NewRequest("CONNECT", "", pr)
	req.URL, req.Host = &url.URL{Host: echo.Addr}, echo.Addr
	req.Header.Set("Proxy-Authorization", auth)
	resp, err := cc.RoundTrip(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT over h3: %v %v", resp, err)
	}
	defer resp.Body.Close()

	shut := shutdownAsync(s)
	// GOAWAY: the client's next request is refused, the tunnel goes on.
	proxytest.WaitFor(t, "the GOAWAY to refuse a new request", func() bool {
		_, _, err := h3Get(t, cc, origin.URL+"/late", auth)
		return err != nil
	})
	checkDrained(t, shut, pw, resp.Body, "HTTP/3")
}

// TestReloadH3 checks that a reload that turns http3 on for a listener it
// keeps opens the UDP socket on the listener's port; that a later reload
// keeps the socket and applies the new users to it: a connection whose
// user the reload removed is closed, and a new one authenticates with the
// new users on the same port; and that a reload turning http3 off closes
// the socket.
func TestReloadH3(t *testing.T) {
	tl, roots := proxyCerts(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(origin.Close)
	// The listener's port is free over UDP until the reload turns http3
	// on: the reload cannot move the listener to another port.
	port, release := proxytest.TCPPortWithUDP(t)
	withH3 := func(on bool, users ...config.User) func(c *config.Config) {
		return func(c *config.Config) {
			c.Auth.Users = users
			c.Listen = []config.Listener{{Name: "main", Address: port, Protocol: "https", TLS: tl, HTTP3: on}}
		}
	}
	s := startReloadable(t, reloadConfig(t, withH3(false, config.User{Name: "alice", Password: "pw"})))
	addr := addrOf(s, "main")
	// A reload turns http3 on for the listener it keeps: a UDP socket on
	// the same port.
	release()
	if err := s.Reload(reloadConfig(t, withH3(true, config.User{Name: "alice", Password: "pw"}))); err != nil {
		t.Fatalf("Reload with http3: %v", err)
	}
	if got := addrOf(s, "main"); got != addr {
		t.Fatalf("listener moved from %s to %s", addr, got)
	}
	aliceConn, alice := dialH3(t, addr, roots)
	if code, _, err := h3Get(t, alice, origin.URL, basicValue("alice", "pw")); err != nil || code != 200 {
		t.Fatalf("before the reload: %d %v", code, err)
	}

	if err := s.Reload(reloadConfig(t, withH3(true, config.User{Name: "bob", Password: "b"}))); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	select {
	case <-aliceConn.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the removed user's QUIC connection is still open after the reload")
	}
	_, bob := dialH3(t, addr, roots)
	if code, _, err := h3Get(t, bob, origin.URL, basicValue("bob", "b")); err != nil || code != 200 {
		t.Fatalf("the new user after the reload: %d %v", code, err)
	}
	if code, _, err := h3Get(t, bob, origin.URL, basicValue("alice", "pw")); err != nil || code != 407 {
		t.Fatalf("the removed user after the reload: %d %v, want 407", code, err)
	}

	if err := s.Reload(reloadConfig(t, withH3(false, config.User{Name: "bob", Password: "b"}))); err != nil {
		t.Fatalf("Reload without http3: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := quic.DialAddr(ctx, addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{http3.NextProtoH3}}, nil); err == nil {
		t.Fatal("QUIC handshake succeeded after a reload turned http3 off")
	}
}

// TestHTTPSListenerConnectUDP opens a CONNECT-UDP flow with masque-go's
// client on an https listener with http3 on, through the configured URI
// template, and carries a real DNS query to a DNS server on the loopback
// (which allow_private lets through); timeouts.udp_idle ends the flow.
func TestHTTPSListenerConnectUDP(t *testing.T) {
	tl, roots := proxyCerts(t)
	dns := proxytest.StartDNS(t)
	cfg := config.Default()
	cfg.Workers = 1
	cfg.Auth.Users = []config.User{{Name: "alice", Password: "pw"}}
	cfg.AllowPrivate = []string{"127.0.0.0/8"}
	cfg.HTTP3.UDPTemplate = "/udp?h={target_host}&p={target_port}"
	cfg.Timeouts.UDPIdle.Duration = 300 * time.Millisecond
	cfg.Listen = []config.Listener{{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl, HTTP3: true}}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s := startReloadable(t, cfg)
	addr := addrOf(s, "tls")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := masque.NewRequest(ctx, uritemplate.MustNew("https://"+addr+"/udp?h={target_host}&p={target_port}"), dns.UDP)
	if err != nil {
		t.Fatal(err)
	}
	req.Header().Set("Proxy-Authorization", basicValue("alice", "pw"))
	tr := &masque.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{http3.NextProtoH3}}}
	conn, _, err := tr.Dial(req)
	if err != nil {
		t.Fatalf("CONNECT-UDP: %v", err)
	}
	defer conn.Close()
	if _, err := conn.WriteTo(proxytest.DNSQuery(t, 7, "rustle.test."), nil); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1500)
	n, _, err := conn.ReadFrom(buf)
	if err != nil {
		t.Fatalf("read the DNS answer: %v", err)
	}
	proxytest.CheckDNSAnswer(t, buf[:n], 7)
	// Idle for timeouts.udp_idle: the proxy ends the flow.
	if _, _, err := conn.ReadFrom(buf); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read on an idle flow: %v, want the flow's end", err)
	}
}
