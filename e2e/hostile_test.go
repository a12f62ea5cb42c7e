//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The hostile-input suite: request smuggling and malformed shapes, a
// slowloris crowd, and a process out of file descriptors. Each test
// records one summary line; `make test` prints them (see hostileSummary).

// hostileSummary records a summary line of the suite: t.Log, and appended
// to the file named by $RUSTLE_HOSTILE_SUMMARY when set, which `make
// test` prints after the run (go test shows no output of passing tests).
func hostileSummary(t testing.TB, format string, args ...any) {
	t.Helper()
	line := "hostile: " + fmt.Sprintf(format, args...)
	t.Log(line)
	path := os.Getenv("RUSTLE_HOSTILE_SUMMARY")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Logf("write summary: %v", err)
		return
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}

// countingOrigin is a TCP origin that counts the connections and bytes it
// receives and answers every read with a small 200 response.
type countingOrigin struct {
	ln    net.Listener
	conns atomic.Int64
	bytes atomic.Int64
	wg    sync.WaitGroup

	mu   sync.Mutex
	open map[net.Conn]struct{} // guarded by mu
}

func newCountingOrigin(t testing.TB) *countingOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &countingOrigin{ln: ln, open: make(map[net.Conn]struct{})}
	o.wg.Go(o.acceptLoop)
	t.Cleanup(func() {
		ln.Close()
		o.mu.Lock()
		for c := range o.open {
			c.Close()
		}
		o.mu.Unlock()
		o.wg.Wait()
	})
	return o
}

func (o *countingOrigin) acceptLoop() {
	for {
		c, err := o.ln.Accept()
		if err != nil {
			return
		}
		o.conns.Add(1)
		o.mu.Lock()
		o.open[c] = struct{}{}
		o.mu.Unlock()
		o.wg.Go(func() { o.serve(c) })
	}
}

func (o *countingOrigin) serve(c net.Conn) {
	defer func() {
		c.Close()
		o.mu.Lock()
		delete(o.open, c)
		o.mu.Unlock()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		o.bytes.Add(int64(n))
		if err != nil {
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
			return
		}
	}
}

func (o *countingOrigin) addr() string { return o.ln.Addr().String() }

// hostileShape is one malformed or ambiguous request, the status rustle
// must answer it with and the reason its access log record gives.
type hostileShape struct {
	name   string
	req    string
	status int
	reason string
}

// hostileShapes returns the corpus for an origin at addr.
func hostileShapes(addr string) []hostileShape {
	u := "http://" + addr + "/"
	h := "Host: " + addr + "\r\n"
	post := "POST " + u + " HTTP/1.1\r\n" + h
	get := "GET " + u + " HTTP/1.1\r\n" + h
	return []hostileShape{
		// CL.TE and TE.CL: both framings at once, in either order.
		{"CL.TE", post + "Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nX", 400, "smuggling"},
		{"TE.CL", post + "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n8\r\nSMUGGLED\r\n0\r\n\r\n", 400, "smuggling"},
		{"CL.TE odd casing", post + "content-length: 4\r\ntRaNsFeR-eNcOdInG: ChUnKeD\r\n\r\n0\r\n\r\n", 400, "smuggling"},
		{"TE.TE second header", post + "Transfer-Encoding: chunked\r\nTransfer-encoding: identity\r\n\r\n0\r\n\r\n", 400, "smuggling"},
		{"TE.TE same value twice", post + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, "smuggling"},
		{"TE obs-fold", post + "Transfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n", 400, "smuggling"},
		{"TE obs-fold continuation", post + "X-A: a\r\nTransfer-Encoding: identity\r\n\tchunked\r\n\r\n0\r\n\r\n", 400, "smuggling"},
		{"TE space before colon", post + "Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n", 400, "smuggling"},
		{"TE xchunked", post + "Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n", 400, "smuggling"},
		{"TE chunked, identity", post + "Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", 400, "smuggling"},
		{"TE second encoding before chunked", post + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501, "bad-request"},
		{"TE vertical tab", post + "Transfer-Encoding: \x0bchunked\r\n\r\n0\r\n\r\n", 400, "bad-request"},
		{"TE in HTTP/1.0", "POST " + u + " HTTP/1.0\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, "smuggling"},
		// Content-Length.
		{"duplicate CL, different", post + "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400, "smuggling"},
		{"CL list", post + "Content-Length: 5, 6\r\n\r\nhello!", 400, "smuggling"},
		{"signed CL +", post + "Content-Length: +5\r\n\r\nhello", 400, "smuggling"},
		{"signed CL -", post + "Content-Length: -1\r\n\r\n", 400, "smuggling"},
		{"hex CL", post + "Content-Length: 0x5\r\n\r\nhello", 400, "smuggling"},
		{"huge CL", post + "Content-Length: 99999999999999999999999\r\n\r\n", 400, "smuggling"},
		{"CL with space inside", post + "Content-Length: 1 0\r\n\r\n", 400, "smuggling"},
		{"empty CL", post + "Content-Length: \r\n\r\n", 400, "smuggling"},
		// Chunked bodies.
		{"chunk size overflow", post + "Transfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n", 400, "bad-request"},
		{"chunk size 2^64", post + "Transfer-Encoding: chunked\r\n\r\n10000000000000000\r\nx\r\n0\r\n\r\n", 400, "bad-request"},
		{"chunk size junk", post + "Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n", 400, "bad-request"},
		{"chunk size 0x", post + "Transfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n", 400, "bad-request"},
		{"chunk size negative", post + "Transfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n", 400, "bad-request"},
		{"chunk data without CRLF", post + "Transfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n", 400, "bad-request"},
		{"chunk extension 64 KiB", post + "Transfer-Encoding: chunked\r\n\r\n5;" + strings.Repeat("e", 64<<10) + "\r\nhello\r\n0\r\n\r\n", 400, "bad-request"},
		{"chunk extension bare LF", post + "Transfer-Encoding: chunked\r\n\r\n5;ext\nhello\r\n0\r\n\r\n", 400, "bad-request"},
		{"chunk extension bare CR", post + "Transfer-Encoding: chunked\r\n\r\n5;e\rx\r\nhello\r\n0\r\n\r\n", 400, "bad-request"},
		{"chunk line bare LF", post + "Transfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n", 400, "bad-request"},
		{"trailer obs-fold", post + "Transfer-Encoding: chunked\r\n\r\n0\r\nX-T: a\r\n b\r\n\r\n", 400, "bad-request"},
		// Line and field syntax.
		{"bare LF in header", get + "X-A: 1\nX-B: 2\r\n\r\n", 400, "bad-request"},
		{"bare CR in header", get + "X-A: 1\rX-B: 2\r\n\r\n", 400, "bad-request"},
		{"bare LF request line", "GET " + u + " HTTP/1.1\n" + h + "\r\n", 400, "bad-request"},
		{"NUL in value", get + "X-A: a\x00b\r\n\r\n", 400, "bad-request"},
		{"NUL in name", get + "X-\x00A: b\r\n\r\n", 400, "bad-request"},
		{"NUL in request line", "GET " + u + "\x00 HTTP/1.1\r\n" + h + "\r\n", 400, "bad-request"},
		{"header without colon", get + "X-A b\r\n\r\n", 400, "bad-request"},
		{"empty header name", get + ": b\r\n\r\n", 400, "bad-request"},
		{"space in header name", get + "X A: b\r\n\r\n", 400, "bad-request"},
		{"obs-fold", get + "X-A: 1\r\n  folded\r\n\r\n", 400, "smuggling"},
		{"duplicate Host", get + h + "\r\n", 400, "bad-request"},
		{"double space in request line", "GET  " + u + " HTTP/1.1\r\n" + h + "\r\n", 400, "bad-request"},
		{"lower-case version", "GET " + u + " http/1.1\r\n" + h + "\r\n", 400, "bad-request"},
		{"HTTP/0.9", "GET /\r\n\r\n", 400, "bad-request"},
		{"unsupported version", "GET " + u + " HTTP/2.0\r\n" + h + "\r\n", 505, "bad-request"},
		{"bad method token", "GE(T " + u + " HTTP/1.1\r\n" + h + "\r\n", 400, "bad-request"},
		// Size limits (max_header_bytes 65536 by default).
		{"over-long request line", "GET " + u + strings.Repeat("a", 70<<10) + " HTTP/1.1\r\n" + h + "\r\n", 431, "head-too-large"},
		{"over-long header", get + "X-A: " + strings.Repeat("a", 70<<10) + "\r\n\r\n", 431, "head-too-large"},
		{"too many headers", get + strings.Repeat("X-A: b\r\n", 2000) + "\r\n", 431, "head-too-large"},
		// Targets.
		{"CONNECT without port", "CONNECT " + strings.Split(addr, ":")[0] + " HTTP/1.1\r\n" + h + "\r\n", 400, "bad-request"},
		{"CONNECT port 0", "CONNECT 127.0.0.1:0 HTTP/1.1\r\n" + h + "\r\n", 400, "bad-request"},
		{"CONNECT port too big", "CONNECT 127.0.0.1:99999 HTTP/1.1\r\n" + h + "\r\n", 400, "bad-request"},
		{"CONNECT with scheme", "CONNECT http://" + addr + " HTTP/1.1\r\n" + h + "\r\n", 400, "bad-request"},
		{"CONNECT with userinfo", "CONNECT user@" + addr + " HTTP/1.1\r\n" + h + "\r\n", 400, "bad-request"},
		{"CONNECT with path", "CONNECT " + addr + "/x HTTP/1.1\r\n" + h + "\r\n", 400, "bad-request"},
		{"CONNECT unclosed bracket", "CONNECT [::1:443 HTTP/1.1\r\n" + h + "\r\n", 400, "bad-request"},
		{"CONNECT empty host", "CONNECT :443 HTTP/1.1\r\n" + h + "\r\n", 400, "bad-request"},
		{"absolute-form with userinfo", "GET http://user:pass@" + addr + "/ HTTP/1.1\r\n" + h + "\r\n", 400, "bad-request"},
		{"absolute-form with user only", "GET http://user@" + addr + "/ HTTP/1.1\r\n" + h + "\r\n", 400, "bad-request"},
		{"absolute-form with an @ in the password", "GET http://a:b@c@" + addr + "/ HTTP/1.1\r\n" + h + "\r\n", 400, "bad-request"},
		{"origin-form", "GET / HTTP/1.1\r\n" + h + "\r\n", 400, "bad-request"},
		{"asterisk-form", "OPTIONS * HTTP/1.1\r\n" + h + "\r\n", 400, "bad-request"},
		{"fragment", "GET " + u + "#f HTTP/1.1\r\n" + h + "\r\n", 400, "bad-request"},
		{"https scheme", "GET https://" + addr + "/ HTTP/1.1\r\n" + h + "\r\n", 400, "bad-request"},
	}
}

// TestHostileShapes sends every shape of the corpus on its own connection
// and checks its status, that the connection is then closed, that the
// origin sees nothing of any of them, and that each has its access log
// record with the status and its reason, and no body byte.
func TestHostileShapes(t *testing.T) {
	o := newCountingOrigin(t)
	accessLog := filepath.Join(t.TempDir(), "access.log")
	p := startProxy(t, "127.0.0.1:0", fmt.Sprintf("[access_log]\nenabled = true\nformat = \"json\"\npath = %q\n", accessLog))
	shapes := hostileShapes(o.addr())
	refused := 0
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			status, closed, err := sendShape(p.addr(), sh.req)
			if err != nil {
				t.Fatalf("%v", err)
			}
			if status != sh.status {
				t.Errorf("status %d, want %d", status, sh.status)
			}
			if !closed {
				t.Errorf("the connection stays open after a %d", status)
			}
			if status >= 400 && closed {
				refused++
			}
		})
	}
	seen := o.bytes.Load()
	if n := o.conns.Load(); n != 0 || seen != 0 {
		t.Errorf("the origin got %d connections and %d bytes from the hostile shapes, want none", n, seen)
	}
	// The origin is reachable: a well-formed request does get there.
	resp, body := rawExchange(t, p.addr(), "GET", "GET http://"+o.addr()+"/ HTTP/1.1\r\nHost: "+o.addr()+"\r\n\r\n")
	if resp.StatusCode != 200 || body != "ok" || o.conns.Load() != 1 {
		t.Errorf("a well-formed request: %s %q, origin connections %d", resp.Status, body, o.conns.Load())
	}
	// One record per shape, in order (each was answered and closed before
	// the next was sent), then the well-formed request's.
	recs := waitAccessRecords(t, accessLog, len(shapes)+1)
	if len(recs) != len(shapes)+1 {
		t.Fatalf("%d access log records, want %d (one per shape and the well-formed request)", len(recs), len(shapes)+1)
	}
	logged := 0
	for i, sh := range shapes {
		if recs[i].Status != sh.status || recs[i].Reason != sh.reason {
			t.Errorf("%s: record status %d, reason %q; want %d, %q", sh.name, recs[i].Status, recs[i].Reason, sh.status, sh.reason)
		} else {
			logged++
		}
	}
	if last := recs[len(shapes)]; last.Status != 200 || last.Reason != "" {
		t.Errorf("the well-formed request's record: %+v", last)
	}
	if b, _ := os.ReadFile(accessLog); bytes.Contains(b, []byte("SMUGGLED")) || bytes.Contains(b, []byte("hello")) {
		t.Errorf("a body byte in the access log:\n%s", b)
	}
	hostileSummary(t, "%d request shapes tried, %d refused with the expected status and the connection closed, %d logged with their reason; the origin saw %d bytes of them",
		len(shapes), refused, logged, seen)
}

// hostileRecord is what TestHostileShapes checks of an access log record.
type hostileRecord struct {
	Status int
	Reason string
}

// waitAccessRecords waits, at most 10s, until the JSON access log at path
// holds n records, and returns the records it holds then.
func waitAccessRecords(t *testing.T, path string, n int) []hostileRecord {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var recs []hostileRecord
		b, _ := os.ReadFile(path)
		for line := range strings.Lines(string(b)) {
			var r hostileRecord
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("access log line %q: %v", line, err)
			}
			recs = append(recs, r)
		}
		if len(recs) >= n || time.Now().After(deadline) {
			return recs
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sendShape writes req on a new connection to addr and returns the
// answer's status and whether the proxy then closed the connection.
func sendShape(addr, req string) (status int, closed bool, err error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, false, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	// The proxy may answer and close before reading all of a long
	// request: a failed write is not the test's failure.
	go io.WriteString(c, req)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, false, fmt.Errorf("read the answer: %w", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, rerr := br.ReadByte()
	var ne net.Error
	closed = rerr != nil && !(errors.As(rerr, &ne) && ne.Timeout())
	return resp.StatusCode, closed, nil
}

// slowlorisConns is the size of the slowloris crowd: the test process and
// the proxy each hold one descriptor per connection, well within the
// 20,000 a process may have here.
const slowlorisConns = 1000

// TestSlowloris holds 1,000 connections that trickle a request head a
// header line at a time, checks that a normal client still gets answers
// meanwhile, and that the read-header timeout then closes every one.
func TestSlowloris(t *testing.T) {
	o := newOrigin(t, "127.0.0.1", false)
	const readHeader = 3 * time.Second
	cfg := strings.Replace(proxyConfig("127.0.0.1:0", "5s", ""), "[timeouts]\n", "[timeouts]\nread_header = \"3s\"\n", 1)
	p := startRustle(t, "-c", writeFile(t, "rustle.toml", cfg))
	p.waitStarted(t)
	baseFDs := procFDs(t, p.pid())

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conns := make([]net.Conn, slowlorisConns)
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	start := time.Now()
	err := forEachBounded(ctx, slowlorisConns, 64, func(i int) error {
		c, err := net.DialTimeout("tcp", p.addr(), 5*time.Second)
		if err != nil {
			return fmt.Errorf("slowloris connection %d: %w", i, err)
		}
		conns[i] = c
		c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, err = fmt.Fprintf(c, "GET %s/hello HTTP/1.1\r\nHost: x\r\n", o.URL)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Trickle one more header line on every connection, twice, while a
	// normal client makes requests.
	var trickleErr atomic.Value
	var wg sync.WaitGroup
	wg.Go(func() {
		for round := range 2 {
			time.Sleep(500 * time.Millisecond)
			for i, c := range conns {
				c.SetWriteDeadline(time.Now().Add(time.Second))
				if _, err := fmt.Fprintf(c, "X-Slow-%d: %d\r\n", round, i); err != nil {
					trickleErr.Store(fmt.Errorf("trickle on connection %d: %w", i, err))
					return
				}
			}
		}
	})
	waitFDs(t, p.pid(), func(n int) bool { return n >= baseFDs+slowlorisConns }, 5*time.Second)
	held := procFDs(t, p.pid()) - baseFDs
	answered := 0
	client := newProxyClient(t, proxyURL(p.addr(), "", ""), nil)
	for i := range 20 {
		resp, body := client.fetch(t, "GET", o.URL+"/hello", nil)
		if resp.StatusCode != 200 || body != "hello from origin\n" {
			t.Errorf("normal request %d among the slowloris crowd: %s %q", i, resp.Status, body)
			continue
		}
		answered++
	}
	wg.Wait()
	if err, _ := trickleErr.Load().(error); err != nil && time.Since(start) < readHeader {
		t.Errorf("%v", err)
	}
	if held < slowlorisConns {
		t.Errorf("the proxy holds %d more descriptors with the crowd connected, want at least %d", held, slowlorisConns)
	}

	// The read-header timeout, counted from each head's first byte, ends
	// every slow head: a 408 or a plain close.
	var closed atomic.Int64
	err = forEachBounded(ctx, slowlorisConns, 200, func(i int) error {
		c := conns[i]
		c.SetReadDeadline(time.Now().Add(readHeader + 10*time.Second))
		b, err := io.ReadAll(c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("slowloris connection %d still open %v after its first byte", i, time.Since(start))
		}
		if len(b) > 0 && !strings.HasPrefix(string(b), "HTTP/1.1 408 ") {
			return fmt.Errorf("slowloris connection %d got %q", i, firstLine(string(b)))
		}
		closed.Add(1)
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	hostileSummary(t, "slowloris: %d connections held (%d proxy descriptors), %d/20 normal requests answered meanwhile, %d closed by the %v read-header timeout",
		slowlorisConns, held, answered, closed.Load(), readHeader)
}

// TestEMFILE lowers the open-file limit of a running rustle to a few
// descriptors over what it uses (prlimit(2) on its pid, soft and hard, so
// that the Go runtime cannot raise it again), provokes EMFILE on accept,
// and checks that the accept loop backs off instead of spinning (the
// process's CPU time stays low), that an established tunnel keeps
// working, and that new connections are served again once descriptors
// are free.
func TestEMFILE(t *testing.T) {
	o := newOrigin(t, "127.0.0.1", false)
	echo := newEchoServer(t)
	p := startProxy(t, "127.0.0.1:0", "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	tun, err := openTunnel(ctx, p.addr(), echo.addr(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer tun.Close()
	if err := echoOnce(tun, []byte("before the limit")); err != nil {
		t.Fatal(err)
	}

	// Leave room for two more descriptors, then crowd the listener.
	used := procFDs(t, p.pid())
	limit := uint64(used + 2)
	var old unix.Rlimit
	if err := unix.Prlimit(p.pid(), unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: limit, Max: limit}, &old); err != nil {
		t.Skipf("prlimit(%d, RLIMIT_NOFILE): %v", p.pid(), err)
	}
	const crowd = 50
	var extra []net.Conn
	defer func() {
		for _, c := range extra {
			c.Close()
		}
	}()
	for range crowd {
		c, err := net.DialTimeout("tcp", p.addr(), 5*time.Second)
		if err != nil {
			t.Fatalf("connect to the listener's backlog: %v", err)
		}
		extra = append(extra, c)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.log.String(), "too many open files") {
		if time.Now().After(deadline) {
			t.Fatalf("no EMFILE from accept with RLIMIT_NOFILE %d (%d in use):\n%s", limit, used, p.log)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// At its limit, the process idles: the accept loop sleeps between
	// tries rather than spinning on a listener that stays readable.
	const window = 2 * time.Second
	cpu0 := procCPU(t, p.pid())
	time.Sleep(window)
	cpu := procCPU(t, p.pid()) - cpu0
	if cpu > window/5 {
		t.Errorf("rustle used %v of CPU in %v at its file limit: the accept loop spins", cpu, window)
	}
	if err := echoOnce(tun, []byte("at the limit")); err != nil {
		t.Errorf("the established tunnel at the file limit: %v", err)
	}
	backoffs := strings.Count(p.log.String(), "accept failed; backing off")

	// Free the descriptors: the crowd leaves, and new clients are served.
	for _, c := range extra {
		c.Close()
	}
	extra = nil
	deadline = time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", p.addr(), 5*time.Second)
		if err == nil {
			c.SetDeadline(time.Now().Add(3 * time.Second))
			fmt.Fprintf(c, "GET %s/hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", o.URL)
			b, _ := io.ReadAll(c)
			c.Close()
			if strings.HasPrefix(string(b), "HTTP/1.1 200 ") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("rustle serves no new connection 15s after descriptors were freed:\n%s", p.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := echoOnce(tun, []byte("after the limit")); err != nil {
		t.Errorf("the established tunnel after the file limit: %v", err)
	}
	hostileSummary(t, "EMFILE: RLIMIT_NOFILE %d with %d in use, %d connections crowding accept: %d back-off warnings, %v CPU in %v, tunnel kept working, new connections served after the crowd left",
		limit, used, crowd, backoffs, cpu.Round(time.Millisecond), window)
}

// procCPU returns the user and system CPU time pid has used.
func procCPU(t testing.TB, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Skipf("cannot read CPU time: %v", err)
	}
	// Fields after the command name (which may hold spaces) start at ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ is 100 on Linux
}
