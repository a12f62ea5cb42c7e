package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/intercept"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// The transparent rig: a client namespace C whose traffic goes through
// namespace P (rustle, and the router) to an origin namespace O. Every
// address is from the documentation ranges and exists only inside the
// namespaces.
//
//	C: vc 198.51.100.2/24 2001:db8:c::2/64, default routes through P
//	P: vpc 198.51.100.1/24 2001:db8:c::1/64 (to C), vpo 192.0.2.1/24 2001:db8:a::1/64 (to O), forwarding
//	O: vo 192.0.2.100/24 2001:db8:a::100/64, default routes through P;
//	   HTTP on 80 and 8080, HTTPS on 443 for origin.test, origin6.test and denied.test
const (
	tpOrigin4 = "192.0.2.100"
	tpOrigin6 = "2001:db8:a::100"
	tpClient4 = "198.51.100.2"
	tpRouter4 = "198.51.100.1"
	tpMark    = 0x2a // deploy/transparent's
)

// TestTransparentNetns sends clients that know of no proxy (curl,
// Python's urllib and Go's net/http, none with a proxy configured) from
// namespace C to an origin in namespace O, through rustle in P, first
// with nftables REDIRECT rules, then with TPROXY rules (IPv4 and IPv6):
// plain HTTP and HTTPS reach the origin, with the Host and the TLS
// server name they gave, and the access log names each (protocol
// transparent, the URL or the server name, orig_dst); a denied host is
// refused (403 over HTTP, a TLS alert over TLS) and never reaches the
// origin; a Host naming a loopback address goes to the original
// destination; a private destination is refused by the guard; a port
// the rules do not allow is refused; a ClientHello without a server name
// is tunnelled to the address; a connection to the listener that was
// not redirected is closed (not-redirected). Then the loop: rules that
// redirect P's own traffic skip rustle's egress.mark, and rustle reaches
// the origin; a rustle without the mark sees its own connection come
// back and refuses it (loop) rather than dialling it again.
func TestTransparentNetns(t *testing.T) {
	if v, child := proxytest.NetnsChild(); child {
		c, o, _ := strings.Cut(v, ",")
		transparentChild(t, c, o)
		return
	}
	proxytest.RequireNetns(t)
	proxytest.RequireTool(t, "nft", "nftables")
	proxytest.RequireTool(t, "curl", "curl")
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("/usr/bin/python3 is missing (scripts/deps.sh installs python3)")
		}
		t.Skip("/usr/bin/python3 is missing")
	}
	c := proxytest.NewNetns(t, "rustle-tc")
	p := proxytest.NewNetns(t, "rustle-tp")
	o := proxytest.NewNetns(t, "rustle-to")
	ip := func(args ...string) { t.Helper(); proxytest.IP(t, args...) }
	ip("-n", p, "link", "add", "vpc", "type", "veth", "peer", "name", "vc", "netns", c)
	ip("-n", p, "link", "add", "vpo", "type", "veth", "peer", "name", "vo", "netns", o)
	ip("-n", p, "addr", "add", tpRouter4+"/24", "dev", "vpc")
	ip("-n", p, "addr", "add", "2001:db8:c::1/64", "dev", "vpc", "nodad")
	ip("-n", p, "addr", "add", "192.0.2.1/24", "dev", "vpo")
	ip("-n", p, "addr", "add", "2001:db8:a::1/64", "dev", "vpo", "nodad")
	ip("-n", p, "link", "set", "vpc", "up")
	ip("-n", p, "link", "set", "vpo", "up")
	ip("-n", c, "addr", "add", tpClient4+"/24", "dev", "vc")
	ip("-n", c, "addr", "add", "2001:db8:c::2/64", "dev", "vc", "nodad")
	ip("-n", c, "link", "set", "vc", "up")
	ip("-n", c, "route", "add", "default", "via", tpRouter4)
	ip("-n", c, "-6", "route", "add", "default", "via", "2001:db8:c::1")
	ip("-n", o, "addr", "add", tpOrigin4+"/24", "dev", "vo")
	ip("-n", o, "addr", "add", tpOrigin6+"/64", "dev", "vo", "nodad")
	ip("-n", o, "link", "set", "vo", "up")
	ip("-n", o, "route", "add", "default", "via", "192.0.2.1")
	ip("-n", o, "-6", "route", "add", "default", "via", "2001:db8:a::1")
	proxytest.RunInNetns(t, p, c+","+o)
}

// tpOrigin serves in namespace ns: HTTP on 80 and 8080, HTTPS on 443
// with cert; each answer says the Host and path it got. On 9, a plain TCP
// service that speaks first (tpBanner), then echoes what it reads. It
// returns the paths asked, by order.
type tpOrigin struct {
	mu    chan struct{}
	paths []string
}

func (o *tpOrigin) add(p string) {
	o.mu <- struct{}{}
	o.paths = append(o.paths, p)
	<-o.mu
}

func (o *tpOrigin) asked(p string) bool {
	o.mu <- struct{}{}
	defer func() { <-o.mu }()
	for _, q := range o.paths {
		if q == p {
			return true
		}
	}
	return false
}

func startTPOrigin(t *testing.T, ns string, cert tls.Certificate) *tpOrigin {
	o := &tpOrigin{mu: make(chan struct{}, 1)}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.add(r.URL.Path)
		fmt.Fprintf(w, "host=%s path=%s tls=%v", r.Host, r.URL.Path, r.TLS != nil)
	})
	for _, port := range []string{"80", "8080"} {
		srv := &http.Server{Handler: h}
		go srv.Serve(proxytest.ListenIn(t, ns, "tcp", ":"+port))
		t.Cleanup(func() { srv.Close() })
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(tls.NewListener(proxytest.ListenIn(t, ns, "tcp", ":443"), &tls.Config{Certificates: []tls.Certificate{cert}}))
	t.Cleanup(func() { srv.Close() })
	ln := proxytest.ListenIn(t, ns, "tcp", ":9")
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.Write([]byte(tpBanner))
				io.Copy(c, c)
			}()
		}
	}()
	return o
}

// tpBanner is what tpOrigin's port 9 says first.
const tpBanner = "banner\n"

// nft loads ruleset into the namespace the test runs in (P), replacing
// what is there.
func nft(t *testing.T, ruleset string) {
	t.Helper()
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader("flush ruleset\n" + ruleset)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v: %s\n%s", err, out, ruleset)
	}
}

// transparentChild is TestTransparentNetns inside namespace P; c and o
// are the client's and the origin's namespaces.
func transparentChild(t *testing.T, c, o string) {
	for _, f := range []string{"/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding"} {
		if err := os.WriteFile(f, []byte("1"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cert, roots := proxytest.SelfSignedFor(t, "origin.test", "origin6.test", "denied.test")
	origin := startTPOrigin(t, o, cert)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, proxytest.CertPEM(cert.Leaf), 0o644); err != nil {
		t.Fatal(err)
	}
	proxytest.NetnsHosts(t, c, tpOrigin4+" origin.test denied.test", tpOrigin6+" origin6.test")

	src := fmt.Sprintf(`
allow_private = ["192.0.2.0/24", "2001:db8:a::/64"]
timeouts = { client_hello = "2s" }
limits = { max_connections_per_client = 8 }

[egress]
mark = %d

[acl]
default = "deny"

[[acl.rules]]
name = "no-denied"
action = "deny"
hosts = ["denied.test", "127.0.0.0/8"]

[[acl.rules]]
name = "lan"
action = "allow"
clients = ["198.51.100.0/24", "2001:db8:c::/64", "192.0.2.1"]
protocols = ["transparent"]
ports = ["80", "443", "8080", "9"]

[[listen]]
name = "redirect"
protocol = "transparent"
address = ":0"

[[listen]]
name = "tproxy"
protocol = "transparent"
mode = "tproxy"
address = ":0"
`, tpMark)
	cfg, err := config.Parse([]byte(src), "transparent.toml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Workers = 1
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	access := &logBuffer{}
	srv, addrs := startLogged(t, cfg, slog.New(slog.DiscardHandler), access)
	port := func(name string) string {
		_, p, _ := net.SplitHostPort(addrs[name])
		return p
	}

	// Python and Go clients, with no proxy configured.
	python := func(url string) (string, error) {
		script := `import ssl, sys, urllib.request
ctx = ssl.create_default_context(cafile=sys.argv[2])
op = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))
print(op.open(sys.argv[1], timeout=10).read().decode())`
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		out, err := proxytest.RunIn(ctx, c, "/usr/bin/python3", "-c", script, url, ca)
		return strings.TrimSpace(string(out)), err
	}
	curl := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		out, err := proxytest.RunIn(ctx, c, "curl", append([]string{"-sS", "--max-time", "10", "--noproxy", "*", "--cacert", ca}, args...)...)
		return strings.TrimSpace(string(out)), err
	}
	goGet := func(url, serverName string) (int, string, error) {
		tr := &http.Transport{Proxy: nil, DisableKeepAlives: true,
			TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: serverName, InsecureSkipVerify: serverName == ""},
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				host, port, _ := net.SplitHostPort(addr)
				switch host {
				case "origin.test", "denied.test":
					host = tpOrigin4
				case "origin6.test":
					host = tpOrigin6
				}
				return proxytest.DialIn(ctx, c, network, net.JoinHostPort(host, port))
			}}
		defer tr.CloseIdleConnections()
		cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		resp, err := cl.Get(url)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}

	clients := func(t *testing.T, listener, host, origAddr string) {
		t.Run("curl", func(t *testing.T) {
			for _, u := range []string{"http://" + host + "/curl-" + listener, "https://" + host + "/curl-tls-" + listener} {
				got, err := curl(u)
				want := "host=" + host + " path=" + u[strings.LastIndex(u, "/"):]
				if err != nil || !strings.HasPrefix(got, want) {
					t.Fatalf("curl %s: %q, %v; want %q", u, got, err, want)
				}
			}
		})
		t.Run("python", func(t *testing.T) {
			for _, u := range []string{"http://" + host + "/py-" + listener, "https://" + host + "/py-tls-" + listener} {
				got, err := python(u)
				if err != nil || !strings.HasPrefix(got, "host="+host+" path=/py") {
					t.Fatalf("python %s: %q, %v", u, got, err)
				}
			}
		})
		t.Run("go", func(t *testing.T) {
			for _, u := range []string{"http://" + host + "/go-" + listener, "https://" + host + "/go-tls-" + listener} {
				status, body, err := goGet(u, host)
				if err != nil || status != 200 || !strings.HasPrefix(body, "host="+host+" path=/go") {
					t.Fatalf("go %s: %d %q, %v", u, status, body, err)
				}
			}
		})
		t.Run("the access log names them", func(t *testing.T) {
			for _, who := range []string{"curl", "py", "go"} {
				rec := waitJSONRecord(t, access, func(r map[string]any) bool {
					return r["listener"] == listener && r["target"] == "http://"+host+"/"+who+"-"+listener
				})
				if rec["protocol"] != "transparent" || rec["method"] != "GET" || rec["orig_dst"] != net.JoinHostPort(origAddr, "80") ||
					rec["status"] != float64(200) {
					t.Errorf("%s over HTTP: %v", who, rec)
				}
				rec = waitJSONRecord(t, access, func(r map[string]any) bool {
					return r["listener"] == listener && r["sni"] == host && r["bytes_down"].(float64) > 0 &&
						r["orig_dst"] == net.JoinHostPort(origAddr, "443")
				})
				if rec["protocol"] != "transparent" || rec["method"] != "CONNECT" || rec["target"] != host+":443" {
					t.Errorf("%s over TLS: %v", who, rec)
				}
			}
		})
	}

	refusals := func(t *testing.T, listener string) {
		t.Run("a denied host is refused", func(t *testing.T) {
			if got, err := curl("-o", "/dev/null", "-w", "%{http_code}", "http://denied.test/denied-"+listener); got != "403" {
				t.Errorf("http://denied.test: %q, %v; want 403", got, err)
			}
			if got, err := curl("https://denied.test/denied-tls-" + listener); err == nil {
				t.Errorf("https://denied.test: %q; want a failure", got)
			}
			if origin.asked("/denied-"+listener) || origin.asked("/denied-tls-"+listener) {
				t.Error("the origin was asked for a denied host")
			}
			waitJSONRecord(t, access, func(r map[string]any) bool {
				return r["listener"] == listener && r["sni"] == "denied.test" && r["reason"] == "denied" && r["rule"] == "no-denied"
			})
		})
		t.Run("the Host does not choose the destination", func(t *testing.T) {
			got, err := curl("-H", "Host: 127.0.0.1", "http://origin.test/pinned-"+listener)
			if err != nil || !strings.HasPrefix(got, "host=127.0.0.1 path=/pinned-") {
				t.Fatalf("Host 127.0.0.1 to the origin: %q, %v; want the origin's answer", got, err)
			}
		})
		t.Run("a private destination is refused by the guard", func(t *testing.T) {
			if got, _ := curl("-o", "/dev/null", "-w", "%{http_code}", "http://10.9.9.9/private-"+listener); got != "403" {
				t.Errorf("http://10.9.9.9: %q; want 403", got)
			}
			waitJSONRecord(t, access, func(r map[string]any) bool {
				return r["listener"] == listener && r["reason"] == "forbidden" && r["orig_dst"] == "10.9.9.9:80"
			})
		})
		t.Run("a port the rules do not allow is refused", func(t *testing.T) {
			if got, _ := curl("-o", "/dev/null", "-w", "%{http_code}", "http://origin.test:8081/port-"+listener); got != "403" {
				t.Errorf("port 8081: %q; want 403", got)
			}
		})
		t.Run("a ClientHello without a server name goes to the address", func(t *testing.T) {
			status, body, err := goGet("https://"+tpOrigin4+"/nosni-"+listener, "")
			if err != nil || status != 200 {
				t.Fatalf("TLS without SNI: %d %q %v", status, body, err)
			}
			waitJSONRecord(t, access, func(r map[string]any) bool {
				return r["listener"] == listener && r["sni"] == "[no-sni]" && r["target"] == tpOrigin4+":443"
			})
		})
	}

	ipv6 := func(t *testing.T, listener string) {
		for _, u := range []string{"http://origin6.test/curl6-" + listener, "https://origin6.test/curl6-tls-" + listener} {
			got, err := curl(u)
			if err != nil || !strings.HasPrefix(got, "host=origin6.test path=/curl6") {
				t.Fatalf("curl %s: %q, %v", u, got, err)
			}
		}
		waitJSONRecord(t, access, func(r map[string]any) bool {
			return r["listener"] == listener && r["sni"] == "origin6.test" && r["orig_dst"] == "["+tpOrigin6+"]:443"
		})
		waitJSONRecord(t, access, func(r map[string]any) bool {
			return r["listener"] == listener && r["target"] == "http://origin6.test/curl6-"+listener && r["orig_dst"] == "["+tpOrigin6+"]:80"
		})
	}

	// tcpTunnels: connections whose first bytes are neither TLS nor
	// HTTP (or that send none within timeouts.client_hello, 2 s, their
	// server speaking first) are plain TCP tunnels to the original
	// destination, their first bytes sent on, and logged [not-tls] (or
	// [incomplete], when nothing came).
	tcpTunnels := func(t *testing.T, listener string) {
		for _, tc := range []struct {
			name, send, sni string
		}{
			{"a protocol that is neither TLS nor HTTP", "SSH-2.0-rustle-test\r\n", "[not-tls]"},
			{"a client whose server speaks first", "", "[incomplete]"},
			{"the start of a method, then silence", "GET", "[not-tls]"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				mark := len(access.String()) // the rows before may have had this client's port
				conn, err := proxytest.DialIn(context.Background(), c, "tcp", net.JoinHostPort(tpOrigin4, "9"))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(10 * time.Second))
				local := conn.LocalAddr().String()
				if _, err := io.WriteString(conn, tc.send); err != nil {
					t.Fatal(err)
				}
				want := tpBanner + tc.send
				got := make([]byte, len(want))
				if _, err := io.ReadFull(conn, got); err != nil || string(got) != want {
					t.Fatalf("read %q, %v; want %q", got, err, want)
				}
				conn.Close()
				rec := waitJSONRecordSince(t, access, mark, func(r map[string]any) bool {
					return r["listener"] == listener && r["client"] == local
				})
				if rec["protocol"] != "transparent" || rec["method"] != "CONNECT" || rec["target"] != tpOrigin4+":9" ||
					rec["orig_dst"] != tpOrigin4+":9" || rec["sni"] != tc.sni || rec["bytes_up"] != float64(len(tc.send)) {
					t.Errorf("record %v; want a CONNECT to %s:9, sni %s, %d bytes up", rec, tpOrigin4, tc.sni, len(tc.send))
				}
			})
		}
	}

	t.Run("redirect", func(t *testing.T) {
		nft(t, fmt.Sprintf(`
table inet rustle {
	chain prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		iifname "vpc" tcp dport { 80, 443, 8081, 9 } redirect to :%s
		iifname "vpc" ip daddr 10.9.9.9 tcp dport 80 redirect to :%s
	}
	chain forward {
		type filter hook forward priority filter; policy accept;
		iifname "vpc" udp dport 443 reject
	}
}`, port("redirect"), port("redirect")))
		clients(t, "redirect", "origin.test", tpOrigin4)
		t.Run("IPv6", func(t *testing.T) { ipv6(t, "redirect") })
		refusals(t, "redirect")
		tcpTunnels(t, "redirect")
		t.Run("the listener's limits apply", func(t *testing.T) {
			// max_connections_per_client = 8: of 100 connections at once
			// from the client, 8 are held (waiting for their first
			// bytes) and the others closed unanswered.
			var held, closed int
			var conns []net.Conn
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			for range 100 {
				conn, err := proxytest.DialIn(context.Background(), c, "tcp", net.JoinHostPort(tpOrigin4, "80"))
				if err != nil {
					t.Fatal(err)
				}
				conns = append(conns, conn)
			}
			// A connection not closed yet may only be slow to be (a
			// loaded machine): those that time out are read again,
			// until 92 are closed or 10 s have passed; then the rest
			// must still be open.
			open := conns
			for deadline := time.Now().Add(10 * time.Second); closed < 92 && time.Now().Before(deadline); {
				var still []net.Conn
				for _, conn := range open {
					conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
					if _, err := conn.Read(make([]byte, 1)); err == io.EOF {
						closed++
					} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
						still = append(still, conn)
					}
				}
				open = still
			}
			for _, conn := range open {
				conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
				if _, err := conn.Read(make([]byte, 1)); err == io.EOF {
					closed++
				} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
					held++
				}
			}
			if held != 8 || closed != 92 {
				t.Errorf("%d connections held, %d closed; want 8 and 92", held, closed)
			}
			// The next tests' connections come from the same client:
			// they wait for the held ones' admissions to be given back
			// (after their access log records, so those do not tell).
			for _, c := range conns {
				c.Close()
			}
			proxytest.WaitFor(t, "the held connections released", func() bool { return srv.gen.Limiter.Conns() == 0 })
		})
		t.Run("QUIC is rejected", func(t *testing.T) {
			conn, err := proxytest.DialIn(context.Background(), c, "udp", net.JoinHostPort(tpOrigin4, "443"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(3 * time.Second))
			conn.Write([]byte("a QUIC Initial, as far as the rules know"))
			if _, err := conn.Read(make([]byte, 64)); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("UDP 443: %v; want connection refused (the rules' reject), at once", err)
			}
		})
		t.Run("a connection that was not redirected is closed", func(t *testing.T) {
			conn, err := proxytest.DialIn(context.Background(), c, "tcp", net.JoinHostPort(tpRouter4, port("redirect")))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := conn.Read(make([]byte, 1)); err != io.EOF {
				t.Errorf("read: %v; want EOF", err)
			}
			waitJSONRecord(t, access, func(r map[string]any) bool {
				return r["listener"] == "redirect" && r["reason"] == "not-redirected"
			})
		})
	})

	t.Run("tproxy", func(t *testing.T) {
		ip := func(args ...string) {
			t.Helper()
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				t.Fatalf("ip %v: %v: %s", args, err, out)
			}
		}
		ip("rule", "add", "fwmark", "1", "lookup", "100")
		ip("route", "add", "local", "0.0.0.0/0", "dev", "lo", "table", "100")
		ip("-6", "rule", "add", "fwmark", "1", "lookup", "100")
		ip("-6", "route", "add", "local", "::/0", "dev", "lo", "table", "100")
		nft(t, fmt.Sprintf(`
table inet rustle {
	chain prerouting {
		type filter hook prerouting priority mangle; policy accept;
		iifname "vpc" meta l4proto tcp socket transparent 1 meta mark set 1 accept
		iifname "vpc" meta nfproto ipv4 tcp dport { 80, 443, 8081 } tproxy ip to :%[1]s meta mark set 1 accept
		iifname "vpc" meta nfproto ipv6 tcp dport { 80, 443, 8081 } tproxy ip6 to :%[1]s meta mark set 1 accept
		iifname "vpc" ip daddr 10.9.9.9 tcp dport 80 tproxy ip to :%[1]s meta mark set 1 accept
	}
}`, port("tproxy")))
		t.Run("IPv4", func(t *testing.T) { clients(t, "tproxy", "origin.test", tpOrigin4) })
		t.Run("IPv6", func(t *testing.T) { ipv6(t, "tproxy") })
		refusals(t, "tproxy")
	})

	t.Run("loop", func(t *testing.T) {
		// A second rustle without the mark, for the loop it makes.
		cfg2, err := config.Parse([]byte(strings.Replace(src, fmt.Sprintf("mark = %d", tpMark), "", 1)), "nomark.toml")
		if err != nil {
			t.Fatal(err)
		}
		cfg2.Workers = 1
		cfg2.Listen = cfg2.Listen[:1]
		if err := cfg2.Validate(); err != nil {
			t.Fatal(err)
		}
		access2 := &logBuffer{}
		_, addrs2 := startLogged(t, cfg2, slog.New(slog.DiscardHandler), access2)
		_, port2, _ := net.SplitHostPort(addrs2["redirect"])
		// P's own connections to the origin: ports 80 and 443 go to the
		// rustle with the mark by the host rules of deploy/transparent
		// (their port changed to the listener's), 8080 to the one
		// without.
		host, err := os.ReadFile("../../deploy/transparent/host.nft")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(host), fmt.Sprintf("meta mark %#x return", tpMark)) {
			t.Fatalf("host.nft does not skip the mark %#x", tpMark)
		}
		nft(t, strings.ReplaceAll(string(host), ":3129", ":"+port("redirect"))+fmt.Sprintf(`
table inet loop {
	chain output {
		type nat hook output priority -100; policy accept;
		ip daddr %s tcp dport 8080 redirect to :%s
	}
}`, tpOrigin4, port2))
		get := func(url string) (int, string) {
			t.Helper()
			cl := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}, Timeout: 10 * time.Second}
			resp, err := cl.Get(url)
			if err != nil {
				t.Fatalf("GET %s: %v", url, err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		status, body := get("http://" + tpOrigin4 + "/loop-marked")
		if status != 200 || !strings.Contains(body, "path=/loop-marked") {
			t.Fatalf("through the rustle with the mark: %d %q", status, body)
		}
		waitJSONRecord(t, access, func(r map[string]any) bool {
			return r["target"] == "http://"+tpOrigin4+"/loop-marked" && r["status"] == float64(200) &&
				strings.HasPrefix(r["client"].(string), "192.0.2.1:")
		})
		status, body = get("http://" + tpOrigin4 + ":8080/loop-unmarked")
		if status != 502 {
			t.Errorf("through the rustle without the mark: %d %q; want 502", status, body)
		}
		waitJSONRecord(t, access2, func(r map[string]any) bool { return r["reason"] == "loop" })
		if origin.asked("/loop-unmarked") {
			t.Error("the looping request reached the origin")
		}
		if n := strings.Count(access2.String(), `"reason":"loop"`); n != 1 {
			t.Errorf("%d loop refusals; want 1:\n%s", n, access2)
		}
	})

	t.Run("the deploy files", func(t *testing.T) {
		for _, f := range []string{"../../deploy/transparent/rustle.toml"} {
			cfg, err := config.Load(f)
			if err == nil {
				err = cfg.Validate()
			}
			if err != nil {
				t.Errorf("%s: %v", f, err)
			}
		}
		pod, err := os.ReadFile("../../deploy/transparent/pod.yaml")
		if err != nil {
			t.Fatal(err)
		}
		toml, ruleset := yamlBlock(string(pod), "rustle.toml"), yamlBlock(string(pod), "redirect.nft")
		cfg, err := config.Parse([]byte(toml), "pod.yaml:rustle.toml")
		if err == nil {
			cfg.SetDefaults()
			err = cfg.Validate()
		}
		if err != nil {
			t.Errorf("pod.yaml's rustle.toml: %v\n%s", err, toml)
		}
		for name, rules := range map[string]string{"pod.yaml's redirect.nft": ruleset, "host.nft": ""} {
			args := []string{"-c", "-f", "-"}
			if rules == "" {
				args = []string{"-c", "-f", "../../deploy/transparent/host.nft"}
			}
			cmd := exec.Command("nft", args...)
			cmd.Stdin = strings.NewReader(rules)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("nft -c %s: %v: %s", name, err, out)
			}
		}
	})
}

// yamlBlock returns the literal block scalar (key: |) named key in a
// YAML document, its indentation removed.
func yamlBlock(doc, key string) string {
	_, rest, ok := strings.Cut(doc, "  "+key+": |\n")
	if !ok {
		return ""
	}
	var b strings.Builder
	for line := range strings.Lines(rest) {
		if !strings.HasPrefix(line, "    ") && strings.TrimSpace(line) != "" {
			break
		}
		b.WriteString(strings.TrimPrefix(line, "    "))
	}
	return b.String()
}

// TestTransparentInterceptWarning checks that a start with interception
// rules warns once for each transparent listener, which never intercepts,
// and not for the proxy ports beside it nor without rules.
func TestTransparentInterceptWarning(t *testing.T) {
	caDir, _ := writeInterceptCA(t, t.TempDir(), "warn")
	const line = `level=WARN msg="transparent listener never intercepts: its TLS connections are spliced whatever ` +
		`[[intercept.rules]] say; clients to intercept must use a proxy port" listener=`
	for _, tt := range []struct {
		name  string
		rules []config.InterceptRule
		want  []string // the transparent listeners warned about
	}{
		{"rules", []config.InterceptRule{{Name: "api", Criteria: config.Criteria{Hosts: []string{"api.example"}}}}, []string{"tp1", "tp2"}},
		{"no rules", nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Workers = 1
			cfg.Listen = []config.Listener{
				{Name: "plain", Address: "127.0.0.1:0"},
				{Name: "tp1", Address: "127.0.0.1:0", Protocol: config.ProtocolTransparent, Auth: config.AuthNone},
				{Name: "tp2", Address: "127.0.0.1:0", Protocol: config.ProtocolTransparent, Auth: config.AuthNone},
			}
			cfg.Intercept = config.Intercept{CACert: filepath.Join(caDir, intercept.CACertFile),
				CAKey: filepath.Join(caDir, intercept.CAKeyFile), Rules: tt.rules}
			cfg.SetDefaults()
			if err := cfg.Validate(); err != nil {
				t.Fatalf("config: %v", err)
			}
			logs := &logBuffer{}
			startLogged(t, cfg, slog.New(slog.NewTextHandler(logs, nil)), &logBuffer{})
			got := logs.String()
			for _, name := range tt.want {
				if n := strings.Count(got, line+name+"\n"); n != 1 {
					t.Errorf("%d warnings for listener %s, want 1; log:\n%s", n, name, got)
				}
			}
			if n := strings.Count(got, "never intercepts"); n != len(tt.want) {
				t.Errorf("%d warnings, want %d; log:\n%s", n, len(tt.want), got)
			}
		})
	}
}
