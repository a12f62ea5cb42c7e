package accesslog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/rustle-proxy/rustle/internal/leaktest"
)

// TestMain fails the run when a writer goroutine outlives the tests.
func TestMain(m *testing.M) {
	os.Exit(leaktest.Main(m, 5*time.Second, "accesslog.(*Logger).run"))
}

// newTestLogger starts a Logger and closes it at the end of the test.
func newTestLogger(t *testing.T, cfg Config) *Logger {
	t.Helper()
	l, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader on
// different goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// blockingWriter blocks every Write until release is closed, signalling
// entered (without blocking) each time a Write starts.
type blockingWriter struct {
	entered chan struct{}
	release chan struct{}
	out     syncBuffer
}

func newBlockingWriter() *blockingWriter {
	return &blockingWriter{entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	select {
	case w.entered <- struct{}{}:
	default:
	}
	<-w.release
	return w.out.Write(p)
}

// waitEntered waits for the writer goroutine to block in Write.
func (w *blockingWriter) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-w.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer goroutine never called Write")
	}
}

func lines(b []byte) []string {
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

func rec(target string) *Record {
	return &Record{Time: t0, Protocol: ProtoHTTP, Method: "GET", Target: target, Status: 200}
}

// TestBlockedWriter checks that Log does not wait for a blocked writer:
// once the queue is full, records are dropped and counted.
func TestBlockedWriter(t *testing.T) {
	const queue = 8
	w := newBlockingWriter()
	l := newTestLogger(t, Config{Writer: w, QueueSize: queue})
	l.Log(rec("http://first/"))
	w.waitEntered(t) // the writer holds "first" in its batch and is stuck

	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range queue + 5 {
			l.Log(rec(fmt.Sprintf("http://r%d/", i)))
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		close(w.release)
		t.Fatal("Log blocked on a blocked writer")
	}
	if got := l.Dropped(); got != 5 {
		t.Errorf("Dropped() = %d with a full queue of %d after %d more records, want 5", got, queue, queue+5)
	}
	close(w.release)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got := lines(w.out.Bytes())
	if len(got) != 1+queue {
		t.Fatalf("%d lines written, want %d:\n%s", len(got), 1+queue, strings.Join(got, "\n"))
	}
	for i, line := range got[1:] {
		if want := fmt.Sprintf(" http://r%d/ ", i); !strings.Contains(line, want) {
			t.Errorf("line %d = %q, want the record with target %q", i+1, line, want)
		}
	}
}

// TestLogCopies checks that Log copies the strings: the caller may reuse
// the memory behind them at once.
func TestLogCopies(t *testing.T) {
	w := newBlockingWriter()
	l := newTestLogger(t, Config{Writer: w})
	l.Log(rec("http://first/"))
	w.waitEntered(t)

	mem := []byte("http://reused.example/")
	r := rec(unsafe.String(&mem[0], len(mem)))
	r.User = unsafe.String(&mem[7], 6)
	l.Log(r)
	copy(mem, "XXXXXXXXXXXXXXXXXXXXXX")
	*r = Record{}
	close(w.release)
	l.Close()
	got := lines(w.out.Bytes())
	if len(got) != 2 || !strings.Contains(got[1], " reused http GET http://reused.example/ ") {
		t.Errorf("lines = %q, want the second with user \"reused\" and target http://reused.example/", got)
	}
}

func TestTruncation(t *testing.T) {
	var out syncBuffer
	l := newTestLogger(t, Config{Writer: &out})
	long := strings.Repeat("a", MaxTargetBytes+100)
	r := rec("http://x/" + long)
	r.User = strings.Repeat("u", MaxFieldBytes+1)
	r.Rule = strings.Repeat("r", MaxFieldBytes) // at the limit: kept whole
	l.Log(r)
	l.Close()
	f := strings.Fields(string(out.Bytes()))
	if len(f) != 13 {
		t.Fatalf("%d fields: %q", len(f), out.Bytes())
	}
	if want := r.Target[:MaxTargetBytes-3] + "..."; f[6] != want {
		t.Errorf("target has %d bytes ending %q, want %d ending in ...", len(f[6]), f[6][len(f[6])-5:], len(want))
	}
	if want := r.User[:MaxFieldBytes-3] + "..."; f[3] != want {
		t.Errorf("user = %q, want %q", f[3], want)
	}
	if f[12] != r.Rule {
		t.Errorf("rule at the limit was changed to %q", f[12])
	}
}

// TestCloseFlushes checks that Close writes everything queued, is
// idempotent, and that Log afterwards drops and counts.
func TestCloseFlushes(t *testing.T) {
	const n = 1000
	var out syncBuffer
	l, err := New(Config{Writer: &out, QueueSize: n, Format: FormatJSON})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		l.Log(rec(fmt.Sprintf("http://h/%d", i)))
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	got := lines(out.Bytes())
	if len(got) != n || l.Dropped() != 0 {
		t.Fatalf("%d lines written and %d dropped, want %d and 0", len(got), l.Dropped(), n)
	}
	for i, line := range got {
		if want := fmt.Sprintf(`"target":"http://h/%d"`, i); !strings.Contains(line, want) {
			t.Fatalf("line %d = %s, want %s (in order)", i, line, want)
		}
	}
	l.Log(rec("http://late/"))
	if l.Dropped() != 1 {
		t.Errorf("Dropped() = %d after a Log after Close, want 1", l.Dropped())
	}
	if len(lines(out.Bytes())) != n {
		t.Errorf("a Log after Close was written")
	}
}

// TestReopen follows logrotate: rename the file, Reopen, and the next
// lines go to a new file at the path, the earlier ones to the renamed
// file.
func TestReopen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	l := newTestLogger(t, Config{Path: path})
	l.Log(rec("http://before/"))
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := l.Reopen(); err != nil {
		t.Fatalf("Reopen: %v", err)
	}
	l.Log(rec("http://after/"))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Reopen(); !errors.Is(err, ErrClosed) {
		t.Errorf("Reopen after Close = %v, want ErrClosed", err)
	}
	for file, want := range map[string]string{path + ".1": "http://before/", path: "http://after/"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if got := lines(b); len(got) != 1 || !strings.Contains(got[0], want) {
			t.Errorf("%s holds %q, want one line with %s", filepath.Base(file), got, want)
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := st.Mode().Perm(); perm&0o007 != 0 {
		t.Errorf("new file mode %v is readable by others", perm)
	}
}

// TestReopenFails checks that a failed Reopen keeps the old file.
func TestReopenFails(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "logs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "access.log")
	l := newTestLogger(t, Config{Path: path})
	moved := filepath.Join(t.TempDir(), "moved.log")
	if err := os.Rename(path, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := l.Reopen(); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("Reopen with the directory gone = %v, want an error naming %s", err, path)
	}
	l.Log(rec("http://still/"))
	l.Close()
	b, err := os.ReadFile(moved)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "http://still/") {
		t.Errorf("after a failed Reopen the old file holds %q, want the new line", b)
	}
}

type failingWriter struct{}

func (failingWriter) Write(p []byte) (int, error) { return 0, errors.New("disk full") }

// TestWriteErrors checks that lines lost to write errors are counted and
// the failure is logged once.
func TestWriteErrors(t *testing.T) {
	var logs syncBuffer
	l := newTestLogger(t, Config{Writer: failingWriter{}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for range 3 {
		l.Log(rec("http://x/"))
	}
	l.Close()
	if got := l.Dropped(); got != 3 {
		t.Errorf("Dropped() = %d after 3 failed lines, want 3", got)
	}
	if n := strings.Count(string(logs.Bytes()), "write failed"); n != 1 {
		t.Errorf("write failure logged %d times, want 1:\n%s", n, logs.Bytes())
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(Config{Format: "xml"}); err == nil || !strings.Contains(err.Error(), `"xml"`) {
		t.Errorf("New with format xml = %v, want an error naming it", err)
	}
	bad := filepath.Join(t.TempDir(), "missing", "access.log")
	if _, err := New(Config{Path: bad}); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), bad) {
		t.Errorf("New with path %s = %v, want ErrNotExist naming it", bad, err)
	}
}

func TestNilLogger(t *testing.T) {
	var l *Logger
	l.Log(rec("http://x/")) // the access log is off: nothing happens
}

func TestReopenWithoutPath(t *testing.T) {
	l := newTestLogger(t, Config{Writer: io.Discard})
	if err := l.Reopen(); err != nil {
		t.Errorf("Reopen of a log without a path = %v, want nil", err)
	}
}

func BenchmarkLog(b *testing.B) {
	l, err := New(Config{Writer: io.Discard, QueueSize: 1 << 16})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	r := &Record{
		Time: time.Now(), Listener: "main", Client: netip.MustParseAddrPort("192.0.2.10:51234"),
		User: "alice", Protocol: ProtoHTTP, Method: "GET", Target: "http://example.com/index.html",
		Status: 200, BytesDown: 5120, Duration: time.Millisecond,
		Upstream: netip.MustParseAddrPort("93.184.216.34:80"),
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Log(r)
		}
	})
	b.ReportMetric(float64(l.Dropped())/float64(b.N), "drops/op")
}

func BenchmarkFormat(b *testing.B) {
	r := goldenRecords()[0]
	tmpl, err := parseTemplate("{combined} {upstream} {source}")
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range []Format{FormatText, FormatJSON, FormatSquid, FormatCommon, FormatCombined, FormatTemplate} {
		b.Run(string(f), func(b *testing.B) {
			l := &Logger{format: f, tmpl: tmpl}
			buf := make([]byte, 0, 1024)
			b.ReportAllocs()
			for b.Loop() {
				buf = l.appendRecord(buf[:0], &r)
			}
			b.SetBytes(int64(len(buf)))
		})
	}
}

// TestTap checks that SetTap's function sees each written record with
// its line exactly as written, in every format, and nothing once it is
// removed.
func TestTap(t *testing.T) {
	for _, format := range []Format{FormatText, FormatJSON, FormatSquid, FormatCommon} {
		t.Run(string(format), func(t *testing.T) {
			var out syncBuffer
			l := newTestLogger(t, Config{Format: format, Writer: &out})
			var mu sync.Mutex
			var users []string
			var lines bytes.Buffer
			l.SetTap(func(r *Record, line []byte) {
				mu.Lock()
				defer mu.Unlock()
				users = append(users, strings.Clone(r.User))
				lines.Write(line)
			})
			l.Log(&Record{User: "alice", Method: "GET", Target: "http://a.example/", Status: 200})
			l.Log(&Record{User: "bob", Method: "CONNECT", Target: "b.example:443", Status: 429, Reason: ReasonQuota})
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if strings.Join(users, ",") != "alice,bob" {
				t.Errorf("the tap saw users %q, want alice,bob", users)
			}
			if got, want := lines.String(), string(out.Bytes()); got != want || strings.Count(got, "\n") != 2 {
				t.Errorf("the tap saw lines %q, the log has %q", got, want)
			}
		})
	}
	t.Run("removed", func(t *testing.T) {
		l := newTestLogger(t, Config{Writer: io.Discard})
		n := 0
		l.SetTap(func(*Record, []byte) { n++ })
		l.SetTap(nil)
		l.Log(&Record{User: "alice"})
		l.Close()
		if n != 0 {
			t.Errorf("a removed tap was called %d times", n)
		}
		var nl *Logger
		nl.SetTap(func(*Record, []byte) {}) // no-op on a nil Logger
	})
}

// TestWouldDenyClipped checks that a would_deny longer than
// MaxFieldBytes is clipped as the rule is, and written as the text
// line's 18th field.
func TestWouldDenyClipped(t *testing.T) {
	var out syncBuffer
	l := newTestLogger(t, Config{Writer: &out})
	r := rec("http://x/")
	r.WouldDeny = strings.Repeat("w", MaxFieldBytes+1)
	l.Log(r)
	l.Close()
	f := strings.Fields(string(out.Bytes()))
	if len(f) != 18 {
		t.Fatalf("%d fields: %q", len(f), out.Bytes())
	}
	if want := r.WouldDeny[:MaxFieldBytes-3] + "..."; f[17] != want {
		t.Errorf("would_deny = %q, want %q", f[17], want)
	}
}
