//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// randomBytes returns n pseudo-random bytes derived from seed.
func randomBytes(seed uint64, n int) []byte {
	var key [32]byte
	key[0], key[1] = byte(seed), byte(seed>>8)
	key[2], key[3] = byte(seed>>16), byte(seed>>24)
	b := make([]byte, n)
	rand.NewChaCha8(key).Read(b)
	return b
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// curlResult is one curl transfer through a proxy.
type curlResult struct {
	result
	status  int    // %{http_code}
	body    string // the response body
	headers string // the response head(s), as curl -D writes them
}

// curlVia runs curl through proxy (an http:// URL) with args.
func curlVia(t testing.TB, proxy string, args ...string) curlResult {
	t.Helper()
	dir := t.TempDir()
	bodyFile, headFile := filepath.Join(dir, "body"), filepath.Join(dir, "head")
	r := curl(t, append([]string{"-x", proxy, "-o", bodyFile, "-D", headFile, "-w", "%{http_code}"}, args...)...)
	cr := curlResult{result: r}
	cr.status, _ = strconv.Atoi(strings.TrimSpace(r.stdout))
	b, _ := os.ReadFile(bodyFile)
	cr.body = string(b)
	h, _ := os.ReadFile(headFile)
	cr.headers = string(h)
	return cr
}

// hasHeader reports whether a raw head contains the line "name: value"
// (name case-insensitive).
func hasHeader(head, name, value string) bool {
	for line := range strings.Lines(head) {
		k, v, ok := strings.Cut(strings.TrimRight(line, "\r\n"), ":")
		if ok && strings.EqualFold(strings.TrimSpace(k), name) && strings.TrimSpace(v) == value {
			return true
		}
	}
	return false
}

func decodeEcho(t testing.TB, body string) echoReply {
	t.Helper()
	var e echoReply
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("origin /echo reply %q: %v", body, err)
	}
	return e
}

// checkEcho checks that the origin saw method and exactly body, and no
// proxy credentials or Via header.
func checkEcho(t testing.TB, e echoReply, method string, body []byte) {
	t.Helper()
	if e.Method != method {
		t.Errorf("origin saw method %q, want %q", e.Method, method)
	}
	if e.Length != int64(len(body)) || e.SHA256 != sha256Hex(body) {
		t.Errorf("origin got %d bytes (sha256 %.12s), want %d (sha256 %.12s)",
			e.Length, e.SHA256, len(body), sha256Hex(body))
	}
	if e.ProxyAuth != "" {
		t.Errorf("origin saw Proxy-Authorization %q; it is hop-by-hop and must be removed", e.ProxyAuth)
	}
	if e.Via != "" {
		t.Errorf("origin saw Via %q; the default configuration adds none", e.Via)
	}
}

func TestForward(t *testing.T) {
	t.Parallel()
	p := startProxy(t, "127.0.0.1:0", inlineUser("e2e", "pw"))
	o := newOrigin(t, "127.0.0.1", false)
	proxy := proxyURL(p.addr(), "e2e", "pw").String()

	upload := randomBytes(1, 1<<20+17)
	uploadFile := writeFile(t, "upload.bin", string(upload))

	t.Run("curl", func(t *testing.T) {
		needCurl(t)
		t.Run("GET", func(t *testing.T) {
			r := curlVia(t, proxy, o.URL+"/hello")
			if r.code != 0 || r.status != 200 || r.body != "hello from origin\n" || !hasHeader(r.headers, "X-Origin", "e2e") {
				t.Fatalf("curl GET: exit %d status %d body %q head %q stderr %q", r.code, r.status, r.body, r.headers, r.stderr)
			}
		})
		t.Run("GET HTTP/1.0", func(t *testing.T) {
			r := curlVia(t, proxy, "--http1.0", o.URL+"/blob")
			if r.code != 0 || r.status != 200 || len(r.body) != blobSize {
				t.Fatalf("curl --http1.0 GET: exit %d status %d body %d bytes stderr %q", r.code, r.status, len(r.body), r.stderr)
			}
		})
		t.Run("POST", func(t *testing.T) {
			r := curlVia(t, proxy, "--data-binary", "hello=world", o.URL+"/echo")
			if r.code != 0 || r.status != 200 {
				t.Fatalf("curl POST: exit %d status %d stderr %q", r.code, r.status, r.stderr)
			}
			e := decodeEcho(t, r.body)
			checkEcho(t, e, "POST", []byte("hello=world"))
			if e.ContentLength != 11 {
				t.Errorf("origin saw Content-Length %d, want 11", e.ContentLength)
			}
		})
		t.Run("chunked upload", func(t *testing.T) {
			r := curlVia(t, proxy, "-H", "Transfer-Encoding: chunked", "--data-binary", "@"+uploadFile, o.URL+"/echo")
			if r.code != 0 || r.status != 200 {
				t.Fatalf("curl chunked POST: exit %d status %d stderr %q", r.code, r.status, r.stderr)
			}
			e := decodeEcho(t, r.body)
			checkEcho(t, e, "POST", upload)
			if e.ContentLength != -1 || len(e.TransferEncoding) != 1 || e.TransferEncoding[0] != "chunked" {
				t.Errorf("origin saw Content-Length %d, Transfer-Encoding %q; want a streamed chunked body",
					e.ContentLength, e.TransferEncoding)
			}
		})
		t.Run("PUT", func(t *testing.T) {
			r := curlVia(t, proxy, "-X", "PUT", "--data-binary", "@"+uploadFile, o.URL+"/echo")
			if r.code != 0 || r.status != 200 {
				t.Fatalf("curl PUT: exit %d status %d stderr %q", r.code, r.status, r.stderr)
			}
			checkEcho(t, decodeEcho(t, r.body), "PUT", upload)
		})
		t.Run("HEAD", func(t *testing.T) {
			r := curlVia(t, proxy, "-I", o.URL+"/blob")
			if r.code != 0 || r.status != 200 || !hasHeader(r.headers, "Content-Length", strconv.Itoa(blobSize)) {
				t.Fatalf("curl HEAD: exit %d status %d head %q stderr %q", r.code, r.status, r.headers, r.stderr)
			}
		})
	})

	t.Run("wget", func(t *testing.T) {
		wget, err := exec.LookPath("wget")
		if err != nil {
			t.Skip("wget not found in PATH")
		}
		r := runCmd(t, "", wget, "-q", "-O", "-", "-e", "use_proxy=on", "-e", "http_proxy="+proxy,
			"--proxy-user=e2e", "--proxy-password=pw", o.URL+"/hello")
		if r.code != 0 || r.stdout != "hello from origin\n" {
			t.Fatalf("wget: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("go", func(t *testing.T) {
		c := newProxyClient(t, proxyURL(p.addr(), "e2e", "pw"), nil)
		small := randomBytes(2, 3000)
		methods := []struct {
			method string
			body   []byte
		}{
			{"GET", nil},
			{"POST", small},
			{"PUT", small},
			{"PATCH", small},
			{"DELETE", nil},
			{"OPTIONS", nil},
			{"PURGE", small}, // an extension method
		}
		for _, m := range methods {
			t.Run(m.method, func(t *testing.T) {
				var body io.Reader
				if m.body != nil {
					body = bytes.NewReader(m.body)
				}
				resp, got := c.fetch(t, m.method, o.URL+"/echo", body)
				if resp.StatusCode != 200 {
					t.Fatalf("%s: status %s, body %q", m.method, resp.Status, got)
				}
				checkEcho(t, decodeEcho(t, got), m.method, m.body)
			})
		}
		t.Run("chunked upload", func(t *testing.T) {
			big := randomBytes(3, 256<<10+5)
			// A reader of unknown length makes net/http send chunked.
			resp, got := c.fetch(t, "POST", o.URL+"/echo", io.MultiReader(bytes.NewReader(big)))
			if resp.StatusCode != 200 {
				t.Fatalf("status %s, body %q", resp.Status, got)
			}
			e := decodeEcho(t, got)
			checkEcho(t, e, "POST", big)
			if e.ContentLength != -1 || len(e.TransferEncoding) != 1 || e.TransferEncoding[0] != "chunked" {
				t.Errorf("origin saw Content-Length %d, Transfer-Encoding %q; want a streamed chunked body",
					e.ContentLength, e.TransferEncoding)
			}
		})
		t.Run("HEAD", func(t *testing.T) {
			resp, got := c.fetch(t, "HEAD", o.URL+"/blob", nil)
			if resp.StatusCode != 200 || resp.ContentLength != blobSize || got != "" || resp.Header.Get("X-Origin") != "e2e" {
				t.Fatalf("HEAD: status %s Content-Length %d body %q header %v", resp.Status, resp.ContentLength, got, resp.Header)
			}
		})
		t.Run("GET blob", func(t *testing.T) {
			resp, got := c.fetch(t, "GET", o.URL+"/blob", nil)
			if resp.StatusCode != 200 || len(got) != blobSize {
				t.Fatalf("GET: status %s, %d body bytes, want %d", resp.Status, len(got), blobSize)
			}
		})
	})
}

func TestKeepAlive(t *testing.T) {
	t.Parallel()
	p := startProxy(t, "127.0.0.1:0", inlineUser("e2e", "pw"))

	t.Run("go", func(t *testing.T) {
		o := newOrigin(t, "127.0.0.1", false)
		// A first client makes two requests on one connection, the second
		// with "Connection: close", and reads until the proxy closes: by
		// then the upstream connection is back in the shared pool.
		raw, err := net.Dial("tcp", p.addr())
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		raw.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(raw)
		authz := "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("e2e:pw")) + "\r\n"
		for i, conn := range []string{"", "Connection: close\r\n"} {
			fmt.Fprintf(raw, "GET %s/hello HTTP/1.1\r\nHost: %s\r\n%s%s\r\n", o.URL, strings.TrimPrefix(o.URL, "http://"), authz, conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("first client, request %d: %v", i, err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || string(body) != "hello from origin\n" {
				t.Fatalf("first client, request %d: status %s body %q", i, resp.Status, body)
			}
		}
		if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
			t.Fatalf("first client: %q, %v after the last answer, want the end of the connection", rest, err)
		}
		if n := o.conns.Load(); n != 1 {
			t.Errorf("origin accepted %d connections for 2 requests, want 1 (upstream keep-alive)", n)
		}

		// A second client gets the pooled upstream connection and keeps
		// it for its requests.
		c := newProxyClient(t, proxyURL(p.addr(), "e2e", "pw"), nil)
		for i := range 5 {
			resp, body := c.fetch(t, "GET", o.URL+"/hello", nil)
			if resp.StatusCode != 200 || body != "hello from origin\n" {
				t.Fatalf("request %d: status %s body %q", i, resp.Status, body)
			}
		}
		if n := c.dials.Load(); n != 1 {
			t.Errorf("client opened %d connections to the proxy for 5 requests, want 1 (keep-alive to the client)", n)
		}
		if n := o.conns.Load(); n != 1 {
			t.Errorf("origin accepted %d connections after a second client, want 1 (the pool is shared across client connections)", n)
		}
	})

	t.Run("curl", func(t *testing.T) {
		o := newOrigin(t, "127.0.0.1", false)
		args := []string{"-x", proxyURL(p.addr(), "e2e", "pw").String(), "-w", "%{http_code} %{num_connects}\n"}
		for range 3 {
			args = append(args, "-o", os.DevNull, o.URL+"/hello")
		}
		r := curl(t, args...)
		if r.code != 0 || r.stdout != "200 1\n200 0\n200 0\n" {
			t.Fatalf("curl three URLs: exit %d, status and new connections per transfer %q (want 200 1, 200 0, 200 0); stderr %q",
				r.code, r.stdout, r.stderr)
		}
		if n := o.conns.Load(); n != 1 {
			t.Errorf("origin accepted %d connections for 3 requests, want 1", n)
		}
	})
}

// TestPipelined sends two requests in one write and reads the answers in
// order.
func TestPipelined(t *testing.T) {
	t.Parallel()
	p := startProxy(t, "127.0.0.1:0", inlineUser("e2e", "pw"))
	o := newOrigin(t, "127.0.0.1", false)
	c, err := net.DialTimeout("tcp", p.addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	auth := basicAuth("e2e", "pw")
	host := o.hostPort()
	reqs := "GET " + o.URL + "/blob HTTP/1.1\r\nHost: " + host + "\r\n" + auth + "\r\n" +
		"GET " + o.URL + "/hello HTTP/1.1\r\nHost: " + host + "\r\n" + auth + "\r\n"
	if _, err := io.WriteString(c, reqs); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for i, want := range []int{blobSize, len("hello from origin\n")} {
		resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || len(body) != want {
			t.Fatalf("response %d: status %s, %d body bytes (err %v), want 200 with %d", i, resp.Status, len(body), err, want)
		}
	}
}

// checkOneLine checks that body is a one-line reason.
func checkOneLine(t testing.TB, body string) {
	t.Helper()
	line, ok := strings.CutSuffix(body, "\n")
	if !ok || strings.ContainsAny(line, "\r\n") || len(strings.TrimSpace(strings.TrimPrefix(line, "rustle:"))) == 0 {
		t.Errorf("error body %q is not a one-line reason", body)
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// garbageOrigin starts a TCP server that answers every connection with
// bytes that are not HTTP, and returns its address.
func garbageOrigin(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			c.Read(make([]byte, 4096))
			io.WriteString(c, "THIS IS NOT HTTP\r\n\r\n")
			c.Close()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

func TestBadGateway(t *testing.T) {
	t.Parallel()
	p := startProxy(t, "127.0.0.1:0", inlineUser("e2e", "pw"))
	closed := closedPort(t)
	garbage := garbageOrigin(t)
	auth := basicAuth("e2e", "pw")

	t.Run("go GET closed port", func(t *testing.T) {
		c := newProxyClient(t, proxyURL(p.addr(), "e2e", "pw"), nil)
		resp, body := c.fetch(t, "GET", "http://"+closed+"/", nil)
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("status %s, want 502; body %q", resp.Status, body)
		}
		checkOneLine(t, body)
		t.Logf("502 reason: %q", body)
	})
	t.Run("raw CONNECT closed port", func(t *testing.T) {
		resp, body := rawExchange(t, p.addr(), "CONNECT",
			"CONNECT "+closed+" HTTP/1.1\r\nHost: "+closed+"\r\n"+auth+"\r\n")
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("status %s, want 502; body %q", resp.Status, body)
		}
		checkOneLine(t, body)
	})
	t.Run("curl GET closed port", func(t *testing.T) {
		r := curlVia(t, proxyURL(p.addr(), "e2e", "pw").String(), "http://"+closed+"/")
		if r.status != http.StatusBadGateway {
			t.Fatalf("curl: status %d, want 502; exit %d stderr %q", r.status, r.code, r.stderr)
		}
		checkOneLine(t, r.body)
	})
	t.Run("go GET garbage origin", func(t *testing.T) {
		c := newProxyClient(t, proxyURL(p.addr(), "e2e", "pw"), nil)
		resp, body := c.fetch(t, "GET", "http://"+garbage+"/", nil)
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("status %s, want 502; body %q", resp.Status, body)
		}
		checkOneLine(t, body)
	})
	t.Run("origin-form request", func(t *testing.T) {
		resp, body := rawExchange(t, p.addr(), "GET", "GET / HTTP/1.1\r\nHost: "+p.addr()+"\r\n"+auth+"\r\n")
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("origin-form GET to the proxy: status %s, want 400; body %q", resp.Status, body)
		}
	})
}

// haveIPv6Loopback reports whether [::1] can be listened on.
func haveIPv6Loopback() bool {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

func TestIPv6(t *testing.T) {
	t.Parallel()
	if !haveIPv6Loopback() {
		t.Skip("no IPv6 loopback ([::1]) on this machine")
	}
	p := startProxy(t, "[::1]:0", inlineUser("e2e", "pw"))
	if !strings.HasPrefix(p.addr(), "[::1]:") {
		t.Fatalf("proxy listens on %s, want [::1]:PORT", p.addr())
	}
	plain := newOrigin(t, "::1", false)
	secure := newOrigin(t, "::1", true)
	if !strings.HasPrefix(plain.URL, "http://[::1]:") {
		t.Fatalf("origin URL %s is not on [::1]", plain.URL)
	}

	t.Run("go http", func(t *testing.T) {
		c := newProxyClient(t, proxyURL(p.addr(), "e2e", "pw"), nil)
		resp, body := c.fetch(t, "GET", plain.URL+"/hello", nil)
		if resp.StatusCode != 200 || body != "hello from origin\n" {
			t.Fatalf("GET %s: status %s body %q", plain.URL, resp.Status, body)
		}
	})
	t.Run("go https", func(t *testing.T) {
		c := newProxyClient(t, proxyURL(p.addr(), "e2e", "pw"), secure)
		resp, body := c.fetch(t, "GET", secure.URL+"/hello", nil)
		if resp.StatusCode != 200 || body != "hello from origin\n" {
			t.Fatalf("GET %s: status %s body %q", secure.URL, resp.Status, body)
		}
	})
	t.Run("curl https", func(t *testing.T) {
		r := curlVia(t, proxyURL(p.addr(), "e2e", "pw").String(), "-g", "--cacert", secure.certFile(t), secure.URL+"/hello")
		if r.code != 0 || r.status != 200 || r.body != "hello from origin\n" {
			t.Fatalf("curl %s: exit %d status %d body %q stderr %q", secure.URL, r.code, r.status, r.body, r.stderr)
		}
	})
	t.Run("raw CONNECT [::1]", func(t *testing.T) {
		target := secure.hostPort()
		resp, _ := rawExchange(t, p.addr(), "CONNECT",
			"CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n"+basicAuth("e2e", "pw")+"\r\n")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT %s: %s", target, resp.Status)
		}
	})
}
