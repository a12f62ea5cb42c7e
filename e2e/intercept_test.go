//go:build linux

package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// originPKI is a CA for the test's origins and what it signed: the
// certificates intercept.upstream_ca trusts.
type originPKI struct {
	dir    string
	caPath string // the root, PEM: upstream_ca
	root   *x509.Certificate
	key    *ecdsa.PrivateKey
}

func newOriginPKI(t testing.TB) *originPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "e2e origins root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := x509.ParseCertificate(der)
	p := &originPKI{dir: t.TempDir(), root: root, key: key}
	p.caPath = filepath.Join(p.dir, "origins-root.pem")
	writePEM(t, p.caPath, "CERTIFICATE", der)
	return p
}

// leaf signs a certificate for localhost and 127.0.0.1 and writes it and
// its key; it returns the files and the pair.
func (p *originPKI) leaf(t testing.TB, name string) (certPath, keyPath string, pair tls.Certificate) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.root, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	certPath, keyPath = filepath.Join(p.dir, name+".pem"), filepath.Join(p.dir, name+".key")
	writePEM(t, certPath, "CERTIFICATE", der)
	writePEM(t, keyPath, "PRIVATE KEY", kder)
	return certPath, keyPath, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// goTLSOrigin starts a Go HTTPS origin (HTTP/1.1 and HTTP/2) on
// 127.0.0.1 with cert, answering with what it got, and returns its port.
func goTLSOrigin(t testing.TB, cert tls.Certificate) string {
	t.Helper()
	_, port := startTLSOrigin(t, cert, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Server", "go-origin")
		fmt.Fprintf(w, "go origin %s %s auth=%q\n", r.Proto, r.URL.RequestURI(), r.Header.Get("Authorization"))
	}))
	return port
}

// startTLSOrigin starts a Go HTTPS origin (HTTP/1.1 and HTTP/2) on
// 127.0.0.1 with cert, serving h, closed when the test ends; port is its
// port.
func startTLSOrigin(t testing.TB, cert tls.Certificate, h http.Handler) (srv *httptest.Server, port string) {
	t.Helper()
	srv = httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, port, _ = net.SplitHostPort(srv.Listener.Addr().String())
	return srv, port
}

// startNginx runs Debian's nginx (one process, in the foreground) as an
// HTTPS origin on 127.0.0.1 with its own certificate, HTTP/2 and
// HTTP/1.1, answering with the Authorization it got; it returns its
// port.
func startNginx(t testing.TB, certPath, keyPath string) string {
	t.Helper()
	nginx := proxytest.RequireTool(t, "nginx", "nginx-light")
	dir := t.TempDir()
	port := freePort(t)
	conf := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  server {
    listen 127.0.0.1:%[2]s ssl http2;
    server_name localhost;
    ssl_certificate %[3]s;
    ssl_certificate_key %[4]s;
    location / {
      default_type text/plain;
      return 200 "nginx origin $server_protocol $request_uri auth=\"$http_authorization\"\n";
    }
  }
}
`, dir, port, certPath, keyPath)
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(nginx, "-p", dir, "-c", confPath, "-e", filepath.Join(dir, "error.log"))
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nginx: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", "127.0.0.1:"+port)
		if err == nil {
			c.Close()
			return port
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx did not listen on %s: %v\n%s", port, err, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freePort returns a port nothing listens on now.
func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// interceptRustle writes a CA with `rustle ca`, a token file, and a
// configuration that intercepts the tunnels to localhost (setting
// Authorization from the token file, verifying origins with upstream),
// on a listener with the SNI check in match; it starts rustle and
// returns it with the CA's certificate path and the access log's path.
func interceptRustle(t testing.TB, upstream, extra string) (p *proc, caPath, logPath string) {
	t.Helper()
	caDir := rustleFiles(t, "ca")
	caPath = filepath.Join(caDir, "ca.pem")
	token := writeFile(t, "token", "e2e-s3cret\n")
	logPath = filepath.Join(t.TempDir(), "access.log")
	cfg := proxyConfig("127.0.0.1:0", "5s", fmt.Sprintf(`[access_log]
enabled = true
format = "json"
path = %q

[intercept]
ca_cert = %q
ca_key = %q
upstream_ca = %q

[[intercept.rules]]
name = "local"
hosts = ["localhost", "127.0.0.1"]
request_headers = { set = { Authorization = "Bearer {file:%s}" } }
response_headers = { remove = ["Server"] }
%s`, logPath, caPath, filepath.Join(caDir, "ca-key.pem"), upstream, token, extra))
	cfg = strings.Replace(cfg, `protocol = "http"`, "protocol = \"mixed\"\nsni = \"match\"", 1)
	p = startRustle(t, "-c", writeFile(t, "rustle.toml", cfg))
	p.waitStarted(t)
	return p, caPath, logPath
}

// TestIntercept runs the binary intercepting the tunnels to localhost
// in front of a Go origin and nginx, each with its own certificate that
// upstream_ca verifies, and drives it with curl (--cacert, HTTP/1.1 and
// HTTP/2 inside the tunnel), Python's requests (REQUESTS_CA_BUNDLE),
// Node.js (NODE_EXTRA_CA_CERTS) and Go's net/http (the CA in RootCAs):
// each gets the origin's answer to the request with the Authorization
// the rule read from its file, under a certificate minted by rustle's
// CA. An origin with a self-signed certificate is a 502 that says why;
// openssl fronting another name through a CONNECT is refused (the SNI
// check, before interception). The access log has each request as an
// https URL with intercepted, and never the token.
func TestIntercept(t *testing.T) {
	t.Parallel()
	pki := newOriginPKI(t)
	certPath, keyPath, pair := pki.leaf(t, "origin")
	goPort := goTLSOrigin(t, pair)
	nginxPort := startNginx(t, certPath, keyPath)
	selfCert, _ := proxytest.SelfSigned(t) // not signed by the origins' root
	selfPort := goTLSOrigin(t, selfCert)
	p, caPath, logPath := interceptRustle(t, pki.caPath, "")
	proxy := "http://" + p.addr()
	wantAuth := `auth="Bearer e2e-s3cret"`

	t.Run("curl", func(t *testing.T) {
		for _, tc := range []struct {
			port, flag, proto string
			want              string
		}{
			// Both origins choose h2: rustle speaks HTTP/2 to them
			// whatever the client speaks to rustle.
			{goPort, "--http1.1", "1.1", "go origin HTTP/2.0 /curl-h1 " + wantAuth},
			{goPort, "--http2", "2", "go origin HTTP/2.0 /curl-h2 " + wantAuth},
			{nginxPort, "--http1.1", "1.1", "nginx origin HTTP/2.0 /curl-h1 " + wantAuth},
			{nginxPort, "--http2", "2", "nginx origin HTTP/2.0 /curl-h2 " + wantAuth},
		} {
			path := "/curl-h1"
			if tc.proto == "2" {
				path = "/curl-h2"
			}
			dir := t.TempDir()
			bodyFile, headFile := filepath.Join(dir, "body"), filepath.Join(dir, "head")
			r := curl(t, "-x", proxy, "--cacert", caPath, tc.flag, "-o", bodyFile, "-D", headFile,
				"-w", "%{http_code} %{http_version}", "https://localhost:"+tc.port+path)
			body, _ := os.ReadFile(bodyFile)
			head, _ := os.ReadFile(headFile)
			if r.code != 0 || strings.TrimSpace(string(body)) != tc.want {
				t.Errorf("curl %s to :%s: exit %d, %q, body %q, stderr %q", tc.flag, tc.port, r.code, r.stdout, body, r.stderr)
			}
			if got := r.stdout; got != "200 "+tc.proto {
				t.Errorf("curl %s: status and version inside the tunnel %q, want \"200 %s\"", tc.flag, got, tc.proto)
			}
			if hasHeader(string(head), "Server", "go-origin") {
				t.Errorf("the rule's response edit did not remove Server: %q", head)
			}
		}
		// Without the CA curl refuses rustle's certificate.
		if r := curlVia(t, proxy, "https://localhost:"+goPort+"/untrusted"); r.code == 0 {
			t.Errorf("curl without --cacert took rustle's certificate: %+v", r)
		}
		r := curlVia(t, proxy, "--cacert", caPath, "https://localhost:"+selfPort+"/self-signed")
		if r.status != 502 || !strings.Contains(r.body, "authority rustle does not trust") {
			t.Errorf("self-signed origin: status %d body %q", r.status, r.body)
		}
	})

	t.Run("python requests", func(t *testing.T) {
		python := requirePythonRequests(t)
		script := `import requests, sys
r = requests.get(sys.argv[1], timeout=20)
print(r.status_code, r.text.strip())
`
		env := append(cleanEnv(t), "HTTPS_PROXY="+proxy, "REQUESTS_CA_BUNDLE="+caPath)
		for _, port := range []string{goPort, nginxPort} {
			out := runEnvCmd(t, env, python, "-c", script, "https://localhost:"+port+"/python")
			if !strings.HasPrefix(out, "200 ") || !strings.Contains(out, "/python "+wantAuth) {
				t.Errorf("python requests to :%s: %q", port, out)
			}
		}
	})

	t.Run("node", func(t *testing.T) {
		node, err := exec.LookPath("node")
		if err != nil {
			t.Skip("node not found")
		}
		script := writeFile(t, "get.js", nodeGet)
		env := append(cleanEnv(t), "NODE_EXTRA_CA_CERTS="+caPath)
		for _, port := range []string{goPort, nginxPort} {
			out := runEnvCmd(t, env, node, script, p.addr(), "localhost:"+port, "/node")
			if !strings.HasPrefix(out, "200 ") || !strings.Contains(out, "/node "+wantAuth) {
				t.Errorf("node to :%s: %q", port, out)
			}
		}
	})

	t.Run("go", func(t *testing.T) {
		b, _ := os.ReadFile(caPath)
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(b)
		tr := &http.Transport{Proxy: http.ProxyURL(proxyURL(p.addr(), "", "")), TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		for _, port := range []string{goPort, nginxPort} {
			resp, err := (&http.Client{Transport: tr, Timeout: 20 * time.Second}).Get("https://localhost:" + port + "/go")
			if err != nil {
				t.Fatalf("Go to :%s: %v", port, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(body), "/go "+wantAuth) || resp.ProtoMajor != 2 {
				t.Errorf("Go to :%s: %s %d %q", port, resp.Proto, resp.StatusCode, body)
			}
		}
	})

	t.Run("fronting", func(t *testing.T) {
		openssl := proxytest.RequireTool(t, "openssl", "openssl")
		r := runCmd(t, "", openssl, "s_client", "-proxy", p.addr(), "-connect", "localhost:"+goPort, "-servername", "other.example", "-CAfile", caPath)
		if strings.Contains(r.stdout, "BEGIN CERTIFICATE") {
			t.Error("openssl fronting other.example through CONNECT localhost got a certificate")
		}
	})

	type record struct {
		Method, Target, Reason, SNI string
		Status                      int
		Intercepted                 bool
	}
	// curl: 4 tunnels and their requests, a tunnel refused, a tunnel and
	// its 502; requests, Node and Go: 2 tunnels and their requests each;
	// openssl: a tunnel refused.
	lines := waitLines(t, logPath, 24)
	if strings.Contains(strings.Join(lines, ""), "e2e-s3cret") {
		t.Error("the access log shows the injected token")
	}
	inner, fronted := 0, false
	reasons := map[string]int{}
	for _, line := range lines {
		var r record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("access log line %q: %v", line, err)
		}
		if r.Method == "GET" && r.Intercepted && strings.HasPrefix(r.Target, "https://localhost:") && r.Status == 200 {
			inner++
		}
		if r.Reason == "sni-mismatch" && r.SNI == "other.example" {
			fronted = true
		}
		reasons[r.Reason]++
	}
	if inner != 10 || !fronted || reasons["client-rejected-certificate"] != 1 || reasons["origin-tls"] != 1 {
		t.Errorf("%d intercepted requests logged (want 10), fronting refused %v, reasons %v:\n%s", inner, fronted, reasons, strings.Join(lines, "\n"))
	}
}

// nodeGet fetches https://TARGET/PATH through the HTTP proxy at PROXY
// with Node's own modules: a CONNECT, then TLS (trusting
// NODE_EXTRA_CA_CERTS) and an https request over the tunnel; it prints
// the status and the body.
const nodeGet = `const http = require('http'), https = require('https'), tls = require('tls');
const [proxy, target, path] = process.argv.slice(2);
const [ph, pp] = proxy.split(':');
const [host] = target.split(':');
const req = http.request({ host: ph, port: +pp, method: 'CONNECT', path: target });
req.on('connect', (res, socket) => {
  if (res.statusCode !== 200) { console.log('CONNECT', res.statusCode); process.exit(1); }
  // No agent: the request goes over createConnection's socket.
  const r = https.get({ host, port: +target.split(':')[1], path, createConnection: () => tls.connect({ socket, servername: host }) }, (resp) => {
    let body = '';
    resp.on('data', (d) => { body += d; });
    resp.on('end', () => { console.log(resp.statusCode + ' ' + body.trim()); process.exit(0); });
  });
  r.on('error', (e) => { console.log('error ' + e.message); process.exit(1); });
});
req.on('error', (e) => { console.log('error ' + e.message); process.exit(1); });
req.end();
setTimeout(() => { console.log('timeout'); process.exit(1); }, 20000);
`

// requirePythonRequests returns Debian's python3 when it has requests
// (python3-requests), skipping the test otherwise (failing it under CI).
func requirePythonRequests(t testing.TB) string {
	t.Helper()
	const python = "/usr/bin/python3"
	if err := exec.Command(python, "-c", "import requests").Run(); err == nil {
		return python
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s cannot import requests under CI (scripts/deps.sh installs python3-requests)", python)
	}
	t.Skipf("%s cannot import requests (scripts/deps.sh installs python3-requests)", python)
	return ""
}

// runEnvCmd runs name with args in env within 30 seconds and returns its
// standard output, trimmed; it fails the test when it cannot run.
func runEnvCmd(t testing.TB, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = env
	cmd.WaitDelay = 2 * time.Second
	done := make(chan struct{})
	timer := time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	out, err := cmd.Output()
	close(done)
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Errorf("%s %q: %v: %s %s", name, args, err, out, stderr)
	}
	return strings.TrimSpace(string(out))
}
