// Package gate is the request path that every front-end shares: the
// HTTP/1.1 proxy, HTTP/2 and SOCKS each hold only their wire protocol and
// call gate to decide, dial, relay and observe.
//
// A [Policy] is what one listener applies under one configuration: the
// users, the access rules, the limits, the dialer and upstream pool, the
// metrics and the access log. Each accepted client connection is first
// admitted with [Policy.Admit] (the connection limits and the address's
// cool-down, one verdict for every accept path), then gets a
// [Session] from it: the client's address, its TLS certificate identity or
// SOCKS login, the worker's tunnel engine and the connection's admission,
// which the session releases when it closes unless a tunnel took it on.
//
// Every request a front-end reads becomes a [Request], and
// [Session.Authorize] turns it into a [Grant] or a refusal ([Kind]: need
// auth, cooling down, an identity provider unavailable, user limit,
// denied by a rule, quota spent). A front-end maps a
// refusal to its wire (407/403/429, an h2 :status, a SOCKS reply) and
// nothing else. On a grant it dials with [Grant.Dial] (which always feeds
// the dial histogram), checks a kept or pooled upstream with
// [Grant.Admits], notes the first response byte with [Grant.FirstByte],
// relays a tunnel with [Grant.Tunnel] (the splice engine, the TLS relay,
// the paced relay or the portable relay, all returning the bytes each
// way) and ends with [Grant.Finish], which writes the access log record
// and the metrics. One request of each protocol thus counts and logs the
// same fields, and counts against its user's quotas (the Policy's
// quota.Tracker): a request when it is granted, its bytes when it ends,
// a tunnel's and a forwarded body's bytes as they move (the engine's and
// the relays' meter, or [Grant.Meter] and [Grant.Pace] for a front-end
// that relays itself), which ends the tunnel or the response once a byte
// quota is spent. What a front-end refuses before it is a request the policy
// can decide (a malformed or oversized head, an HTTP/2 protocol error, a
// failed TLS handshake) is reported once with [Session.Reject]: a record
// with what was parsed of it and its reason, and a debug line.
//
// A policy with a decision service ([Policy.Authz], package authz) asks
// it about every request the access rules allow, in Authorize, or, for
// a tunnel that reads its ClientHello, in CheckHello with the hello's
// server name (see authz.go): a denial is [Denied] with the reason
// authz-denied, a service that cannot decide [AuthzUnavailable] under
// on_error = "deny". The private-destination guard applies at the dial
// whatever it answered.
//
// A policy with a route table ([Policy.Routes], package route) also
// chooses, in Authorize and from the same fields the access rules see,
// the route of each request; [Grant.Dial] and [Grant.DialConn] apply it:
// direct, or through the parent the route picks at dial time (a tunnel
// through an http, socks5 or socks5h parent is still a *net.TCPConn for
// the splice engine; DialConn may return an https parent's *tls.Conn,
// which [Grant.Tunnel] relays with goroutines). A forwarded HTTP request's
// exchange (package origin, which every HTTP front-end shares) asks
// [Grant.ForwardParent] first: an http parent takes the request in
// absolute form and its connections are pooled under [ForwardKey]. The
// access log names the route and the parent of every record.
//
// A request that came back to the rustle through its parents (its
// [Request.Via] names the policy's [route.Instance], or its connection is
// the other end of one of the rustle's parent handshakes) is refused by
// Authorize with [Loop] (508); every request sent to a parent names the
// instance in its Via (package origin for forwarded requests, package
// route for a tunnel's CONNECT).
//
// A tunnel (CONNECT on every HTTP version, SOCKS CONNECT) may have its
// TLS ClientHello checked before it is dialled (see sni.go): when
// [Grant.NeedsHello] says so (the listener's or the allowing rule's sni
// mode is log or match, or a rule, route or egress rule matches on
// sni_hosts), the front-end answers the tunnel, reads the client's
// first bytes (package sni), and [Grant.CheckHello] decides with them:
// the rules and the route again with the server name, and under match
// a refusal of a hello that names another host ([SNIMismatch]). Only
// then does the front-end dial, and it sends the bytes read first.
//
// gate knows no HTTP framing: the HTTP helpers (hop-by-hop fields, the
// request target, Forwarded, which methods may be retried, Max-Forwards on
// TRACE and OPTIONS) and the exchange with an origin are package
// origin's.
//
// Bytes up and down are, on every protocol, the payload rustle wrote to
// the upstream and to the client: the content of request and response
// bodies (without chunked or HTTP/2 framing), or what a tunnel carried
// each way; heads, trailers and rustle's own answers never count, nor
// bytes read but not written. A front-end counts a write's bytes as it
// returns (what the socket took, also when the write then failed), and
// for HTTP/2 a DATA frame once it is wholly written to the connection.
package gate
