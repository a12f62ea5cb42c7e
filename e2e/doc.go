// Package e2e holds rustle's end-to-end tests. TestMain builds the real
// binary once; each test starts it on port 0 with a generated
// configuration, reads the bound address from its log, and drives it with
// real clients (curl, wget, Go's net/http through Transport.Proxy, raw
// CONNECT sockets) against local origins on loopback.
//
// The tests are Linux only (//go:build linux): they signal the binary,
// limit its open files with prlimit and drive clients installed from
// Debian. The package has no non-test code. Set RUSTLE_E2E_RACE=1 to
// build the binary with the race detector; a data race reported by the
// proxy then fails the test that started it.
package e2e
