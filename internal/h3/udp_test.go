package h3

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/masque-go"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/yosida95/uritemplate/v3"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/limits"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// dialUDP asks the proxy for a CONNECT-UDP flow to target with
// masque-go's client, with the Proxy-Authorization value authz.
func (p *testProxy) dialUDP(t testing.TB, target, authz string) (*masque.Conn, *http.Response, error) {
	t.Helper()
	tmpl := uritemplate.MustNew("https://" + p.Addr + "/.well-known/masque/udp/{target_host}/{target_port}/")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	req, err := masque.NewRequest(ctx, tmpl, target)
	if err != nil {
		t.Fatal(err)
	}
	if authz != "" {
		req.Header().Set("Proxy-Authorization", authz)
	}
	tr := &masque.Transport{TLSClientConfig: &tls.Config{RootCAs: p.Roots, NextProtos: []string{http3.NextProtoH3}}}
	conn, rsp, err := tr.Dial(req)
	if conn != nil {
		t.Cleanup(func() { conn.Close() })
	}
	return conn, rsp, err
}

// TestConnectUDPDNS sends a real DNS query through a CONNECT-UDP flow that
// masque-go's client opened, to a DNS server on the loopback, and reads
// the answer; the flow's access log record counts its payload bytes.
func TestConnectUDPDNS(t *testing.T) {
	var out proxytest.LogBuffer
	al := proxytest.JSONAccessLog(t, &out)
	dns := proxytest.StartDNS(t)
	m := metrics.New(metrics.Config{})
	p := startProxy(t, testConfig(), proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Users: map[string]string{testUser: testPass}, AccessLog: al, Metrics: m.Listener("h3", "https"),
	}))

	if _, rsp, err := p.dialUDP(t, dns.UDP, basic(testUser, "wrong")); err == nil || rsp == nil || rsp.StatusCode != 407 {
		t.Fatalf("CONNECT-UDP with a wrong password: %v %v, want 407", rsp, err)
	}
	conn, _, err := p.dialUDP(t, dns.UDP, basic(testUser, testPass))
	if err != nil {
		t.Fatalf("CONNECT-UDP: %v", err)
	}
	q := proxytest.DNSQuery(t, 0x5353, "rustle.test.")
	if _, err := conn.WriteTo(q, nil); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1500)
	n, _, err := conn.ReadFrom(buf)
	if err != nil {
		t.Fatalf("read the DNS answer: %v", err)
	}
	proxytest.CheckDNSAnswer(t, buf[:n], 0x5353)
	conn.Close()
	proxytest.WaitFor(t, "the flow's access log record", func() bool {
		return strings.Contains(out.String(), `"status":200`)
	})
	log := out.String()
	for _, want := range []string{`"protocol":"h3"`, `"method":"CONNECT-UDP"`, `"status":407`,
		`"bytes_up":` + strconv.Itoa(len(q)), `"bytes_down":` + strconv.Itoa(n), `"target":"udp://127.0.0.1:`} {
		if !strings.Contains(log, want) {
			t.Errorf("access log lacks %s:\n%s", want, log)
		}
	}
	for _, c := range []struct {
		name, direction string
		want            float64
	}{
		{"rustle_datagrams_total", "up", 1}, {"rustle_datagrams_total", "down", 1}, {"rustle_datagrams_total", "refused", 0},
		{"rustle_bytes_total", "up", float64(len(q))}, {"rustle_bytes_total", "down", float64(n)},
	} {
		if got := proxytest.Metric(t, m, c.name, "direction", c.direction); got != c.want {
			t.Errorf("%s{direction=%q} = %v, want %v", c.name, c.direction, got, c.want)
		}
	}
	if got := proxytest.Metric(t, m, "rustle_tunnels_total"); got != 1 {
		t.Errorf("rustle_tunnels_total = %v, want 1 (the flow)", got)
	}
}

// TestConnectUDPRefused checks the refusals of a CONNECT-UDP request: the
// private-destination guard (a loopback target), an access rule denying
// the udp protocol, and a path the template does not match.
func TestConnectUDPRefused(t *testing.T) {
	dns := proxytest.StartDNS(t)
	tests := []struct {
		name   string
		pc     proxytest.PolicyConfig
		status int
	}{
		{"private destination", proxytest.PolicyConfig{Guard: true}, 403},
		{"udp denied by a rule", proxytest.PolicyConfig{Default: acl.Allow,
			Rules: []acl.Rule{{Name: "no-udp", Action: acl.Deny, Protocols: []string{"udp"}}}}, 403},
		{"udp allowed by a rule", proxytest.PolicyConfig{Default: acl.Deny,
			Rules: []acl.Rule{{Name: "udp", Action: acl.Allow, Protocols: []string{"udp"}}}}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := startProxy(t, testConfig(), proxytest.NewPolicy(t, tt.pc))
			conn, rsp, err := p.dialUDP(t, dns.UDP, "")
			if rsp == nil {
				t.Fatalf("no response: %v", err)
			}
			if rsp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d (%v)", rsp.StatusCode, tt.status, err)
			}
			if tt.status == 200 {
				conn.Close()
			}
		})
	}
}

// TestConnectUDPFlowLimit opens more flows than a connection may have on
// one QUIC connection: those past MaxFlows are answered 503, and closing
// one lets the next through.
func TestConnectUDPFlowLimit(t *testing.T) {
	dns := proxytest.StartDNS(t)
	cfg := testConfig()
	cfg.MaxFlows = 3
	p := startProxy(t, cfg, proxytest.NewPolicy(t, proxytest.PolicyConfig{}))
	qc := p.dial(t)
	cc, err := (&masque.Transport{}).NewClientConn(qc)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := uritemplate.MustNew("https://" + p.Addr + "/.well-known/masque/udp/{target_host}/{target_port}/")
	open := func() (*masque.Conn, int) {
		req, err := masque.NewRequest(context.Background(), tmpl, dns.UDP)
		if err != nil {
			t.Fatal(err)
		}
		c, rsp, err := cc.Dial(req)
		if rsp == nil {
			t.Fatalf("no response: %v", err)
		}
		return c, rsp.StatusCode
	}
	var conns []*masque.Conn
	for i := range 20 {
		c, status := open()
		want := 200
		if i >= cfg.MaxFlows {
			want = 503
		}
		if status != want {
			t.Fatalf("flow %d: %d, want %d", i, status, want)
		}
		if c != nil {
			conns = append(conns, c)
		}
	}
	conns[0].Close()
	proxytest.WaitFor(t, "the closed flow to be given back", func() bool { return p.srv.Flows() < cfg.MaxFlows })
	c, status := open()
	if status != 200 {
		t.Fatalf("after a flow closed: %d, want 200", status)
	}
	c.Close()
	for _, c := range conns[1:] {
		c.Close()
	}
	proxytest.WaitFor(t, "every flow to end", func() bool { return p.srv.Flows() == 0 })
}

// TestConnectUDPIdle checks that a flow carrying no datagram ends after
// UDPIdleTimeout: the client's reads fail once the proxy ends the stream.
func TestConnectUDPIdle(t *testing.T) {
	dns := proxytest.StartDNS(t)
	cfg := testConfig()
	cfg.UDPIdleTimeout = 200 * time.Millisecond
	p := startProxy(t, cfg, proxytest.NewPolicy(t, proxytest.PolicyConfig{}))
	conn, _, err := p.dialUDP(t, dns.UDP, "")
	if err != nil {
		t.Fatal(err)
	}
	proxytest.WaitFor(t, "the idle flow to end", func() bool { return p.srv.Flows() == 0 })
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _, err = conn.ReadFrom(make([]byte, 100))
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("read on an idled-out flow: %v, want the stream's end", err)
	}
}

// TestConnectUDPPaced opens a flow of a user whose bytes are paced: its
// datagrams wait on the user's bucket on a goroutine of the relay's own,
// not the connection's poller, and it is still one of the connection's
// flows, ended by their one idle timer.
func TestConnectUDPPaced(t *testing.T) {
	var out proxytest.LogBuffer
	al := proxytest.JSONAccessLog(t, &out)
	dns := proxytest.StartDNS(t)
	cfg := testConfig()
	cfg.UDPIdleTimeout = 300 * time.Millisecond
	p := startProxy(t, cfg, proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Users: map[string]string{testUser: testPass}, AccessLog: al,
		Limits: &limits.Config{UserBytesPerSecond: 1 << 20, UserBytesBurst: 64 << 10},
	}))
	conn, _, err := p.dialUDP(t, dns.UDP, basic(testUser, testPass))
	if err != nil {
		t.Fatalf("CONNECT-UDP: %v", err)
	}
	q := proxytest.DNSQuery(t, 0x5354, "paced.test.")
	if _, err := conn.WriteTo(q, nil); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1500)
	n, _, err := conn.ReadFrom(buf)
	if err != nil {
		t.Fatalf("read the DNS answer: %v", err)
	}
	proxytest.CheckDNSAnswer(t, buf[:n], 0x5354)
	proxytest.WaitFor(t, "the idle flow to end", func() bool { return p.srv.Flows() == 0 })
	proxytest.WaitFor(t, "the flow's access log record", func() bool {
		return strings.Contains(out.String(), `"bytes_down":`+strconv.Itoa(n))
	})
	if log := out.String(); !strings.Contains(log, `"bytes_up":`+strconv.Itoa(len(q))) {
		t.Errorf("access log lacks the flow's bytes up:\n%s", log)
	}
}

// TestConnectUDPIdleBusy opens two flows on one connection, whose flows
// share one idle timer (gate.FlowGroup): both exchange datagrams for
// longer than UDPIdleTimeout, then one stops and ends after its timeout,
// while the other, exchanging datagrams all along, outlives two more.
func TestConnectUDPIdleBusy(t *testing.T) {
	const idle = time.Second
	echo := proxytest.NewUDPEcho(t, "udp4")
	cfg := testConfig()
	cfg.UDPIdleTimeout = idle
	p := startProxy(t, cfg, proxytest.NewPolicy(t, proxytest.PolicyConfig{}))
	cc, err := (&masque.Transport{}).NewClientConn(p.dial(t))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := uritemplate.MustNew("https://" + p.Addr + "/.well-known/masque/udp/{target_host}/{target_port}/")
	var flows [2]*masque.Conn
	for i := range flows {
		req, err := masque.NewRequest(context.Background(), tmpl, echo.Addr.String())
		if err != nil {
			t.Fatal(err)
		}
		c, rsp, err := cc.Dial(req)
		if err != nil || rsp.StatusCode != 200 {
			t.Fatalf("open flow %d: %v, %v", i, rsp, err)
		}
		t.Cleanup(func() { c.Close() })
		flows[i] = c
	}
	buf := make([]byte, 1500)
	// roundTrip sends on a flow until an echo is back (UDP is
	// unreliable, even on the loopback).
	roundTrip := func(i int) {
		t.Helper()
		c := flows[i]
		for try := 0; ; try++ {
			if _, err := c.WriteTo([]byte("ping"), nil); err != nil {
				t.Fatalf("flow %d: write: %v", i, err)
			}
			c.SetReadDeadline(time.Now().Add(idle / 4))
			n, _, err := c.ReadFrom(buf)
			if err == nil && string(buf[:n]) == "ping" {
				return
			}
			if !errors.Is(err, os.ErrDeadlineExceeded) || try == 20 {
				t.Fatalf("flow %d: read: %q, %v", i, buf[:n], err)
			}
		}
	}
	for start := time.Now(); time.Since(start) < idle*3/2; {
		roundTrip(0)
		roundTrip(1)
		time.Sleep(idle / 10)
	}
	if n := p.srv.Flows(); n != 2 {
		t.Fatalf("%d flows while both exchange datagrams, want 2", n)
	}
	// Flow 1 stops; flow 0 goes on, past flow 1's end.
	start := time.Now()
	for p.srv.Flows() == 2 || time.Since(start) < 2*idle {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("%d flows 30 s after flow 1 stopped, want it ended", p.srv.Flows())
		}
		roundTrip(0)
		time.Sleep(idle / 10)
	}
	if n := p.srv.Flows(); n != 1 {
		t.Fatalf("%d flows, want the busy one left", n)
	}
	roundTrip(0)
	flows[1].SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := flows[1].ReadFrom(buf); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read on the idled-out flow: %v, want the stream's end", err)
	}
}

// rawFlow opens a CONNECT-UDP stream to target with quic-go's low-level
// HTTP/3 client, so that the test can send datagrams and capsules of its
// own making.
func (p *testProxy) rawFlow(t *testing.T, target string) *http3.RequestStream {
	t.Helper()
	qc := p.dial(t)
	cc := (&http3.Transport{EnableDatagrams: true}).NewClientConn(qc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	select {
	case <-cc.ReceivedSettings():
	case <-ctx.Done():
		t.Fatal("no SETTINGS from the proxy")
	}
	str, err := cc.OpenRequestStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(target)
	req, err := http.NewRequestWithContext(ctx, http.MethodConnect,
		"https://"+p.Addr+"/.well-known/masque/udp/"+host+"/"+port+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Proto = "connect-udp"
	req.Header.Set(http3.CapsuleProtocolHeader, "?1")
	if err := str.SendRequestHeader(req); err != nil {
		t.Fatal(err)
	}
	rsp, err := str.ReadResponse()
	if err != nil || rsp.StatusCode != 200 {
		t.Fatalf("CONNECT-UDP: %v %v", rsp, err)
	}
	return str
}

// TestConnectUDPMalformed sends a flow datagrams it must drop (a context
// ID it never registered, a truncated context ID) among well-formed ones:
// only the well-formed ones reach the target, and the flow goes on. Then a
// malformed capsule on the stream ends the flow.
func TestConnectUDPMalformed(t *testing.T) {
	dns := proxytest.StartDNS(t)
	p := startProxy(t, testConfig(), proxytest.NewPolicy(t, proxytest.PolicyConfig{}))
	str := p.rawFlow(t, dns.UDP)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, tt := range []struct {
		name   string
		prefix []byte
		answer bool
	}{
		{"context ID 2", []byte{0x02}, false},
		{"truncated context ID", []byte{0x80, 0x00}, false},
		{"context ID 0", []byte{0x00}, true},
		{"two-byte context ID 0", []byte{0x40, 0x00}, true},
	} {
		id := uint16(100 + i)
		if err := str.SendDatagram(append(tt.prefix, proxytest.DNSQuery(t, id, "rustle.test.")...)); err != nil {
			t.Fatalf("%s: send: %v", tt.name, err)
		}
		if !tt.answer {
			continue
		}
		b, err := str.ReceiveDatagram(ctx)
		if err != nil {
			t.Fatalf("%s: no answer: %v", tt.name, err)
		}
		if b[0] != 0 {
			t.Fatalf("%s: answer with context ID %d, want 0", tt.name, b[0])
		}
		proxytest.CheckDNSAnswer(t, b[1:], id)
	}
	// A DATAGRAM capsule longer than the stream goes on: the stream ends
	// within a capsule, which ends the flow.
	str.Write([]byte{0x00, 0x7f, 0xff, 0x00})
	str.Close()
	proxytest.WaitFor(t, "the flow to end", func() bool { return p.srv.Flows() == 0 })
}

// TestConnectUDPCapsuleSkipped sends a flow an unknown capsule in two
// parts: the flow's goroutine waits within it between them, then, once
// it has skipped it, waits for the stream's next bytes in waitData again
// (on a 2 KiB stack, where a wait beneath the capsule reader takes 4),
// and the flow goes on.
func TestConnectUDPCapsuleSkipped(t *testing.T) {
	dns := proxytest.StartDNS(t)
	p := startProxy(t, testConfig(), proxytest.NewPolicy(t, proxytest.PolicyConfig{}))
	str := p.rawFlow(t, dns.UDP)
	capsule := append([]byte{0x2a, 0x40, 100}, make([]byte, 100)...) // type 0x2a, 100 bytes
	if _, err := str.Write(capsule[:10]); err != nil {
		t.Fatal(err)
	}
	proxytest.WaitFor(t, "the flow's goroutine to wait within the capsule", func() bool {
		s := flowStack()
		return strings.Contains(s, "CapsuleReader") && !strings.Contains(s, "waitData")
	})
	if _, err := str.Write(capsule[10:]); err != nil {
		t.Fatal(err)
	}
	proxytest.WaitFor(t, "the flow's goroutine to wait in waitData after the capsule", func() bool {
		return strings.Contains(flowStack(), "waitData")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := str.SendDatagram(append([]byte{0x00}, proxytest.DNSQuery(t, 7, "rustle.test.")...)); err != nil {
		t.Fatal(err)
	}
	b, err := str.ReceiveDatagram(ctx)
	if err != nil {
		t.Fatalf("no answer after the capsule: %v", err)
	}
	proxytest.CheckDNSAnswer(t, b[1:], 7)
}

// flowStack returns the stack of the process's flow goroutine (the test
// has one flow), "" when there is none.
func flowStack() string {
	var b strings.Builder
	pprof.Lookup("goroutine").WriteTo(&b, 2)
	for g := range strings.SplitSeq(b.String(), "\n\n") {
		if strings.Contains(g, "h3.(*flow).run") {
			return g
		}
	}
	return ""
}

// TestConnectUDPQUIC runs a real QUIC connection through a CONNECT-UDP
// flow: quic-go dials a local quic-go HTTP/3 origin over masque-go's
// proxied PacketConn, and an HTTP/3 GET comes back.
func TestConnectUDPQUIC(t *testing.T) {
	cert, roots := proxytest.SelfSigned(t)
	originUDP, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	origin := &http3.Server{
		TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert}}),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte("h3 origin " + r.URL.Path + " " + r.Proto))
		}),
	}
	served := make(chan struct{})
	go func() { defer close(served); origin.Serve(originUDP) }()
	t.Cleanup(func() { origin.Close(); originUDP.Close(); <-served })

	t.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true") // the proxied PacketConn has no socket buffers
	p := startProxy(t, testConfig(), proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Users: map[string]string{testUser: testPass},
	}))
	pconn, _, err := p.dialUDP(t, originUDP.LocalAddr().String(), basic(testUser, testPass))
	if err != nil {
		t.Fatalf("CONNECT-UDP: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The flow's datagrams carry at most about 1,200 bytes of QUIC packet
	// inside the proxy connection's own packets: quic-go's minimum.
	qc, err := quic.Dial(ctx, pconn, originUDP.LocalAddr(),
		&tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{http3.NextProtoH3}},
		&quic.Config{InitialPacketSize: 1200, DisablePathMTUDiscovery: true})
	if err != nil {
		t.Fatalf("QUIC to the origin through the flow: %v", err)
	}
	defer qc.CloseWithError(0, "")
	cc := (&http3.Transport{}).NewClientConn(qc)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+originUDP.LocalAddr().String()+"/through", nil)
	resp, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatalf("HTTP/3 GET through the flow: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 || string(body) != "h3 origin /through HTTP/3.0" {
		t.Fatalf("GET through the flow: %d %q %v", resp.StatusCode, body, err)
	}
}

// TestConnectUDPListenerFlowLimit opens flows from several connections:
// past MaxListenerFlows in all, each is answered 503, though no
// connection has reached MaxFlows.
func TestConnectUDPListenerFlowLimit(t *testing.T) {
	dns := proxytest.StartDNS(t)
	cfg := testConfig()
	cfg.MaxFlows, cfg.MaxListenerFlows = 10, 4
	p := startProxy(t, cfg, proxytest.NewPolicy(t, proxytest.PolicyConfig{}))
	ok, refused := 0, 0
	for range 4 { // connections
		for range 3 { // flows on each
			_, rsp, err := p.dialUDP(t, dns.UDP, "")
			switch {
			case err == nil:
				ok++
			case rsp != nil && rsp.StatusCode == 503:
				refused++
			default:
				t.Fatalf("flow: %v %v", rsp, err)
			}
		}
	}
	if ok != cfg.MaxListenerFlows || refused != 12-cfg.MaxListenerFlows || p.srv.Flows() != cfg.MaxListenerFlows {
		t.Fatalf("%d flows granted, %d refused, %d open: want %d granted, the rest refused", ok, refused, p.srv.Flows(), cfg.MaxListenerFlows)
	}
}

// TestConnectUDPGuardPerDatagram checks that the private-destination
// guard decides every datagram, not only the flow: once a reload's guard
// (Supersede) refuses the target, the flow's datagrams are dropped and
// counted as refused, though the flow was granted before.
func TestConnectUDPGuardPerDatagram(t *testing.T) {
	dns := proxytest.StartDNS(t)
	m := metrics.New(metrics.Config{})
	guard := dialer.NewGuard([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})
	pol := proxytest.NewPolicy(t, proxytest.PolicyConfig{Metrics: m.Listener("h3", "https")})
	pol.Dialer = proxytest.NewDialer(t, dialer.Config{Timeout: 5 * time.Second, Guard: guard})
	p := startProxy(t, testConfig(), pol)
	str := p.rawFlow(t, dns.UDP)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := str.SendDatagram(append([]byte{0}, proxytest.DNSQuery(t, 1, "before.test.")...)); err != nil {
		t.Fatal(err)
	}
	b, err := str.ReceiveDatagram(ctx)
	if err != nil {
		t.Fatalf("answer before the guard changed: %v", err)
	}
	proxytest.CheckDNSAnswer(t, b[1:], 1)

	guard.Supersede(dialer.NewGuard(nil)) // loopback refused from now on
	for id := uint16(2); id < 5; id++ {
		if err := str.SendDatagram(append([]byte{0}, proxytest.DNSQuery(t, id, "after.test.")...)); err != nil {
			t.Fatal(err)
		}
	}
	proxytest.WaitFor(t, "the refused datagrams to be counted", func() bool {
		return proxytest.Metric(t, m, "rustle_datagrams_total", "direction", "refused") == 3
	})
	if up := proxytest.Metric(t, m, "rustle_datagrams_total", "direction", "up"); up != 1 {
		t.Errorf("datagrams sent to the target: %v, want 1 (the one before the guard changed)", up)
	}
	// Let through again, the flow goes on: the next datagram is answered.
	guard.Supersede(dialer.NewGuard([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}))
	if err := str.SendDatagram(append([]byte{0}, proxytest.DNSQuery(t, 9, "again.test.")...)); err != nil {
		t.Fatal(err)
	}
	if b, err = str.ReceiveDatagram(ctx); err != nil {
		t.Fatalf("answer after the guard let the target through again: %v", err)
	}
	proxytest.CheckDNSAnswer(t, b[1:], 9)
}

// TestConnectUDPQuota checks that a CONNECT-UDP flow opened under a byte
// quota is metered as its datagrams move and ended once the quota is
// spent (issue 27: one flow carried 12 times a 200 KiB quota and stayed
// open): within the documented slack, logged with the reason quota, the
// quota counting exactly the record's bytes.
func TestConnectUDPQuota(t *testing.T) {
	var out proxytest.LogBuffer
	al := proxytest.JSONAccessLog(t, &out)
	echo := proxytest.NewUDPEcho(t, "udp4")
	q := proxytest.QuotaTracker()
	p := startProxy(t, testConfig(), proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Users: map[string]string{testUser: testPass}, AccessLog: al, Quota: q,
	}))
	conn, _, err := p.dialUDP(t, echo.Addr.String(), basic(testUser, testPass))
	if err != nil {
		t.Fatalf("CONNECT-UDP: %v", err)
	}
	const size = 1200
	buf := make([]byte, 1500)
	_, err = proxytest.EchoFlow(t, func(b []byte) error {
		_, err := conn.WriteTo(b, nil)
		return err
	}, func() ([]byte, error) {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _, err := conn.ReadFrom(buf)
		return buf[:n], err
	}, size, 20*proxytest.FlowQuotaBytes)
	proxytest.CheckFlowQuota(t, &out, q, testUser, size, err)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the flow was not ended: %v", err)
	}
}

// TestConnectUDPFlowsShareConnection relays bursts of datagrams on many
// flows of one QUIC connection at once, whose target sockets one
// gate.FlowPoller reads on Linux: every flow gets back its own echoes
// and no other flow's, also after some flows ended and new ones took
// their place (and, it may be, their sockets' descriptors).
func TestConnectUDPFlowsShareConnection(t *testing.T) {
	echo := proxytest.NewUDPEcho(t, "udp4")
	p := startProxy(t, testConfig(), proxytest.NewPolicy(t, proxytest.PolicyConfig{}))
	qc := p.dial(t)
	cc, err := (&masque.Transport{}).NewClientConn(qc)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := uritemplate.MustNew("https://" + p.Addr + "/.well-known/masque/udp/{target_host}/{target_port}/")
	open := func(t *testing.T) *masque.Conn {
		t.Helper()
		req, err := masque.NewRequest(context.Background(), tmpl, echo.Addr.String())
		if err != nil {
			t.Fatal(err)
		}
		c, rsp, err := cc.Dial(req)
		if err != nil || rsp.StatusCode != 200 {
			t.Fatalf("open a flow: %v, %v", rsp, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// exchange sends a burst of datagrams on every flow before reading
	// any, then reads each flow's back, sending again what a second did
	// not bring back (UDP is unreliable, even on the loopback).
	exchange := func(t *testing.T, round string, flows []*masque.Conn) {
		t.Helper()
		const burst = 3
		payload := func(i, j int) string { return round + "-flow" + strconv.Itoa(i) + "-dgram" + strconv.Itoa(j) }
		for i, c := range flows {
			for j := range burst {
				if _, err := c.WriteTo([]byte(payload(i, j)), nil); err != nil {
					t.Fatalf("flow %d: write: %v", i, err)
				}
			}
		}
		buf := make([]byte, 1500)
		for i, c := range flows {
			missing := map[string]bool{}
			for j := range burst {
				missing[payload(i, j)] = true
			}
			deadline := time.Now().Add(10 * time.Second)
			for len(missing) > 0 {
				if time.Now().After(deadline) {
					t.Fatalf("flow %d: no echo of %v", i, missing)
				}
				c.SetReadDeadline(time.Now().Add(time.Second))
				n, _, err := c.ReadFrom(buf)
				if errors.Is(err, os.ErrDeadlineExceeded) {
					for m := range missing {
						c.WriteTo([]byte(m), nil)
					}
					continue
				}
				if err != nil {
					t.Fatalf("flow %d: read: %v", i, err)
				}
				got := string(buf[:n])
				if !strings.HasPrefix(got, round+"-flow"+strconv.Itoa(i)+"-") {
					t.Fatalf("flow %d got %q, another flow's datagram", i, got)
				}
				delete(missing, got)
			}
		}
	}
	var flows []*masque.Conn
	for range 8 {
		flows = append(flows, open(t))
	}
	exchange(t, "first", flows)
	for _, c := range flows[:4] {
		c.Close()
	}
	proxytest.WaitFor(t, "the closed flows to end", func() bool { return p.srv.Flows() == 4 })
	flows = flows[4:]
	for range 4 {
		flows = append(flows, open(t))
	}
	exchange(t, "second", flows)
}

// TestConnectUDPRevoked revokes the session of a user's open flow (as a
// reload that removed the user does): the flow ends at once, its stream
// with it, logged with the reason revoked.
func TestConnectUDPRevoked(t *testing.T) {
	var out proxytest.LogBuffer
	al := proxytest.JSONAccessLog(t, &out)
	echo := proxytest.NewUDPEcho(t, "udp4")
	reg := new(gate.Registry)
	p := startProxy(t, testConfig(), proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Users: map[string]string{testUser: testPass}, AccessLog: al, Revoked: reg,
	}))
	conn, _, err := p.dialUDP(t, echo.Addr.String(), basic(testUser, testPass))
	if err != nil {
		t.Fatalf("CONNECT-UDP: %v", err)
	}
	buf := make([]byte, 1500)
	for {
		// UDP is unreliable, even on the loopback: send again until one
		// echo is back.
		if _, err := conn.WriteTo([]byte("before"), nil); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(time.Second))
		n, _, err := conn.ReadFrom(buf)
		if err == nil && string(buf[:n]) == "before" {
			break
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read the echo: %q, %v", buf[:n], err)
		}
	}
	if got := reg.Revoke(func(_, user string) bool { return user != testUser }); got != 1 {
		t.Fatalf("Revoke = %d, want 1", got)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := conn.ReadFrom(buf); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after the revocation: %v, want the flow's end", err)
	}
	proxytest.WaitFor(t, "the flow's record", func() bool {
		return strings.Contains(out.String(), `"reason":"`+accesslog.ReasonRevoked+`"`)
	})
	proxytest.WaitFor(t, "the flow to be given back", func() bool { return p.srv.Flows() == 0 })
}
