// Package intercept terminates the TLS of the tunnels an interception
// rule names, so that the requests inside go through rustle's request
// path as forwarded requests do: the access rules (methods, paths, the
// protocol https), quotas, routes, the decision service and the access
// log, then TLS to the origin that rustle verifies.
//
// A [CA] (made by WriteCA, `rustle ca DIR`, or loaded by LoadCA, its key
// refused when group or others may read it) signs leaf certificates that
// [Certs] mints per server name on the fly, caches (bounded, shared by
// the workers) and renews before they end. An [Interceptor] holds the
// rules and the bypass list; its Listener implements gate.Interceptor
// for one listener: gate asks it whether a tunnel's ClientHello names
// one of its rules, and hands it the tunnel to serve. The handshake
// with the client offers h2 and http/1.1 whatever the origin speaks (no
// connection to the origin is made before it: each request inside
// makes or reuses one through its own grant), and the connection is
// served by the rule's front-end (internal/httpproxy or internal/h2)
// with an origin client carrying the rule's header edits, which speaks
// to the origin what it chose by ALPN, HTTP/2 or HTTP/1.1 (see
// origin.Config.TLS). A client that refuses
// the minted certificate is logged and counted as
// client-rejected-certificate.
package intercept
