package proxytest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
)

// LogBuffer is a log's destination that a test reads while the log's
// goroutines write it (an access log's writer, a slog handler). Safe for
// concurrent use; the zero LogBuffer is empty and ready.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer // guarded by mu
}

// Write appends p.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Len returns how many bytes were written so far: a mark to take before
// the connection whose records a test then looks for (see
// WaitJSONRecordSince).
func (l *LogBuffer) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}

// LinesFrom returns a copy of the complete lines written from offset off
// on, and the offset past them: a reader that polls a growing log copies
// what is new, not the whole log.
func (l *LogBuffer) LinesFrom(off int) (string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.b.Bytes()[off:]
	end := bytes.LastIndexByte(b, '\n') + 1
	return string(b[:end]), off + end
}

// JSONAccessLog returns an access log that writes JSON lines to w (a
// LogBuffer, most often), closed by t.Cleanup.
func JSONAccessLog(t testing.TB, w io.Writer) *accesslog.Logger {
	t.Helper()
	al, err := accesslog.New(accesslog.Config{Format: accesslog.FormatJSON, Writer: w})
	if err != nil {
		t.Fatalf("proxytest: access log: %v", err)
	}
	t.Cleanup(func() { al.Close() })
	return al
}

// WaitJSONRecord waits (WaitFor) for the JSON lines in log to hold a
// record match accepts, and returns it.
func WaitJSONRecord(t testing.TB, log *LogBuffer, match func(map[string]any) bool) map[string]any {
	t.Helper()
	return WaitJSONRecordSince(t, log, 0, match)
}

// WaitJSONRecordSince is WaitJSONRecord among the records written past
// the log's first since bytes (a mark, log.Len(), taken before the
// connection the record is of): a record matched by a client's address
// and port may otherwise be that of an earlier connection, whose port
// loopback reuses once it has closed.
func WaitJSONRecordSince(t testing.TB, log *LogBuffer, since int, match func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(DefaultTimeout)
	for {
		sc := bufio.NewScanner(strings.NewReader(log.String()[since:]))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var r map[string]any
			if json.Unmarshal(sc.Bytes(), &r) == nil && match(r) {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("proxytest: timed out waiting for an access log record that matches in:\n%s", log.String()[since:])
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// JSONRecords waits (WaitFor) for log to hold at least n lines, and
// returns every line written so far, each a JSON record parsed into a T
// (a map[string]any, or a struct of the fields a test reads); a line
// that does not parse fails the test.
func JSONRecords[T any](t testing.TB, log *LogBuffer, n int) []T {
	t.Helper()
	WaitFor(t, fmt.Sprintf("%d access log records", n), func() bool {
		return strings.Count(log.String(), "\n") >= n
	})
	var recs []T
	for line := range strings.Lines(log.String()) {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var r T
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("proxytest: access log line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}
