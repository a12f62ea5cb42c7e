package h2

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/masque"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// connectUDP opens a CONNECT-UDP stream over HTTP/2 (extended CONNECT,
// :protocol connect-udp, RFC 9298 §5) with Go's HTTP/2 client, to target
// through the well-known URI template, and returns the response and the
// request body's writer.
func connectUDP(t *testing.T, p *testProxy, target, authz string) (*http.Response, io.WriteCloser) {
	t.Helper()
	host, port, _ := net.SplitHostPort(target)
	pr, pw := io.Pipe()
	req := newRequest(t, "CONNECT", "https://"+p.addr+"/.well-known/masque/udp/"+host+"/"+port+"/", pr)
	req.Header.Set(":protocol", "connect-udp")
	req.Header.Set("Capsule-Protocol", "?1")
	if authz != "" {
		req.Header.Set("Proxy-Authorization", authz)
	}
	resp, err := p.client(t).RoundTrip(req)
	if err != nil {
		t.Fatalf("CONNECT-UDP: %v", err)
	}
	t.Cleanup(func() { pw.Close(); resp.Body.Close() })
	return resp, pw
}

// TestConnectUDP carries a real DNS query in a DATAGRAM capsule over an
// HTTP/2 stream to a DNS server on the loopback, and reads the answer in
// a capsule; capsules of other types and datagrams of other context IDs
// are skipped; the access log records the flow. The guard and the
// credentials refuse as on any other request.
func TestConnectUDP(t *testing.T) {
	var out proxytest.LogBuffer
	al := proxytest.JSONAccessLog(t, &out)
	dns := proxytest.StartDNS(t)
	p := startProxy(t, testConfig(Config{}), proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Users: map[string]string{"u": "pw"}, AccessLog: al,
	}))

	if resp, _ := connectUDP(t, p, dns.UDP, ""); resp.StatusCode != 407 {
		t.Fatalf("without credentials: %d, want 407", resp.StatusCode)
	}
	resp, pw := connectUDP(t, p, dns.UDP, basic("u"))
	if resp.StatusCode != 200 || resp.Header.Get("Capsule-Protocol") != "?1" {
		t.Fatalf("CONNECT-UDP: %d %v", resp.StatusCode, resp.Header)
	}
	q := proxytest.DNSQuery(t, 0x4242, "rustle.test.")
	var b []byte
	b = masque.AppendCapsule(b, 0x2a, []byte("an unknown capsule, skipped"))
	b = masque.AppendCapsule(b, masque.CapsuleDatagram, append([]byte{0x05}, proxytest.DNSQuery(t, 1, "wrong.context.")...))
	b = masque.AppendCapsule(b, masque.CapsuleDatagram, append([]byte{masque.ContextUDP}, q...))
	if _, err := pw.Write(b); err != nil {
		t.Fatal(err)
	}
	cr := masque.NewCapsuleReader(resp.Body, 65535)
	v, err := cr.Next()
	if err != nil {
		t.Fatalf("read the answer capsule: %v", err)
	}
	if len(v) == 0 || v[0] != masque.ContextUDP {
		t.Fatalf("answer capsule %x: want context ID 0", v)
	}
	proxytest.CheckDNSAnswer(t, v[1:], 0x4242)
	n := len(v) - 1
	pw.Close() // END_STREAM: the flow ends
	if _, err := cr.Next(); err != io.EOF {
		t.Fatalf("after END_STREAM: %v, want the stream's end", err)
	}
	proxytest.WaitFor(t, "the flow's record", func() bool { return strings.Contains(out.String(), `"status":200`) })
	for _, want := range []string{`"method":"CONNECT-UDP"`, `"protocol":"h2"`, `"status":407`,
		`"bytes_up":` + strconv.Itoa(len(q)), `"bytes_down":` + strconv.Itoa(n), `"target":"udp://127.0.0.1:`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("access log lacks %s:\n%s", want, out.String())
		}
	}
}

// TestConnectUDPPrivate checks that the private-destination guard refuses
// a CONNECT-UDP target on the loopback over HTTP/2 (403), and that a path
// the template does not match is answered 404.
func TestConnectUDPPrivate(t *testing.T) {
	dns := proxytest.StartDNS(t)
	p := startProxy(t, testConfig(Config{}), proxytest.NewPolicy(t, proxytest.PolicyConfig{Guard: true}))
	if resp, _ := connectUDP(t, p, dns.UDP, ""); resp.StatusCode != 403 {
		t.Fatalf("a loopback target behind the guard: %d, want 403", resp.StatusCode)
	}
	pr, _ := io.Pipe()
	req := newRequest(t, "CONNECT", "https://"+p.addr+"/elsewhere/", pr)
	req.Header.Set(":protocol", "connect-udp")
	resp, err := p.client(t).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("a path the template does not match: %d, want 404", resp.StatusCode)
	}
}

// TestConnectUDPIdle checks that an HTTP/2 CONNECT-UDP flow that passes no
// datagram for UDPIdleTimeout ends: its stream is reset.
func TestConnectUDPIdle(t *testing.T) {
	dns := proxytest.StartDNS(t)
	p := startProxy(t, testConfig(Config{UDPIdleTimeout: 200 * time.Millisecond}), nil)
	resp, _ := connectUDP(t, p, dns.UDP, "")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT-UDP: %d", resp.StatusCode)
	}
	if _, err := masque.NewCapsuleReader(resp.Body, 65535).Next(); err == nil || err == io.EOF {
		t.Fatalf("read on an idle flow: %v, want the stream reset", err)
	}
}

// TestConnectUDPQuota checks that an HTTP/2 CONNECT-UDP flow opened
// under a byte quota is metered as its capsules move and ended (the
// stream reset) once the quota is spent (issue 27: one flow carried 14
// times a 200 KiB quota and stayed open): within the documented slack,
// logged with the reason quota, the quota counting exactly the record's
// bytes.
func TestConnectUDPQuota(t *testing.T) {
	var out proxytest.LogBuffer
	al := proxytest.JSONAccessLog(t, &out)
	echo := proxytest.NewUDPEcho(t, "udp4")
	q := proxytest.QuotaTracker()
	p := startProxy(t, testConfig(Config{}), proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Users: map[string]string{"u": "pw"}, AccessLog: al, Quota: q,
	}))
	resp, pw := connectUDP(t, p, echo.Addr.String(), basic("u"))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT-UDP: %d", resp.StatusCode)
	}
	cr := masque.NewCapsuleReader(resp.Body, 65535)
	const size = 1200
	_, err := proxytest.EchoFlow(t, func(b []byte) error {
		_, err := pw.Write(masque.AppendCapsule(nil, masque.CapsuleDatagram, append([]byte{masque.ContextUDP}, b...)))
		return err
	}, func() ([]byte, error) {
		v, err := cr.Next()
		if err != nil {
			return nil, err
		}
		if len(v) == 0 || v[0] != masque.ContextUDP {
			t.Fatalf("capsule %x: want context ID 0", v)
		}
		return v[1:], nil
	}, size, 20*proxytest.FlowQuotaBytes)
	proxytest.CheckFlowQuota(t, &out, q, "u", size, err)
}
