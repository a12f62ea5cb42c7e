package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// This file holds the conformance table: every front-end (plain HTTP,
// HTTPS with HTTP/1.1, HTTP/2, SOCKS5, SOCKS4a, and HTTP and SOCKS5 on a
// mixed port) driven through every outcome of the one request path
// (internal/gate), each cell checked for the same access log record and
// the same metric deltas. An outcome's expectations are written once, in
// HTTP terms; conformExpect derives what differs by front-end (the
// protocol's name, a SOCKS reply instead of a status).

// frontEnd is one way a client speaks to rustle.
type frontEnd struct {
	name     string // subtest name
	listener string // the listener it speaks to: the access log's listener, the metrics' listener label
	protocol string // that listener's protocol: the metrics' protocol label
	socks    bool   // SOCKS5 or SOCKS4a; false: HTTP/1.1 or HTTP/2
	socks4   bool   // SOCKS4a
	tls      bool   // over TLS
	h2       bool   // HTTP/2
}

var conformFrontEnds = []frontEnd{
	{name: "http", listener: "plain", protocol: "http"},
	{name: "https", listener: "tls", protocol: "https", tls: true},
	{name: "h2", listener: "tls", protocol: "https", tls: true, h2: true},
	{name: "socks5", listener: "socks", protocol: "socks5", socks: true},
	{name: "socks4a", listener: "socks4", protocol: "socks5", socks: true, socks4: true},
	{name: "mixed-http", listener: "mixed", protocol: "mixed"},
	{name: "mixed-socks5", listener: "mixed", protocol: "mixed", socks: true},
}

// skips says, for an outcome, which front-ends it cannot apply to and
// why; "" = it applies.
type skips struct {
	socks   string // every SOCKS front-end
	socks4a string // SOCKS4a
	noTLS   string // the front-ends without TLS
}

func (s skips) reason(fe frontEnd) string {
	switch {
	case fe.socks && s.socks != "":
		return s.socks
	case fe.socks4 && s.socks4a != "":
		return s.socks4a
	case !fe.tls && s.noTLS != "":
		return s.noTLS
	}
	return ""
}

// Wire codes a SOCKS client sees instead of a reply when it does not get
// as far as a request.
const (
	socksLoginRefused = -1 // the RFC 1929 login failed
	socksNoMethod     = -2 // no acceptable authentication method (0xFF)
)

// The reasons an outcome does not apply to SOCKS4a, which rustle serves
// only on a listener that authenticates nobody.
const (
	noSOCKS4Auth = "SOCKS4 carries no credentials: its listener authenticates nobody"
	noSOCKS4User = "SOCKS4a requests are anonymous: no user to count or pace"
)

// conformRow is one outcome of the request path: the request that leads
// to it and, in HTTP terms, what every front-end must answer, log and
// count for it.
type conformRow struct {
	name  string
	paced bool // served by the rig whose users' bytes are paced
	skip  skips
	// setup runs before the measured request, outside the measurement;
	// it returns what to undo after it (nil = nothing).
	setup func(t *testing.T, c *conformCell) func()
	// ask is the measured request.
	ask func(c *conformCell) conformAsk
	// after checks more, once the measured request is done.
	after func(t *testing.T, c *conformCell)

	status    int           // the HTTP status answered and logged
	reason    string        // the access log's reason
	authFail  bool          // a refused authentication: SOCKS refuses the login, before any request
	user      string        // the user authenticated: logged, and counted in the per-user series
	tried     string        // the user name a refused authentication tried: logged, never counted
	rule      string        // the rule logged
	upstream  string        // the upstream connected to; "" = none
	tunnel    bool          // a tunnel opened
	up, down  int64         // payload bytes each way
	authFails int           // rustle_auth_failures_total delta
	authAsks  int           // rustle_auth_challenges_total delta
	aclDenies int           // rustle_acl_denials_total delta
	dial      string        // the dial histogram's result label fed: "ok", "error"; "" = no dial
	firstByte bool          // rustle_upstream_first_byte_seconds fed
	minTime   time.Duration // the least time the exchange takes (a paced user's)
}

// conformAsk is a request a cell's client sends.
type conformAsk struct {
	forward    bool // a GET of target, an absolute URL; false: a tunnel to target, host:port
	target     string
	user, pass string // credentials; user "" = none
	cert       *tls.Certificate
	payload    []byte // written into an open tunnel and read back from the echo upstream
	hold       bool   // leave an open tunnel open: the answer's close ends it
}

// conformAnswer is what the client got.
type conformAnswer struct {
	code   int            // HTTP status, SOCKS5 reply, SOCKS4 CD, or socksLoginRefused/socksNoMethod
	body   string         // a forwarded response's body
	header http.Header    // an HTTP response's header
	client netip.AddrPort // the client's address, as the proxy sees it
	close  func()         // ends a held tunnel
}

// conformExpect is what one front-end must show for one outcome.
type conformExpect struct {
	code   int // on the wire
	record bool
	rec    conformRecord
	deltas map[string]float64
}

// conformRecord is the access log record fields the table checks.
type conformRecord struct {
	Listener  string `json:"listener"`
	Client    string `json:"client"`
	User      string `json:"user"`
	Protocol  string `json:"protocol"`
	Method    string `json:"method"`
	Target    string `json:"target"`
	Status    int    `json:"status"`
	BytesUp   int64  `json:"bytes_up"`
	BytesDown int64  `json:"bytes_down"`
	Upstream  string `json:"upstream"`
	Rule      string `json:"rule"`
	Reason    string `json:"reason"`
}

// socksReply is the SOCKS5 reply code of the outcome answered status
// over HTTP: 403 (a rule, the guard) and 429 (a limit) are "not allowed";
// 502 is, in this table, always a refused connection.
func socksReply(status int) int {
	switch status {
	case 200:
		return 0x00
	case 403, 429:
		return 0x02
	case 502:
		return 0x05
	}
	return 0x01
}

// statusClass is the code label rustle_requests_total counts status in.
func statusClass(status int) string { return strconv.Itoa(status/100) + "xx" }

// conformExpectFor derives from row, written in HTTP terms, what front-end
// fe shows for request a: the same fields for every protocol, but for its
// name, a SOCKS reply code in place of the status, and a SOCKS login
// refusal that comes before any request (so a record without a method or
// target, whose status is what SOCKS answered: the RFC 1929 status 1, or
// the method selection 0xFF).
func conformExpectFor(row conformRow, fe frontEnd, a conformAsk) conformExpect {
	e := conformExpect{code: row.status, record: true, deltas: map[string]float64{}}
	proto, method, target, status, user := "connect", "CONNECT", a.target, row.status, row.user
	if a.forward {
		proto, method = "http", "GET"
	}
	switch {
	case fe.h2:
		proto = "h2"
	case fe.socks:
		proto, status = "socks5", socksReply(row.status)
		e.code = status
		if fe.socks4 {
			proto = "socks4"
			user = "" // SOCKS4a is anonymous
			e.code = 0x5A
			if status != 0 {
				e.code = 0x5B
			}
		}
		if row.authFail {
			// A SOCKS5 client authenticates before it sends its request.
			method, target, e.code, status = "", "", socksLoginRefused, 1
			if a.user == "" {
				e.code, status = socksNoMethod, 0xFF
			}
		}
	}
	logged := user
	if logged == "" {
		logged = row.tried
	}
	e.rec = conformRecord{
		Listener: fe.listener, User: logged, Protocol: proto, Method: method, Target: target,
		Status: status, BytesUp: row.up, BytesDown: row.down, Upstream: row.upstream, Rule: row.rule,
		Reason: row.reason,
	}
	lp := []string{"listener", fe.listener, "protocol", fe.protocol}
	add := func(n float64, name string, labels ...string) {
		if n != 0 {
			e.deltas[series(name, labels...)] += n
		}
	}
	if e.record {
		add(1, "rustle_requests_total", append(lp, "code", statusClass(row.status))...)
		add(float64(row.up), "rustle_bytes_total", append(lp, "direction", "up")...)
		add(float64(row.down), "rustle_bytes_total", append(lp, "direction", "down")...)
		if user != "" {
			add(1, "rustle_user_requests_total", "user", user)
			add(float64(row.up), "rustle_user_bytes_total", "user", user, "direction", "up")
			add(float64(row.down), "rustle_user_bytes_total", "user", user, "direction", "down")
		}
	}
	if row.tunnel {
		add(1, "rustle_tunnels_total", lp...)
	}
	add(float64(row.authFails), "rustle_auth_failures_total", lp...)
	add(float64(row.authAsks), "rustle_auth_challenges_total", lp...)
	add(float64(row.aclDenies), "rustle_acl_denials_total", lp...)
	if row.dial != "" {
		add(1, "rustle_upstream_dial_duration_seconds_count", "result", row.dial)
	}
	if row.firstByte {
		add(1, "rustle_upstream_first_byte_seconds_count", "listener", fe.listener)
	}
	return e
}

// series names one series: the metric and its labels, sorted.
func series(name string, labels ...string) string {
	var kv []string
	for i := 0; i+1 < len(labels); i += 2 {
		kv = append(kv, labels[i]+"="+strconv.Quote(labels[i+1]))
	}
	sort.Strings(kv)
	return name + "{" + strings.Join(kv, ",") + "}"
}

// conformEnv is what every rig shares: origins, certificates and
// addresses.
type conformEnv struct {
	origin   *proxytest.Origin // answers conformBody; /hang never answers, /hangup closes unanswered
	echo     *proxytest.EchoServer
	closed   string // a loopback port nothing listens on
	guarded  string // a loopback address the guard refuses (only the origins' /32 is allowed)
	tls      config.ListenerTLS
	roots    *x509.CertPool
	carol    *tls.Certificate // client certificate with CN "carol"
	dave     *tls.Certificate // client certificate with CN "dave", a user no listener lists
	noCN     *tls.Certificate // client certificate without a common name
	nextFrom int              // the next client address to hand out
}

const conformBody = "conformance origin"

// from returns a loopback address no cell used before: a cell's client
// connects from it, which keeps one cell's failed authentications (and
// cool-down) from another's and names the cell's records.
func (env *conformEnv) from() netip.Addr {
	n := env.nextFrom
	env.nextFrom++
	return netip.AddrFrom4([4]byte{127, 0, byte(1 + n/250), byte(1 + n%250)})
}

// conformRig is one running server with its metrics and access log.
type conformRig struct {
	s    *Server
	addr map[string]string
	m    *metrics.Metrics
	log  *logBuffer
}

func startConformRig(t *testing.T, env *conformEnv, paced bool) *conformRig {
	t.Helper()
	cfg := config.Default()
	cfg.Workers = 1
	// Every listener that authenticates takes alice and carol (the client
	// certificate's user), not bob.
	cfg.Auth.Users = []config.User{{Name: "alice", Password: "pw"}, {Name: "bob", Password: "pw"}, {Name: "carol", Password: "pw"},
		{Name: "quinn", Password: "pw"}}
	only := []string{"alice", "carol", "quinn"}
	// quinn may make one request a day; each front-end's q-NAME user
	// (see TestQuotaEndsTunnel) may move quotaTunnelBytes.
	cfg.Quota.Rules = []config.QuotaRule{{Name: "quinn-daily", Who: config.Who{Users: []string{"quinn"}}, Requests: 1},
		{Name: "tunnel-bytes", Who: config.Who{Users: []string{}}, Bytes: quotaTunnelBytes}}
	for _, fe := range conformFrontEnds {
		name := "q-" + fe.name
		cfg.Auth.Users = append(cfg.Auth.Users, config.User{Name: name, Password: "pw"})
		only = append(only, name)
		cfg.Quota.Rules[1].Users = append(cfg.Quota.Rules[1].Users, name)
	}
	cfg.AllowPrivate = []string{"127.0.0.1/32"} // the origins; not 127.0.0.2
	cfg.Upstream.MaxIdlePerHost = -1            // every forward dials
	cfg.Timeouts.ResponseHeader.Duration = 400 * time.Millisecond
	cfg.ACL.Default = "deny"
	cfg.ACL.Rules = []config.ACLRule{
		{Name: "deny-listed", Action: "deny", Criteria: config.Criteria{Hosts: []string{"denied.test"}}},
		{Name: "allow-rest", Action: "allow"},
	}
	cfg.Limits.AuthFailures = 2
	cfg.Limits.MaxConnectionsPerUser = 1
	if paced {
		cfg.Limits.UserBytesPerSecond = 256 << 10
		cfg.Limits.UserBytesBurst = 16 << 10
	}
	cfg.Listen = []config.Listener{
		{Name: "plain", Address: "127.0.0.1:0", Protocol: "http", Users: only},
		{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: env.tls, Users: only},
		{Name: "socks", Address: "127.0.0.1:0", Protocol: "socks5", Users: only},
		{Name: "socks4", Address: "127.0.0.1:0", Protocol: "socks5", Auth: config.AuthNone},
		{Name: "mixed", Address: "127.0.0.1:0", Protocol: "mixed", Users: only},
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	r := &conformRig{m: metrics.New(metrics.Config{PerUser: true}), log: &logBuffer{}}
	r.s, r.addr = startLogged(t, cfg, nil, r.log, WithMetrics(r.m))
	return r
}

// conns returns the connections the server has admitted and not yet
// released: a connection's (or its tunnel's) last count is given back
// after its request was finished (logged and counted).
func (r *conformRig) conns() int {
	r.s.mu.Lock()
	lim := r.s.gen.Limiter
	r.s.mu.Unlock()
	return lim.Conns()
}

// waitConns waits until the server holds n connections.
func (r *conformRig) waitConns(t *testing.T, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d connections held by the server", n), func() bool { return r.conns() == n })
}

// snapshot returns the value of every series the table checks; a
// histogram by its count.
func (r *conformRig) snapshot(t *testing.T) map[string]float64 {
	t.Helper()
	fams, err := r.m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		name := f.GetName()
		switch name {
		case "rustle_requests_total", "rustle_tunnels_total", "rustle_auth_failures_total",
			"rustle_auth_challenges_total", "rustle_acl_denials_total", "rustle_bytes_total", "rustle_user_requests_total",
			"rustle_user_bytes_total", "rustle_upstream_dial_duration_seconds",
			"rustle_upstream_first_byte_seconds":
		default:
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName(), l.GetValue())
			}
			if h := m.GetHistogram(); h != nil {
				out[series(name+"_count", labels...)] = float64(h.GetSampleCount())
				continue
			}
			out[series(name, labels...)] = m.GetCounter().GetValue()
		}
	}
	return out
}

// logLen returns the length of the access log so far: a mark for record
// and find.
func (r *conformRig) logLen() int { return len(r.log.String()) }

// record waits for the access log record of the client at client among
// those written past the log's first since bytes (a mark of logLen taken
// before the client connected), and returns it: on loopback the kernel
// may give a new connection the port of one from the same address that
// has just closed (a cell's setup, or its request before), whose record
// would match too.
func (r *conformRig) record(t *testing.T, client netip.AddrPort, since int) conformRecord {
	t.Helper()
	var rec conformRecord
	waitFor(t, "the access log record of "+client.String(), func() bool {
		var ok bool
		rec, ok = r.find(t, client, since)
		return ok
	})
	return rec
}

// find returns the access log record of the client at client among those
// written past the log's first since bytes, if any.
func (r *conformRig) find(t *testing.T, client netip.AddrPort, since int) (conformRecord, bool) {
	t.Helper()
	for line := range strings.Lines(r.log.String()[since:]) {
		var rec conformRecord
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("access log line %q: %v", line, err)
		}
		if ap, err := netip.ParseAddrPort(rec.Client); err == nil &&
			ap.Addr().Unmap() == client.Addr().Unmap() && ap.Port() == client.Port() {
			return rec, true
		}
	}
	return conformRecord{}, false
}

// conformCell is one front-end and outcome being run.
type conformCell struct {
	env  *conformEnv
	rig  *conformRig
	fe   frontEnd
	from netip.Addr // the address the cell's clients connect from
}

// do sends a through the cell's front-end from the cell's address.
func (c *conformCell) do(t *testing.T, a conformAsk) conformAnswer {
	t.Helper()
	ans, err := c.try(c.fe, c.from, a)
	if err != nil {
		t.Fatalf("%s: %v", c.fe.name, err)
	}
	return ans
}

// try sends a through front-end fe from the address from.
func (c *conformCell) try(fe frontEnd, from netip.Addr, a conformAsk) (conformAnswer, error) {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: from.AsSlice()}}
	raw, err := d.Dial("tcp", c.rig.addr[fe.listener])
	if err != nil {
		return conformAnswer{}, err
	}
	raw.SetDeadline(time.Now().Add(10 * time.Second))
	ans := conformAnswer{client: raw.LocalAddr().(*net.TCPAddr).AddrPort()}
	conn := raw
	if fe.tls {
		cfg := &tls.Config{RootCAs: c.env.roots, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}}
		if fe.h2 {
			cfg.NextProtos = []string{"h2"}
		}
		if a.cert != nil {
			cfg.Certificates = []tls.Certificate{*a.cert}
		}
		tc := tls.Client(raw, cfg)
		if err := tc.Handshake(); err != nil {
			raw.Close()
			return ans, fmt.Errorf("TLS handshake: %w", err)
		}
		if got, want := tc.ConnectionState().NegotiatedProtocol, cfg.NextProtos[0]; got != want {
			raw.Close()
			return ans, fmt.Errorf("ALPN chose %q, want %q", got, want)
		}
		conn = tc
	}
	switch {
	case fe.h2:
		err = tryH2(conn, a, &ans)
	case fe.socks4:
		err = trySOCKS4a(conn, a, &ans)
	case fe.socks:
		err = trySOCKS5(conn, a, &ans)
	default:
		err = tryHTTP(conn, a, &ans)
	}
	if ans.close == nil {
		conn.Close()
	}
	return ans, err
}

// echoPayload writes a's payload into an open tunnel and reads it back.
func echoPayload(w io.Writer, r io.Reader, a conformAsk) error {
	if len(a.payload) == 0 {
		return nil
	}
	errc := make(chan error, 1)
	go func() {
		_, err := w.Write(a.payload)
		errc <- err
	}()
	got := make([]byte, len(a.payload))
	_, err := io.ReadFull(r, got)
	if werr := <-errc; werr != nil {
		return fmt.Errorf("tunnel write: %w", werr)
	}
	if err != nil {
		return fmt.Errorf("tunnel echo: %w", err)
	}
	if !bytes.Equal(got, a.payload) {
		return errors.New("tunnel echo: the bytes differ")
	}
	return nil
}

func basicValue(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// tryHTTP sends a as an HTTP/1.1 request (a GET or a CONNECT) on c.
func tryHTTP(c net.Conn, a conformAsk, ans *conformAnswer) error {
	method, host := "CONNECT", a.target
	if a.forward {
		u, err := url.Parse(a.target)
		if err != nil {
			return err
		}
		method, host = "GET", u.Host
	}
	req := method + " " + a.target + " HTTP/1.1\r\nHost: " + host + "\r\n"
	if a.user != "" {
		req += "Proxy-Authorization: " + basicValue(a.user, a.pass) + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		return err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		return fmt.Errorf("read response: %w", err)
	}
	ans.code, ans.header = resp.StatusCode, resp.Header
	if method == "GET" || resp.StatusCode != 200 {
		body, err := io.ReadAll(resp.Body)
		ans.body = string(body)
		return err
	}
	if err := echoPayload(c, br, a); err != nil {
		return err
	}
	if a.hold {
		ans.close = func() { c.Close() }
	}
	return nil
}

// tryH2 sends a as an HTTP/2 request (a GET or a CONNECT) on c.
func tryH2(c net.Conn, a conformAsk, ans *conformAnswer) error {
	cc, err := (&http2.Transport{}).NewClientConn(c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	done := func() {
		cancel()
		cc.Close()
	}
	var req *http.Request
	var pw *io.PipeWriter
	if a.forward {
		req, _ = http.NewRequestWithContext(ctx, "GET", a.target, nil)
	} else {
		var pr *io.PipeReader
		pr, pw = io.Pipe()
		req, _ = http.NewRequestWithContext(ctx, "CONNECT", "", pr)
		req.URL, req.Host = &url.URL{Host: a.target}, a.target
	}
	if a.user != "" {
		req.Header.Set("Proxy-Authorization", basicValue(a.user, a.pass))
	}
	resp, err := cc.RoundTrip(req)
	if err != nil {
		done()
		return err
	}
	ans.code, ans.header = resp.StatusCode, resp.Header
	if a.forward || resp.StatusCode != 200 {
		if pw != nil {
			pw.Close()
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		ans.body = string(body)
		done()
		return err
	}
	if err := echoPayload(pw, resp.Body, a); err != nil {
		done()
		return err
	}
	end := func() {
		pw.Close()
		io.Copy(io.Discard, resp.Body) // the upstream's end of stream
		resp.Body.Close()
		done()
	}
	if a.hold {
		ans.close = func() { end(); c.Close() }
		return nil
	}
	end()
	return nil
}

// socksAddr appends a SOCKS5 address (ATYP, address, port) for target.
func socksAddr(b []byte, target string) ([]byte, error) {
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		return nil, err
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, err
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Is4() {
		a4 := ip.As4()
		b = append(append(b, 0x01), a4[:]...)
	} else {
		b = append(append(b, 0x03, byte(len(host))), host...)
	}
	return binary.BigEndian.AppendUint16(b, uint16(p)), nil
}

// trySOCKS5 sends a as a SOCKS5 CONNECT on c, logging in first when a
// has credentials.
func trySOCKS5(c net.Conn, a conformAsk, ans *conformAnswer) error {
	method := byte(0x00)
	if a.user != "" {
		method = 0x02
	}
	if _, err := c.Write([]byte{5, 1, method}); err != nil {
		return err
	}
	br := bufio.NewReader(c)
	sel := make([]byte, 2)
	if _, err := io.ReadFull(br, sel); err != nil {
		return fmt.Errorf("method selection: %w", err)
	}
	if sel[1] == 0xFF {
		ans.code = socksNoMethod
		return nil
	}
	if sel[1] == 0x02 {
		msg := append([]byte{1, byte(len(a.user))}, a.user...)
		msg = append(append(msg, byte(len(a.pass))), a.pass...)
		if _, err := c.Write(msg); err != nil {
			return err
		}
		st := make([]byte, 2)
		if _, err := io.ReadFull(br, st); err != nil {
			return fmt.Errorf("login status: %w", err)
		}
		if st[1] != 0 {
			ans.code = socksLoginRefused
			return nil
		}
	}
	req, err := socksAddr([]byte{5, 1, 0}, a.target)
	if err != nil {
		return err
	}
	if _, err := c.Write(req); err != nil {
		return err
	}
	head := make([]byte, 4)
	if _, err := io.ReadFull(br, head); err != nil {
		return fmt.Errorf("reply: %w", err)
	}
	n := 4
	switch head[3] {
	case 0x04:
		n = 16
	case 0x03:
		l, err := br.ReadByte()
		if err != nil {
			return err
		}
		n = int(l)
	}
	if _, err := io.ReadFull(br, make([]byte, n+2)); err != nil {
		return fmt.Errorf("reply address: %w", err)
	}
	ans.code = int(head[1])
	if ans.code != 0 {
		return nil
	}
	if err := echoPayload(c, br, a); err != nil {
		return err
	}
	if a.hold {
		ans.close = func() { c.Close() }
	}
	return nil
}

// trySOCKS4a sends a as a SOCKS4a CONNECT on c: the host by name, even an
// IP literal.
func trySOCKS4a(c net.Conn, a conformAsk, ans *conformAnswer) error {
	host, port, err := net.SplitHostPort(a.target)
	if err != nil {
		return err
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return err
	}
	req := binary.BigEndian.AppendUint16([]byte{4, 1}, uint16(p))
	req = append(append(append(req, 0, 0, 0, 1, 0), host...), 0)
	if _, err := c.Write(req); err != nil {
		return err
	}
	br := bufio.NewReader(c)
	reply := make([]byte, 8)
	if _, err := io.ReadFull(br, reply); err != nil {
		return fmt.Errorf("reply: %w", err)
	}
	ans.code = int(reply[1])
	if ans.code != 0x5A {
		return nil
	}
	if err := echoPayload(c, br, a); err != nil {
		return err
	}
	if a.hold {
		ans.close = func() { c.Close() }
	}
	return nil
}

// conformClientCerts writes a client CA into a file and returns its path
// with three certificates it signs: one with the common name "carol", one
// whose subject has no common name, and one with the common name "dave".
func conformClientCerts(t *testing.T) (string, *tls.Certificate, *tls.Certificate, *tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "conformance client CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(serial int64, subject pkix.Name) *tls.Certificate {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: subject,
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	path := filepath.Join(t.TempDir(), "clients.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, issue(2, pkix.Name{CommonName: "carol"}), issue(3, pkix.Name{Organization: []string{"no common name"}}),
		issue(4, pkix.Name{CommonName: "dave"})
}

// newConformEnv returns the origins, certificates and addresses of the
// conformance rigs; it skips the test where cells cannot connect from
// addresses of 127.0.0.0/8 other than 127.0.0.1.
func newConformEnv(t *testing.T) *conformEnv {
	t.Helper()
	if c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, 1)}}).Dial("tcp", proxytest.NewEcho(t).Addr); err != nil {
		t.Skipf("cannot connect from 127.0.1.1 (only 127.0.0.1 is a loopback address here): %v", err)
	} else {
		c.Close()
	}
	env := &conformEnv{
		origin: proxytest.NewOrigin(t, proxytest.Respond(200, conformBody)),
		echo:   proxytest.NewEcho(t),
		closed: proxytest.ClosedPort(t),
	}
	env.origin.Handle("/hang", proxytest.Hang())
	env.origin.Handle("/hangup", proxytest.Hangup())
	_, echoPort, _ := net.SplitHostPort(env.echo.Addr)
	env.guarded = net.JoinHostPort("127.0.0.2", echoPort)
	env.tls, env.roots = proxyCerts(t)
	env.tls.ClientCA, env.carol, env.noCN, env.dave = conformClientCerts(t)
	return env
}

// TestConformance drives every front-end through every outcome of the
// request path and checks that each shows the same access log fields and
// the same metric deltas.
func TestConformance(t *testing.T) {
	env := newConformEnv(t)
	rigs := map[bool]*conformRig{false: startConformRig(t, env, false), true: startConformRig(t, env, true)}

	payload := []byte("conformance tunnel payload\n")
	paced := bytes.Repeat([]byte("paced tunnel bytes.\n"), 24<<10/20) // 24 KiB each way, 16 KiB burst
	tunnelTo := func(target, user, pass string) func(c *conformCell) conformAsk {
		return func(c *conformCell) conformAsk {
			if c.fe.socks4 {
				return conformAsk{target: target} // SOCKS4a sends no credentials
			}
			return conformAsk{target: target, user: user, pass: pass}
		}
	}

	rows := []conformRow{
		{
			name: "forward",
			skip: skips{socks: "SOCKS forwards no requests: it only tunnels"},
			ask: func(c *conformCell) conformAsk {
				return conformAsk{forward: true, target: env.origin.URL("/forward"), user: "alice", pass: "pw"}
			},
			status: 200, user: "alice", rule: "allow-rest", upstream: env.origin.Addr,
			down: int64(len(conformBody)), dial: "ok", firstByte: true,
		},
		{
			name: "tunnel",
			ask: func(c *conformCell) conformAsk {
				a := tunnelTo(env.echo.Addr, "alice", "pw")(c)
				a.payload = payload
				return a
			},
			status: 200, user: "alice", rule: "allow-rest", upstream: env.echo.Addr, tunnel: true,
			up: int64(len(payload)), down: int64(len(payload)), dial: "ok",
		},
		{
			name:   "407 wrong password",
			skip:   skips{socks4a: noSOCKS4Auth},
			ask:    tunnelTo(env.echo.Addr, "alice", "wrong"),
			status: 407, reason: "auth-failed", authFail: true, tried: "alice", authFails: 1,
		},
		{
			name:   "407 no credentials",
			skip:   skips{socks4a: noSOCKS4Auth},
			ask:    tunnelTo(env.echo.Addr, "", ""),
			status: 407, reason: "auth-missing", authFail: true, authAsks: 1,
		},
		{
			// bob is a configured user, but not one of the listener's.
			name:   "407 user not on the listener",
			skip:   skips{socks4a: noSOCKS4Auth},
			ask:    tunnelTo(env.echo.Addr, "bob", "pw"),
			status: 407, reason: "auth-failed", authFail: true, tried: "bob", authFails: 1,
		},
		{
			name:   "403 by rule",
			ask:    tunnelTo("denied.test:80", "alice", "pw"),
			status: 403, reason: "denied", user: "alice", rule: "deny-listed", aclDenies: 1,
		},
		{
			name:   "403 by the private-destination guard",
			ask:    tunnelTo(env.guarded, "alice", "pw"),
			status: 403, reason: "forbidden", user: "alice", rule: "allow-rest", aclDenies: 1, dial: "error",
		},
		{
			name: "429 cool-down after failed authentications",
			skip: skips{socks4a: noSOCKS4Auth},
			setup: func(t *testing.T, c *conformCell) func() {
				// limits.auth_failures = 2: this first failure is the
				// one before the cool-down.
				if a := c.do(t, tunnelTo(env.echo.Addr, "alice", "wrong")(c)); a.code == 200 || a.code == 0 {
					t.Fatalf("first failed authentication answered %d", a.code)
				}
				return nil
			},
			ask:    tunnelTo(env.echo.Addr, "alice", "wrong"),
			status: 429, reason: "cooling-down", authFail: true, tried: "alice", authFails: 1,
			after: func(t *testing.T, c *conformCell) {
				// Cooling down, alice is refused from the address even
				// with the right password (429, or the SOCKS login
				// refused), and logged as such; carol, another of the
				// listener's users, from the same address, is not.
				refused := 429
				if c.fe.socks {
					refused = socksLoginRefused
				}
				mark := c.rig.logLen()
				a := c.do(t, tunnelTo(env.echo.Addr, "alice", "pw")(c))
				if a.code != refused {
					t.Errorf("alice's right password while cooling down: answered %d, want %d", a.code, refused)
				}
				if rec := c.rig.record(t, a.client, mark); rec.Reason != "cooling-down" || rec.User != "alice" {
					t.Errorf("the refusal's record %+v, want alice cooling down", rec)
				}
				ok := 200
				if c.fe.socks {
					ok = 0
				}
				if a := c.do(t, tunnelTo(env.echo.Addr, "carol", "pw")(c)); a.code != ok {
					t.Errorf("carol from the address where alice cools down: answered %d, want %d", a.code, ok)
				}
			},
		},
		{
			name: "429 per-user connection limit",
			skip: skips{socks4a: noSOCKS4User},
			setup: func(t *testing.T, c *conformCell) func() {
				// limits.max_connections_per_user = 1: alice holds a
				// tunnel on the plain port.
				held, err := c.try(conformFrontEnds[0], c.env.from(), conformAsk{
					target: env.echo.Addr, user: "alice", pass: "pw", payload: payload, hold: true})
				if err != nil || held.code != 200 {
					t.Fatalf("holding a tunnel: %d %v", held.code, err)
				}
				return held.close
			},
			ask:    tunnelTo(env.echo.Addr, "alice", "pw"),
			status: 429, reason: "user-limit", user: "alice",
		},
		{
			name: "429 quota spent",
			skip: skips{socks4a: noSOCKS4User},
			setup: func(t *testing.T, c *conformCell) func() {
				// quinn's one request of the day: the first cell's is
				// granted, the later cells' refused already.
				c.do(t, tunnelTo(env.echo.Addr, "quinn", "pw")(c))
				return nil
			},
			ask:    tunnelTo(env.echo.Addr, "quinn", "pw"),
			status: 429, reason: "quota", user: "quinn", rule: "allow-rest",
		},
		{
			name:  "paced user's tunnel",
			paced: true,
			skip:  skips{socks4a: noSOCKS4User},
			ask: func(c *conformCell) conformAsk {
				return conformAsk{target: env.echo.Addr, user: "alice", pass: "pw", payload: paced}
			},
			status: 200, user: "alice", rule: "allow-rest", upstream: env.echo.Addr, tunnel: true,
			up: int64(len(paced)), down: int64(len(paced)), dial: "ok",
			// 2×24 KiB through a 16 KiB burst at 256 KiB/s.
			minTime: 100 * time.Millisecond,
		},
		{
			name:   "502 dial failure",
			ask:    tunnelTo(env.closed, "alice", "pw"),
			status: 502, reason: "unreachable", user: "alice", rule: "allow-rest", dial: "error",
		},
		{
			name: "502 upstream closed without a response",
			skip: skips{socks: "SOCKS waits for no response"},
			ask: func(c *conformCell) conformAsk {
				return conformAsk{forward: true, target: env.origin.URL("/hangup"), user: "alice", pass: "pw"}
			},
			status: 502, reason: "upstream-failed", user: "alice", rule: "allow-rest", upstream: env.origin.Addr, dial: "ok",
		},
		{
			name: "504 upstream without an answer",
			skip: skips{socks: "SOCKS waits for no response, and a dial timeout cannot be had on loopback"},
			ask: func(c *conformCell) conformAsk {
				return conformAsk{forward: true, target: env.origin.URL("/hang"), user: "alice", pass: "pw"}
			},
			status: 504, reason: "timed-out", user: "alice", rule: "allow-rest", upstream: env.origin.Addr, dial: "ok",
		},
		{
			name: "certificate user",
			skip: skips{noTLS: "no TLS: no client certificate"},
			ask: func(c *conformCell) conformAsk {
				return conformAsk{forward: true, target: env.origin.URL("/cert"), cert: env.carol}
			},
			status: 200, user: "carol", rule: "allow-rest", upstream: env.origin.Addr,
			down: int64(len(conformBody)), dial: "ok", firstByte: true,
		},
		{
			name: "certificate of a user not on the listener",
			skip: skips{noTLS: "no TLS: no client certificate"},
			ask: func(c *conformCell) conformAsk {
				return conformAsk{forward: true, target: env.origin.URL("/dave"), cert: env.dave}
			},
			// No identity and no credentials: the usual challenge.
			status: 407, reason: "auth-missing", authFail: true, authAsks: 1,
		},
		{
			name: "certificate without a common name",
			skip: skips{noTLS: "no TLS: no client certificate"},
			ask: func(c *conformCell) conformAsk {
				return conformAsk{forward: true, target: env.origin.URL("/nocn"), cert: env.noCN}
			},
			status: 407, reason: "auth-missing", authFail: true, authAsks: 1,
		},
	}

	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			for _, fe := range conformFrontEnds {
				t.Run(fe.name, func(t *testing.T) {
					if why := row.skip.reason(fe); why != "" {
						t.Skip(why)
					}
					runConformCell(t, row, &conformCell{env: env, rig: rigs[row.paced], fe: fe, from: env.from()})
				})
			}
		})
	}
}

// runConformCell runs one outcome through one front-end and checks what
// it answered, logged and counted.
func runConformCell(t *testing.T, row conformRow, c *conformCell) {
	r := c.rig
	r.waitConns(t, 0) // the cells before have ended: their counts are in
	var undo func()
	if row.setup != nil {
		undo = row.setup(t, c)
	}
	base := 0
	if undo != nil {
		base = 1
		defer func() {
			undo()
			r.waitConns(t, 0)
		}()
	} else {
		r.waitConns(t, 0)
	}
	a := row.ask(c)
	want := conformExpectFor(row, c.fe, a)

	before := r.snapshot(t)
	mark := r.logLen() // the setup's records are before it
	start := time.Now()
	got := c.do(t, a)
	took := time.Since(start)
	// The connection ends with the request: once the server has given its
	// count back, the request was finished, its metrics counted.
	r.waitConns(t, base)
	after := r.snapshot(t)

	if got.code != want.code {
		t.Errorf("answered %d, want %d (body %q)", got.code, want.code, got.body)
	}
	if row.status == 200 && a.forward && got.body != conformBody {
		t.Errorf("forwarded body %q, want %q", got.body, conformBody)
	}
	if !c.fe.socks {
		// The refusals' fields: a challenge, a time to come back.
		if h := "Proxy-Authenticate"; got.code == 407 && got.header.Get(h) == "" {
			t.Errorf("407 without %s", h)
		}
		if h := "Retry-After"; got.code == 429 && row.authFail && got.header.Get(h) == "" {
			t.Errorf("429 after failed authentications without %s", h)
		}
	}
	if took < row.minTime {
		t.Errorf("took %v, want at least %v: the user's bytes were not paced", took, row.minTime)
	}

	deltas := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			deltas[k] = d
		}
	}
	for k, w := range want.deltas {
		if deltas[k] != w {
			t.Errorf("metric %s: delta %v, want %v", k, deltas[k], w)
		}
	}
	for k, d := range deltas {
		if _, ok := want.deltas[k]; !ok {
			t.Errorf("metric %s: delta %v, want none", k, d)
		}
	}

	if want.record {
		rec := r.record(t, got.client, mark)
		want.rec.Client = rec.Client
		if rec != want.rec {
			t.Errorf("access log record\n got %+v\nwant %+v", rec, want.rec)
		}
	} else if rec, ok := r.find(t, got.client, mark); ok {
		t.Errorf("access log record %+v, want none", rec)
	}
	if row.after != nil {
		row.after(t, c)
	}
}
