package server

import (
	"log/slog"
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

// logBuffer is where the tests' logs go, read while written.
type logBuffer = proxytest.LogBuffer

// waitJSONRecord is proxytest.WaitJSONRecord.
func waitJSONRecord(t *testing.T, access *logBuffer, match func(map[string]any) bool) map[string]any {
	t.Helper()
	return proxytest.WaitJSONRecord(t, access, match)
}

// waitJSONRecordSince is proxytest.WaitJSONRecordSince: the records
// written past a mark (access.Len()) taken before the connection the
// record is of.
func waitJSONRecordSince(t *testing.T, access *logBuffer, since int, match func(map[string]any) bool) map[string]any {
	t.Helper()
	return proxytest.WaitJSONRecordSince(t, access, since, match)
}
