package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// The downloads of these tests: a body far larger than what a client
// that stops reading, and the sockets between, can hold.
const (
	bulkSize  = 64 << 20
	bulkRead  = 1 << 20  // what a client reads before it stops
	bulkBound = 16 << 20 // bytes down above this were never delivered
)

// bytesRig is a running server with a plain HTTP, an HTTPS and a SOCKS5
// listener, users alice and bob, and an origin of large downloads.
type bytesRig struct {
	s      *Server
	addr   map[string]string
	roots  *x509.CertPool
	tls    config.ListenerTLS
	origin *proxytest.Origin // /length, /chunked, /close: bulkSize bytes each
	m      *metrics.Metrics
	log    *logBuffer
	// sharePorts has the k-th client connection to each listener come
	// from the same local port, ports[k] (see dial).
	sharePorts bool
	ports      []uint16
	dialled    map[string]int // client connections to each listener so far
}

// bytesConfig is the rig's configuration; bob is a user only withBob.
func bytesConfig(t *testing.T, tl config.ListenerTLS, withBob bool) *config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Workers = 1
	cfg.AllowPrivate = []string{"127.0.0.0/8"}
	cfg.Auth.Users = []config.User{{Name: "alice", Password: "pw"}}
	if withBob {
		cfg.Auth.Users = append(cfg.Auth.Users, config.User{Name: "bob", Password: "pw"})
	}
	cfg.Listen = []config.Listener{
		{Name: "plain", Address: "127.0.0.1:0", Protocol: "http"},
		{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl},
		{Name: "socks", Address: "127.0.0.1:0", Protocol: "socks5"},
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

func startBytesRig(t *testing.T) *bytesRig {
	t.Helper()
	r := &bytesRig{m: metrics.New(metrics.Config{}), log: &logBuffer{}, dialled: map[string]int{}}
	r.origin = proxytest.NewOrigin(t, nil)
	r.origin.Handle("/length", proxytest.Bulk(bulkSize, proxytest.ByLength))
	r.origin.Handle("/chunked", proxytest.Bulk(bulkSize, proxytest.ByChunks))
	r.origin.Handle("/close", proxytest.Bulk(bulkSize, proxytest.ByClose))
	r.tls, r.roots = proxyCerts(t)
	r.s, r.addr = startLogged(t, bytesConfig(t, r.tls, true), nil, r.log, WithMetrics(r.m))
	return r
}

// download is one way of fetching a large body through the proxy.
type download struct {
	name     string
	listener string
	// start opens a connection to the proxy as user (password "pw") and
	// asks for a large body.
	start func(t *testing.T, r *bytesRig, user string) fetch
}

// fetch is a download under way.
type fetch struct {
	rd   io.Reader      // what the client reads the body from (for HTTP/1.1, the answer head first)
	from netip.AddrPort // the client's address
	conn net.Conn       // the client's socket: closing it ends the download
}

// dial connects to listener with a small receive buffer, so that the
// kernel holds little of what the client does not read; t.Cleanup closes
// the connection. With r.sharePorts, the k-th connection to each
// listener comes from the local port of the first k-th one: the kernel
// gives connections to different addresses the same port now and then,
// and so does this, every time, so that a record must be told apart by
// its listener, not by the client's address alone.
func (r *bytesRig) dial(t *testing.T, listener string) *net.TCPConn {
	t.Helper()
	d := &net.Dialer{}
	k := r.dialled[listener]
	if r.sharePorts {
		var port uint16
		if k < len(r.ports) {
			port = r.ports[k]
		}
		d, _ = proxytest.PortSharingDialer(port)
	}
	d.Timeout = 5 * time.Second
	c, err := d.Dial("tcp", r.addr[listener])
	if err != nil {
		t.Fatalf("dial %s: %v", listener, err)
	}
	t.Cleanup(func() { c.Close() })
	r.dialled[listener] = k + 1
	if k == len(r.ports) {
		r.ports = append(r.ports, clientAddr(c).Port())
	}
	tc := c.(*net.TCPConn)
	tc.SetReadBuffer(64 << 10)
	return tc
}

func clientAddr(c net.Conn) netip.AddrPort { return c.LocalAddr().(*net.TCPAddr).AddrPort() }

func (r *bytesRig) tlsClient(t *testing.T, c net.Conn, proto string) *tls.Conn {
	t.Helper()
	tc := tls.Client(c, &tls.Config{RootCAs: r.roots, ServerName: "127.0.0.1", NextProtos: []string{proto}})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if got := tc.ConnectionState().NegotiatedProtocol; got != proto {
		t.Fatalf("ALPN %q, want %q", got, proto)
	}
	return tc
}

func authValue(user string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":pw"))
}

// httpGet is a download by an absolute-form GET of path on HTTP/1.1,
// over TLS when tlsPort is set.
func httpGet(path string, tlsPort bool) func(t *testing.T, r *bytesRig, user string) fetch {
	return func(t *testing.T, r *bytesRig, user string) fetch {
		t.Helper()
		listener := "plain"
		if tlsPort {
			listener = "tls"
		}
		raw := r.dial(t, listener)
		var c net.Conn = raw
		if tlsPort {
			c = r.tlsClient(t, raw, "http/1.1")
		}
		req := "GET " + r.origin.URL(path) + " HTTP/1.1\r\nHost: " + r.origin.Addr + "\r\nProxy-Authorization: " + authValue(user) + "\r\n\r\n"
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		return fetch{rd: c, from: clientAddr(raw), conn: raw}
	}
}

// connectTunnel sends a CONNECT for the origin on c and reads the 200.
func connectTunnel(t *testing.T, r *bytesRig, c net.Conn, user string) *bufio.Reader {
	t.Helper()
	req := "CONNECT " + r.origin.Addr + " HTTP/1.1\r\nHost: " + r.origin.Addr + "\r\nProxy-Authorization: " + authValue(user) + "\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	return br
}

// getThrough asks for the origin's /length on an open tunnel w.
func getThrough(t *testing.T, r *bytesRig, w io.Writer) {
	t.Helper()
	if _, err := io.WriteString(w, "GET /length HTTP/1.1\r\nHost: "+r.origin.Addr+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
}

// h2Do sends req on a new HTTP/2 connection and returns the fetch of
// its response body.
func (r *bytesRig) h2Do(t *testing.T, req *http.Request) fetch {
	t.Helper()
	raw := r.dial(t, "tls")
	tc := r.tlsClient(t, raw, "h2")
	cc, err := (&http2.Transport{}).NewClientConn(tc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	resp, err := cc.RoundTrip(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("h2 %s: %v %v", req.Method, resp, err)
	}
	return fetch{rd: resp.Body, from: clientAddr(raw), conn: raw}
}

var downloads = []download{
	{name: "http Content-Length", listener: "plain", start: httpGet("/length", false)},
	{name: "http chunked", listener: "plain", start: httpGet("/chunked", false)},
	{name: "http close-delimited", listener: "plain", start: httpGet("/close", false)},
	{name: "https Content-Length", listener: "tls", start: httpGet("/length", true)},
	{name: "h2 GET", listener: "tls", start: func(t *testing.T, r *bytesRig, user string) fetch {
		req, _ := http.NewRequest("GET", r.origin.URL("/length"), nil)
		req.Header.Set("Proxy-Authorization", authValue(user))
		return r.h2Do(t, req)
	}},
	{name: "CONNECT tunnel", listener: "plain", start: func(t *testing.T, r *bytesRig, user string) fetch {
		c := r.dial(t, "plain")
		br := connectTunnel(t, r, c, user)
		getThrough(t, r, c)
		return fetch{rd: br, from: clientAddr(c), conn: c}
	}},
	{name: "https CONNECT tunnel", listener: "tls", start: func(t *testing.T, r *bytesRig, user string) fetch {
		raw := r.dial(t, "tls")
		c := r.tlsClient(t, raw, "http/1.1")
		br := connectTunnel(t, r, c, user)
		getThrough(t, r, c)
		return fetch{rd: br, from: clientAddr(raw), conn: raw}
	}},
	{name: "h2 CONNECT tunnel", listener: "tls", start: func(t *testing.T, r *bytesRig, user string) fetch {
		pr, pw := io.Pipe()
		t.Cleanup(func() { pw.Close() })
		req, _ := http.NewRequest("CONNECT", "", pr)
		req.URL, req.Host = &url.URL{Host: r.origin.Addr}, r.origin.Addr
		req.Header.Set("Proxy-Authorization", authValue(user))
		go io.WriteString(pw, "GET /length HTTP/1.1\r\nHost: "+r.origin.Addr+"\r\n\r\n")
		return r.h2Do(t, req)
	}},
	{name: "SOCKS5 tunnel", listener: "socks", start: func(t *testing.T, r *bytesRig, user string) fetch {
		c := r.dial(t, "socks")
		br := socksLogin(t, c, user, "pw")
		socksRequest(t, c, br, 1, netip.MustParseAddrPort(r.origin.Addr))
		c.SetDeadline(time.Time{})
		getThrough(t, r, c)
		return fetch{rd: br, from: clientAddr(c), conn: c}
	}},
}

// bytesRecord is what these tests read of an access log record.
type bytesRecord struct {
	Listener  string `json:"listener"`
	Client    string `json:"client"`
	Status    int    `json:"status"`
	BytesDown int64  `json:"bytes_down"`
	Reason    string `json:"reason"`
}

// record waits for the access log record of the client at from on
// listener.
func (r *bytesRig) record(t *testing.T, listener string, from netip.AddrPort) bytesRecord {
	t.Helper()
	return r.recordSince(t, listener, from, 0)
}

// logLen returns the length of the access log so far: a mark for
// recordSince.
func (r *bytesRig) logLen() int { return len(r.log.String()) }

// recordSince waits for the access log record of the client at from on
// listener among those written past the log's first since bytes: on
// loopback the kernel may give a new connection the port of one that has
// just closed (tcp_tw_reuse), whose record would match too; and it may
// give connections to two listeners the same port at once (see dial).
func (r *bytesRig) recordSince(t *testing.T, listener string, from netip.AddrPort, since int) bytesRecord {
	t.Helper()
	var rec bytesRecord
	waitFor(t, "the access log record of "+from.String()+" on "+listener, func() bool {
		for line := range strings.Lines(r.log.String()[since:]) {
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("access log line %q: %v", line, err)
			}
			if ap, err := netip.ParseAddrPort(rec.Client); err == nil && rec.Listener == listener && ap.Addr().Unmap() == from.Addr() && ap.Port() == from.Port() {
				return true
			}
		}
		return false
	})
	return rec
}

// bytesDown returns rustle_bytes_total down of listener.
func (r *bytesRig) bytesDown(t *testing.T, listener string) float64 {
	t.Helper()
	return proxytest.Metric(t, r.m, "rustle_bytes_total", "listener", listener, "direction", "down")
}

// checkDelivered fails unless rec, of a download through listener,
// logs success and counts at least what the client read (less heads)
// and no more than could have been delivered.
func checkDelivered(t *testing.T, rec bytesRecord, listener string, read int64) {
	t.Helper()
	status := 200
	if listener == "socks" {
		status = 0 // the SOCKS5 reply code
	}
	if testing.Verbose() {
		t.Logf("read %d, logged %d bytes down", read, rec.BytesDown)
	}
	// What the kernel's socket buffers can hold between rustle and the
	// client (the send buffer's and the receive buffer's largest sizes:
	// a throttled curl lets its receive buffer grow to tcp_rmem's
	// maximum, 32 MiB on some machines) was written but never read.
	bound := max(int64(bulkBound), read+tcpBufferMax("tcp_wmem")+tcpBufferMax("tcp_rmem"))
	if rec.Status != status || rec.BytesDown < read-64<<10 || rec.BytesDown > bound {
		t.Errorf("record %+v: the client read %d bytes of a %d-byte body; bytes down must lie between the two, far below the body",
			rec, read, int64(bulkSize))
	}
}

// TestBytesClientStopsReading has a client of each front-end read a
// megabyte of a 64 MB download and close: the record and
// rustle_bytes_total count what was written to it, not the body.
func TestBytesClientStopsReading(t *testing.T) {
	r := startBytesRig(t)
	for _, d := range downloads {
		t.Run(d.name, func(t *testing.T) {
			before, mark := r.bytesDown(t, d.listener), r.logLen()
			f := d.start(t, r, "alice")
			read, err := io.CopyN(io.Discard, f.rd, bulkRead)
			if err != nil {
				t.Fatalf("read %d bytes: %v", read, err)
			}
			f.conn.Close()
			rec := r.recordSince(t, d.listener, f.from, mark)
			checkDelivered(t, rec, d.listener, read)
			if got := r.bytesDown(t, d.listener) - before; got != float64(rec.BytesDown) {
				t.Errorf("rustle_bytes_total down grew by %v, the record says %d", got, rec.BytesDown)
			}
		})
	}
	t.Run("curl --limit-rate --max-time", func(t *testing.T) {
		path, err := exec.LookPath("curl")
		if err != nil {
			t.Skip("curl not installed")
		}
		before, mark := r.bytesDown(t, "plain"), r.logLen()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, path, "-sS", "-o", "/dev/null", "-w", "%{size_download} %{local_port}",
			"--limit-rate", "1M", "--max-time", "2", "--noproxy", "", "-x", "http://alice:pw@"+r.addr["plain"],
			r.origin.URL("/length")).Output()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 28 {
			t.Fatalf("curl: %v (want exit 28, the time limit) %q", err, out)
		}
		var size int64
		var port uint16
		if _, err := fmt.Sscan(string(out), &size, &port); err != nil {
			t.Fatalf("curl output %q: %v", out, err)
		}
		rec := r.recordSince(t, "plain", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port), mark)
		checkDelivered(t, rec, "plain", size)
		if got := r.bytesDown(t, "plain") - before; got != float64(rec.BytesDown) {
			t.Errorf("rustle_bytes_total down grew by %v, the record says %d", got, rec.BytesDown)
		}
	})
}

// TestBytesCut has a client of each front-end read a megabyte of a
// 64 MB download and stop reading, then ends the downloads from the
// server's side: by a shutdown whose drain time runs out, and by a
// reload that removes the user. Each record counts what was written to
// its client, far below the body.
func TestBytesCut(t *testing.T) {
	for _, cut := range []string{"drain", "revocation"} {
		t.Run(cut, func(t *testing.T) {
			r := startBytesRig(t)
			// Clients of the three listeners share their ports: each
			// record is found by its listener and client.
			_, r.sharePorts = proxytest.PortSharingDialer(0)
			before := map[string]float64{}
			for _, l := range []string{"plain", "tls", "socks"} {
				before[l] = r.bytesDown(t, l)
			}
			froms := make([]netip.AddrPort, len(downloads))
			reads := make([]int64, len(downloads))
			for i, d := range downloads {
				f := d.start(t, r, "bob")
				n, err := io.CopyN(io.Discard, f.rd, bulkRead)
				if err != nil {
					t.Fatalf("%s: read %d bytes: %v", d.name, n, err)
				}
				froms[i], reads[i] = f.from, n
			}
			if ports := map[netip.AddrPort]bool{}; r.sharePorts {
				for _, from := range froms {
					ports[from] = true
				}
				if len(ports) != len(r.ports) {
					t.Fatalf("the %d clients came from %d ports, want %d shared ones", len(froms), len(ports), len(r.ports))
				}
			}
			// Every client has stopped reading, its download stalled.
			switch cut {
			case "drain":
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				if err := r.s.Shutdown(ctx); err == nil {
					t.Fatal("Shutdown: nil, want the drain time to run out")
				}
			case "revocation":
				if err := r.s.Reload(bytesConfig(t, r.tls, false)); err != nil {
					t.Fatalf("Reload: %v", err)
				}
			}
			sums := map[string]float64{}
			for i, d := range downloads {
				rec := r.record(t, d.listener, froms[i])
				t.Run(d.name, func(t *testing.T) {
					checkDelivered(t, rec, d.listener, reads[i])
					// The record says who cut it: the drain's end, or
					// the reload.
					if want := map[string]string{"drain": "drained", "revocation": "revoked"}[cut]; rec.Reason != want {
						t.Errorf("record's reason %q, want %q", rec.Reason, want)
					}
				})
				sums[d.listener] += float64(rec.BytesDown)
			}
			for l, sum := range sums {
				if got := r.bytesDown(t, l) - before[l]; got != sum {
					t.Errorf("rustle_bytes_total down of %s grew by %v, its records say %v", l, got, sum)
				}
			}
		})
	}
}

// tcpBufferMax returns the largest size of the TCP buffer named by the
// sysctl net.ipv4.NAME (tcp_wmem, tcp_rmem), or 0 where it cannot be
// read.
func tcpBufferMax(name string) int64 {
	b, err := os.ReadFile("/proc/sys/net/ipv4/" + name)
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 3 {
		return 0
	}
	n, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return 0
	}
	return n
}
