package admin

import (
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
)

// TestTail feeds a tail from a real access logger and checks that it
// keeps the last records with their lines, counts reasons (unknown ones
// as other), cuts long lines and targets, and filters by user, host,
// status and reason.
func TestTail(t *testing.T) {
	tl := newTail(5)
	l, err := accesslog.New(accesslog.Config{Writer: io.Discard, Format: accesslog.FormatJSON})
	if err != nil {
		t.Fatal(err)
	}
	l.SetTap(tl.record)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	recs := []accesslog.Record{
		{User: "old", Method: "GET", Target: "http://old.example/", Status: 200},
		{User: "alice", Method: "GET", Target: "http://Www.Example.com:8080/a", Status: 200, BytesDown: 10},
		{User: "bob", Method: "CONNECT", Target: "[2001:db8::1]:443", Status: 200, Reason: accesslog.ReasonRevoked},
		{User: "carol", Method: "GET", Target: "http://u:p@quota.example/", Status: 429, Reason: accesslog.ReasonQuota},
		{User: "mallory", Method: "GET", Target: "http://x.example/", Status: 407, Reason: accesslog.ReasonAuthFailed},
		{User: "alice", Method: "GET", Target: "http://x.example/" + strings.Repeat("a", 2000), Status: 502, Reason: "made-up"},
	}
	for i := range recs {
		recs[i].Time = at.Add(time.Duration(i) * time.Second)
		recs[i].Client = netip.MustParseAddrPort("192.0.2.7:5555")
		l.Log(&recs[i])
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	all := tl.latest(LogFilter{}, 100)
	var users []string
	for _, r := range all {
		users = append(users, r.User)
	}
	if got := strings.Join(users, ","); got != "alice,mallory,carol,bob,alice" {
		t.Errorf("kept %s, want the last 5, newest first", got)
	}
	long := all[0]
	if len(long.Target) != tailTargetBytes || len(long.Line) != tailLineBytes+3 || !strings.HasSuffix(long.Line, "...") ||
		!strings.HasPrefix(long.Line, `{"time":"2026-01-02T03:04:10`) {
		t.Errorf("a long record: target %d bytes, line %d bytes %q...", len(long.Target), len(long.Line), long.Line[:40])
	}
	if r := all[3]; r.Client != "192.0.2.7:5555" || r.Protocol != "-" || r.Reason != "revoked" || r.Time != recs[2].Time ||
		!strings.Contains(r.Line, `"user":"bob"`) || strings.HasSuffix(r.Line, "\n") {
		t.Errorf("bob's record %+v", r)
	}
	wantReasons := map[string]uint64{"revoked": 1, "quota": 1, "auth-failed": 1, "other": 1}
	if got := tl.reasonCounts(); fmt.Sprint(got) != fmt.Sprint(wantReasons) {
		t.Errorf("reasons %v, want %v", got, wantReasons)
	}

	for _, tc := range []struct {
		f    LogFilter
		want string
	}{
		{LogFilter{User: "alice"}, "alice,alice"},
		{LogFilter{User: "Alice"}, ""},
		{LogFilter{Host: "example.COM"}, "alice"},
		{LogFilter{Host: "2001:db8"}, "bob"},
		{LogFilter{Host: "u"}, "carol"}, // the host of u:p@quota.example
		{LogFilter{Host: "p@"}, ""},
		{LogFilter{Status: "4xx"}, "mallory,carol"},
		{LogFilter{Status: "5XX"}, "alice"},
		{LogFilter{Status: "429"}, "carol"},
		{LogFilter{Reason: "quota"}, "carol"},
		{LogFilter{Reason: "-"}, "alice"},
		{LogFilter{User: "alice", Status: "2xx"}, "alice"},
	} {
		var got []string
		for _, r := range tl.latest(tc.f, 100) {
			got = append(got, r.User)
		}
		if strings.Join(got, ",") != tc.want {
			t.Errorf("filter %+v: %v, want %s", tc.f, got, tc.want)
		}
	}
	if got := tl.latest(LogFilter{}, 2); len(got) != 2 || got[0].User != "alice" {
		t.Errorf("limit 2: %+v", got)
	}
}

// TestTailNoAllocs checks that keeping a record, once the slots'
// buffers have grown, allocates nothing on the access log's writer.
func TestTailNoAllocs(t *testing.T) {
	tl := newTail(4)
	r := &accesslog.Record{User: "alice", Method: "GET", Target: "http://example.com/", Status: 200, Reason: accesslog.ReasonQuota}
	line := []byte("a line as written\n")
	for range 8 {
		tl.record(r, line)
	}
	if n := testing.AllocsPerRun(100, func() { tl.record(r, line) }); n != 0 {
		t.Errorf("record allocates %v times", n)
	}
}
