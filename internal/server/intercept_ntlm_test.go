package server

import (
	"context"
	"encoding/pem"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/intercept"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// ntlmRig is a rustle whose plain listener intercepts the tunnels to
// localhost, in front of an NTLMOrigin whose certificate only
// intercept.upstream_ca verifies (one that chooses h2 and resets its
// streams with HTTP_1_1_REQUIRED when h2 is set); its log is at debug
// level.
type ntlmRig struct {
	proxy  string // the plain listener's address
	origin *proxytest.NTLMOrigin
	ca     string // the interception CA's certificate, PEM
	access *logBuffer
	log    *logBuffer
}

func startNTLMRig(t *testing.T, h2 bool) *ntlmRig {
	t.Helper()
	dir := t.TempDir()
	cert, _ := proxytest.SelfSigned(t)
	r := &ntlmRig{access: &logBuffer{}, log: &logBuffer{}}
	if h2 {
		r.origin = proxytest.StartNTLMOriginH2(t, cert)
	} else {
		r.origin = proxytest.StartNTLMOrigin(t, cert)
	}
	upstream := filepath.Join(dir, "origins.pem")
	if err := os.WriteFile(upstream, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o644); err != nil {
		t.Fatal(err)
	}
	caDir, _ := writeInterceptCA(t, dir, "ntlm")
	r.ca = filepath.Join(caDir, intercept.CACertFile)
	cfg := config.Default()
	cfg.Workers = 2
	cfg.AllowPrivate = []string{"127.0.0.0/8", "::1/128"}
	cfg.Listen = []config.Listener{{Name: "plain", Address: "127.0.0.1:0"}}
	cfg.Intercept = config.Intercept{
		CACert: r.ca, CAKey: filepath.Join(caDir, intercept.CAKeyFile), UpstreamCA: upstream,
		Rules: []config.InterceptRule{{Name: "local", Criteria: config.Criteria{Hosts: []string{"localhost"}}}},
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	logger := slog.New(slog.NewTextHandler(r.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	_, addrs := startLogged(t, cfg, logger, r.access)
	r.proxy = addrs["plain"]
	return r
}

// TestInterceptNTLMOverH2 checks that an HTTP/2 client inside an
// intercepted tunnel, whose requests are not bound to one origin
// connection, is told to retry over HTTP/1.1 when the origin asks for
// NTLM (a 401 offering NTLM or Negotiate), rather than being handed a
// challenge its answer would reach another connection with: Node's
// HTTP/2 client sees its stream reset with HTTP_1_1_REQUIRED, the access
// log says so (status 0, reason http-1.1-required) and so does the debug
// log, and the origin connection that answered goes back to the pool,
// where the client's retry over HTTP/1.1 finds it and runs the handshake
// on it to 200. curl with --ntlm ends with 200 over HTTP/2 (it moves to
// HTTP/1.1 itself) and over HTTP/1.1.
func TestInterceptNTLMOverH2(t *testing.T) {
	r := startNTLMRig(t, false)
	target := r.origin.Addr
	t.Run("node", func(t *testing.T) {
		node := proxytest.RequireTool(t, "node", "nodejs")
		script := filepath.Join(t.TempDir(), "ntlm.js")
		if err := os.WriteFile(script, []byte(nodeNTLM), 0o644); err != nil {
			t.Fatal(err)
		}
		mark, logMark := r.access.Len(), r.log.Len()
		conns := r.origin.Conns()
		out := runNode(t, node, script, r.ca, r.proxy, target, "GET", "/node",
			proxytest.NTLMMessage(1), proxytest.NTLMMessage(3))
		want := []string{
			"h2: error ERR_HTTP2_STREAM_ERROR Stream closed with error code NGHTTP2_HTTP_1_1_REQUIRED",
			"h1 type-1: 401 NTLM",
			"h1 type-3: 200 authenticated on connection " + itoa(conns+1),
		}
		if got := strings.Split(strings.TrimSpace(out), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("node said:\n%s\nwant:\n%s", out, strings.Join(want, "\n"))
		}
		if n := r.origin.Conns() - conns; n != 1 {
			t.Errorf("the origin saw %d new connections, want 1: the one that answered the HTTP/2 request went back to the pool", n)
		}
		rec := waitJSONRecordSince(t, r.access, mark, func(m map[string]any) bool {
			return m["protocol"] == "h2" && m["target"] == "https://"+target+"/node"
		})
		if rec["status"] != float64(0) || rec["reason"] != "http-1.1-required" || rec["intercepted"] != true {
			t.Errorf("access log record of the HTTP/2 request: %v, want status 0, reason http-1.1-required, intercepted", rec)
		}
		proxytest.WaitFor(t, "the debug line of the reset", func() bool {
			logs, _ := r.log.LinesFrom(logMark)
			for line := range strings.Lines(logs) {
				if strings.Contains(line, `msg="gate: request refused"`) && strings.Contains(line, "reason=http-1.1-required status=0 protocol=h2") &&
					strings.Contains(line, "target=https://"+target+"/node") {
					return true
				}
			}
			return false
		})
	})
	t.Run("curl", func(t *testing.T) {
		curl := proxytest.RequireTool(t, "curl", "curl")
		for _, version := range []string{"--http2", "--http1.1"} {
			t.Run(version, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, curl, "-sS", "-v", version, "--ntlm", "-u", "u:p", "--cacert", r.ca,
					"-x", "http://"+r.proxy, "-o", "-", "-w", "\nstatus %{http_code} http %{http_version}\n",
					"https://"+target+"/curl")
				out, err := cmd.CombinedOutput()
				if err != nil || !strings.Contains(string(out), "authenticated on connection") || !strings.Contains(string(out), "status 200 http 1.1") {
					t.Fatalf("curl %s: %v\n%s", version, err, out)
				}
				lines := grepLines(string(out), "HTTP/2", "HTTP/1.1", "HTTP_1_1_REQUIRED", "Downgrades", "Forcing", "ALPN")
				if version == "--http2" && !strings.Contains(lines, "HTTP_1_1_REQUIRED") {
					// Without the reset, curl takes the 401 over
					// HTTP/2 and says "Forcing HTTP/1.1 for NTLM".
					t.Errorf("curl %s was not told HTTP_1_1_REQUIRED:\n%s", version, lines)
				}
				t.Logf("curl %s -v, its lines on the protocol:\n%s", version, lines)
			})
		}
	})
}

// runNode runs Node's script with args, trusting ca, and returns what it
// printed.
func runNode(t *testing.T, node, script, ca string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), "NODE_EXTRA_CA_CERTS="+ca)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	return string(out)
}

// grepLines returns the lines of s that hold any of words.
func grepLines(s string, words ...string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		for _, w := range words {
			if strings.Contains(line, w) {
				b.WriteString(line)
				break
			}
		}
	}
	return b.String()
}

// itoa is strconv.Itoa for small n.
func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// nodeNTLM runs, with Node's own modules, what a browser does with an
// origin that asks for NTLM: through the HTTP proxy PROXY, a CONNECT to
// TARGET, TLS offering h2 and http/1.1 (NODE_EXTRA_CA_CERTS trusted),
// METHOD (GET, or POST with a body) PATH over HTTP/2 with no
// credentials; it prints how that ended.
// Then, as asked by an HTTP_1_1_REQUIRED, a CONNECT again, TLS offering
// http/1.1 alone, and NTLM's handshake over that one connection (TYPE1,
// then TYPE3: base64 messages): it prints both statuses.
const nodeNTLM = `const http = require('http'), http2 = require('http2'), tls = require('tls');
const [proxy, target, method, path, type1, type3] = process.argv.slice(2);
const [ph, pp] = proxy.split(':');
const [host, port] = target.split(':');
function tunnel(alpn) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: ph, port: +pp, method: 'CONNECT', path: target });
    req.on('connect', (res, socket) => {
      if (res.statusCode !== 200) { reject(new Error('CONNECT ' + res.statusCode)); return; }
      const s = tls.connect({ socket, servername: host, ALPNProtocols: alpn }, () => resolve(s));
      s.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}
async function h2get() {
  const s = await tunnel(['h2', 'http/1.1']);
  if (s.alpnProtocol !== 'h2') return 'h2: ALPN ' + s.alpnProtocol;
  const client = http2.connect('https://' + target, { createConnection: () => s });
  return new Promise((resolve) => {
    const req = client.request({ ':method': method, ':path': path });
    req.on('response', (h) => { resolve('h2: status ' + h[':status'] + ' ' + (h['www-authenticate'] || '')); client.close(); });
    req.on('error', (e) => { resolve('h2: error ' + e.code + ' ' + e.message); client.close(); });
    req.end(method === 'POST' ? 'a body' : undefined);
  });
}
function h1get(agent, auth) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host, port: +port, path, agent, headers: { Authorization: auth } }, (res) => {
      let body = '';
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, auth: res.headers['www-authenticate'] || '', body: body.trim() }));
    });
    req.on('error', reject);
    req.end();
  });
}
(async () => {
  console.log(await h2get());
  const s = await tunnel(['http/1.1']);
  // One connection for the handshake: the agent keeps it alive and
  // makes no other.
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  agent.createConnection = () => s;
  const a = await h1get(agent, 'NTLM ' + type1);
  console.log('h1 type-1: ' + a.status + ' ' + a.auth.split(' ')[0]);
  const b = await h1get(agent, 'NTLM ' + type3);
  console.log('h1 type-3: ' + b.status + ' ' + b.body);
  process.exit(0);
})().catch((e) => { console.log('error ' + e.message); process.exit(1); });
setTimeout(() => { console.log('timeout'); process.exit(1); }, 20000);
`

// TestInterceptOriginAsksHTTP11 checks an origin that chooses h2 and then
// resets a request's stream with HTTP_1_1_REQUIRED (IIS, for NTLM and
// Negotiate): an HTTP/1.1 client's request (curl --http1.1 --ntlm) is
// sent again once on a new connection offering http/1.1 alone, and the
// handshake ends 200; an HTTP/1.1 client's POST, which is not sent
// again, is answered 502 saying why (reason http-1.1-required); an
// HTTP/2 client's request that cannot be sent again (Node's POST) has
// its stream reset with HTTP_1_1_REQUIRED in turn. Either way the origin is offered http/1.1 alone from then on: it
// resets one stream in all.
func TestInterceptOriginAsksHTTP11(t *testing.T) {
	t.Run("curl http1.1", func(t *testing.T) {
		curl := proxytest.RequireTool(t, "curl", "curl")
		r := startNTLMRig(t, true)
		for i := range 2 {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			out, err := exec.CommandContext(ctx, curl, "-sS", "--http1.1", "--ntlm", "-u", "u:p", "--cacert", r.ca,
				"-x", "http://"+r.proxy, "-w", "\nstatus %{http_code}\n", "https://"+r.origin.Addr+"/curl").CombinedOutput()
			cancel()
			if err != nil || !strings.Contains(string(out), "authenticated on connection") || !strings.Contains(string(out), "status 200") {
				t.Fatalf("curl %d: %v\n%s", i, err, out)
			}
			if n := r.origin.H2Resets(); n != 1 {
				t.Errorf("after curl %d: the origin reset %d HTTP/2 streams, want 1", i, n)
			}
		}
	})
	t.Run("curl http1.1 POST", func(t *testing.T) {
		// A POST is not sent again: 502, and the next one goes over
		// HTTP/1.1 (the origin's 401 relayed).
		curl := proxytest.RequireTool(t, "curl", "curl")
		r := startNTLMRig(t, true)
		for i, want := range []string{"status 502", "status 401"} {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			out, err := exec.CommandContext(ctx, curl, "-sS", "--http1.1", "-d", "a body", "--cacert", r.ca,
				"-x", "http://"+r.proxy, "-w", "\nstatus %{http_code}\n", "https://"+r.origin.Addr+"/post").CombinedOutput()
			cancel()
			if err != nil || !strings.Contains(string(out), want) {
				t.Fatalf("curl POST %d: %v\n%s\nwant %s", i, err, out, want)
			}
			if i == 0 && !strings.Contains(string(out), "asked for HTTP/1.1 (HTTP_1_1_REQUIRED)") {
				t.Errorf("curl POST %d: the 502 does not say why:\n%s", i, out)
			}
		}
		if n := r.origin.H2Resets(); n != 1 {
			t.Errorf("the origin reset %d HTTP/2 streams, want 1", n)
		}
		rec := waitJSONRecord(t, r.access, func(m map[string]any) bool {
			return m["protocol"] == "http" && m["method"] == "POST" && m["status"] == float64(502)
		})
		if rec["reason"] != "http-1.1-required" {
			t.Errorf("access log record of the first POST: %v, want reason http-1.1-required", rec)
		}
	})
	t.Run("node h2 POST", func(t *testing.T) {
		node := proxytest.RequireTool(t, "node", "nodejs")
		r := startNTLMRig(t, true)
		target := r.origin.Addr
		script := filepath.Join(t.TempDir(), "ntlm.js")
		if err := os.WriteFile(script, []byte(nodeNTLM), 0o644); err != nil {
			t.Fatal(err)
		}
		out := runNode(t, node, script, r.ca, r.proxy, target, "POST", "/post",
			proxytest.NTLMMessage(1), proxytest.NTLMMessage(3))
		want := []string{
			"h2: error ERR_HTTP2_STREAM_ERROR Stream closed with error code NGHTTP2_HTTP_1_1_REQUIRED",
			"h1 type-1: 401 NTLM",
			"h1 type-3: 200 authenticated on connection 2",
		}
		if got := strings.Split(strings.TrimSpace(out), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("node said:\n%s\nwant:\n%s", out, strings.Join(want, "\n"))
		}
		if n := r.origin.H2Resets(); n != 1 {
			t.Errorf("the origin reset %d HTTP/2 streams, want 1", n)
		}
		rec := waitJSONRecord(t, r.access, func(m map[string]any) bool {
			return m["protocol"] == "h2" && m["target"] == "https://"+target+"/post"
		})
		if rec["status"] != float64(0) || rec["reason"] != "http-1.1-required" {
			t.Errorf("access log record of the HTTP/2 POST: %v, want status 0, reason http-1.1-required", rec)
		}
	})
}
