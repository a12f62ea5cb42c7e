// Package proxytest holds the test helpers shared by rustle's tests: a
// scriptable raw-TCP HTTP/1.1 origin ([Origin]) that records every
// request byte for byte, plain and TLS echo servers for tunnels
// ([NewEcho], [NewTLSEcho]), a proxy served on a loopback port
// ([StartProxy]), a raw client that writes exactly the bytes it is given
// and parses what comes back ([Dial], [Client]), CONNECT helpers
// ([Connect], [ConnectPipelined]), large downloads ([Bulk]), a client
// connection that goes away part way through a write ([Cut]) and a
// goroutine-leak check for TestMain ([VerifyNoLeaks]).
//
// It is imported only by _test.go files and end-to-end tests. Every
// server listens on 127.0.0.1:0, and also on [::1]:0 when the host has
// an IPv6 loopback, and is closed, with its goroutines joined, by
// t.Cleanup. Helpers that fail the test call t.Fatal and so must be called
// from the test's own goroutine.
package proxytest
