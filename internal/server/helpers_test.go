package server

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// startLogged starts a Server on cfg with its access log written to
// access as JSON lines and its own log to logger (nil = discard), and
// returns it with the bound address of each listener by name. t.Cleanup
// closes both.
func startLogged(t *testing.T, cfg *config.Config, logger *slog.Logger, access *logBuffer, opts ...Option) (*Server, map[string]string) {
	t.Helper()
	return startLoggedAs(t, cfg, logger, access, accesslog.FormatJSON, opts...)
}

// startLoggedAs is startLogged with the access log in format.
func startLoggedAs(t *testing.T, cfg *config.Config, logger *slog.Logger, access *logBuffer, format accesslog.Format, opts ...Option) (*Server, map[string]string) {
	t.Helper()
	al, err := accesslog.New(accesslog.Config{Format: format, Writer: access})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, logger, append(opts, WithAccessLog(al))...)
	if err != nil {
		al.Close()
		t.Fatalf("New: %v", err)
	}
	if err := s.Start(); err != nil {
		s.Close()
		al.Close()
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		s.Close()
		al.Close()
		if n := al.Dropped(); n > 0 {
			t.Logf("the access log dropped %d records (its queue was full)", n)
		}
	})
	addrs := make(map[string]string)
	for _, a := range s.Addrs() {
		addrs[a.Name] = a.Addr.String()
	}
	return s, addrs
}

// waitJSONRecord waits (proxytest.WaitFor) for the JSON access log to hold a record
// match accepts, and returns it.
func waitJSONRecord(t *testing.T, access *logBuffer, match func(map[string]any) bool) map[string]any {
	t.Helper()
	return waitJSONRecordSince(t, access, 0, match)
}

// waitJSONRecordSince is waitJSONRecord among the records written past
// the log's first since bytes (a mark of len(access.String()) taken
// before the connection the record is of): a record matched by a
// client's address and port may otherwise be that of an earlier
// connection, whose port loopback reuses once it has closed.
func waitJSONRecordSince(t *testing.T, access *logBuffer, since int, match func(map[string]any) bool) map[string]any {
	t.Helper()
	var found map[string]any
	proxytest.WaitFor(t, "an access log record that matches in:\n"+access.String()[since:], func() bool {
		sc := bufio.NewScanner(strings.NewReader(access.String()[since:]))
		for sc.Scan() {
			var r map[string]any
			if json.Unmarshal(sc.Bytes(), &r) == nil && match(r) {
				found = r
				return true
			}
		}
		return false
	})
	return found
}
