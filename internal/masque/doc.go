// Package masque holds the wire pieces of CONNECT-UDP (RFC 9298) that
// every front-end carrying it shares: the URI template a client names
// its target with, the HTTP Datagram payload's context ID (RFC 9297
// §2.1, RFC 9298 §4), and the capsules (RFC 9297 §3.2) a client may send
// on the request stream, which rustle reads and skips.
//
// Each parser takes bytes a client sent and returns an error for what
// it cannot take; none allocates on the datagram path.
package masque
