// Package socks5 serves SOCKS5 (RFC 1928) on client connections accepted
// by rustle, and SOCKS4 and SOCKS4a for old clients.
//
// A [Server] answers one connection at a time through [Server.ServeConn],
// which reads the first byte to tell SOCKS5 (0x05) from SOCKS4 (0x04).
// The package holds only the wire protocol: the connection's
// [gate.Session] authenticates, decides, dials, relays and observes, and
// the Server maps its outcomes to SOCKS replies. It supports:
//
//   - CONNECT to an IPv4 address, an IPv6 address or a domain name, which
//     the proxy resolves (so socks5h:// clients work). The upstream is dialed
//     by the session's grant, and once the success reply is sent the
//     tunnel is relayed as an HTTP CONNECT tunnel is ([gate.Grant.Tunnel]:
//     the worker's splice engine, or the paced relay for a paced user).
//   - UDP ASSOCIATE: a UDP relay socket bound per association on the IP
//     address the client connected to. It relays only datagrams from the
//     client's IP address (and, once learned from the request or the first
//     datagram, its port), drops fragments (FRAG != 0), and passes back only
//     datagrams from addresses the client has sent to. The association ends
//     when its TCP control connection closes, after Config.UDPIdleTimeout
//     (when set) without a relayed datagram, or when the session's context
//     is done. A datagram whose route goes through a socks5 or socks5h
//     parent ([gate.Grant.DatagramParent]) is sent, with its RFC 1928
//     header, to the parent's relay on a UDP association rustle holds
//     with the parent ([gate.Grant.AssociateParent]: a control connection
//     and a UDP socket per parent, made on the first datagram, ended with
//     the client's association); the parent's datagrams are passed back
//     as it sent them, by a goroutine per parent. The destination is
//     checked first: an address (the client's, or what rustle resolved
//     for a socks5 parent, which is sent the address) by
//     [gate.Grant.PermitDatagram], a name for a socks5h parent by
//     [gate.Grant.PermitDatagramName]. A datagram for a parent that could
//     not be associated with (it refused UDP ASSOCIATE, or is down) is
//     dropped, and so is one whose route picks an http or https parent.
//   - username/password authentication (RFC 1929) through
//     [gate.Session.Login], against the same users as HTTP Basic. "No
//     authentication required" is offered only when the policy requires
//     no authentication.
//   - SOCKS4 and SOCKS4a CONNECT, refused (0x5B) when the listener requires
//     authentication, since SOCKS4 carries no password.
//
// BIND is answered "command not supported" (0x07): it needs the proxy to
// accept an inbound connection on the client's behalf, which almost no
// client uses (active-mode FTP) and which would open a listening port per
// request.
//
// # Replies
//
// A CONNECT that the access rules, the private-destination guard or the
// per-user connection limit refuses gets 0x02 (connection not allowed by
// ruleset), as does a UDP ASSOCIATE past the user's limit; a UDP datagram
// the rules or the guard refuse is dropped. A client whose address cools
// down after too many failed logins is closed without a reply; a login
// naming a user name that cools down at the client's address is answered
// the failure status (0x01) without its password being checked, whenever
// the connection was opened. Dial failures map to
// reply codes: connection refused 0x05, network unreachable 0x03, host
// unreachable 0x04, a name that does not resolve or is not a valid host
// name 0x04, a connect timeout 0x06 (TTL expired), anything else 0x01. An unknown command gets 0x07 and an unknown address
// type 0x08. A SOCKS4 request that is refused or fails gets 0x5B.
//
// # Logging
//
// Every exchange rustle refuses is logged and counted through the
// session ([gate.Grant.Finish]), even one that ends before any request:
// a failed login as protocol socks5 with no method or target, the user
// name tried (never the password) and as status the RFC 1929 status byte
// sent (1), reason auth-failed (or cooling-down); a greeting without
// username/password on a listener that requires it with status 0xFF (255,
// the method selection sent), reason auth-missing; a SOCKS4 request there
// as protocol socks4 with status 0x5B (91), reason auth-missing. Their
// status class is the HTTP status of the refusal (407, or 429 while
// cooling down). SOCKS4 and SOCKS4a tunnels are logged as protocol
// socks4.
//
// # Bad input
//
// Every read of the handshake runs under Config.HandshakeTimeout (when
// set; the configuration always sets one), counted from the connection's
// start: a client that stops mid-greeting is closed when it expires, never
// waited on. A wrong version byte closes the connection without a reply
// (there is no reply format to use); no acceptable method gets 0xFF, a
// wrong password status 0x01, each followed by a close. The parsers in
// request.go, udp.go and socks4.go are pure functions on byte slices with
// native fuzz targets.
package socks5
