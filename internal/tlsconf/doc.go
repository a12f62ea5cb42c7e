// Package tlsconf builds the server-side TLS configuration of rustle's HTTPS
// proxy port: it loads and checks a PEM certificate and key, reloads them
// (and the client CA bundle) on demand without dropping connections, rotates
// session ticket keys, optionally verifies client certificates, and writes a
// self-signed CA and server pair for trying the HTTPS port out.
//
// # Reload
//
// A [Manager] keeps the loaded certificate, and a per-handshake
// [tls.Config] holding the client CA pool, behind an atomic pointer.
// [Manager.TLSConfig] returns a config whose GetConfigForClient and
// GetCertificate read that pointer at each handshake, so [Manager.Reload]
// affects new handshakes only: established connections keep the keys they
// negotiated. A new pair that fails to load is refused and the old one stays.
//
// # Session tickets
//
// Session resumption uses tickets (TLS 1.2 and 1.3) encrypted with keys the
// Manager generates and rotates every [Config.TicketRotation]. The current
// key encrypts new tickets; it and the two previous keys decrypt, so a
// ticket stays usable for two to three rotation periods. The keys live only
// in memory: a restart invalidates all tickets.
//
// # Kernel TLS
//
// Go's crypto/tls cannot hand its record keys to the kernel, so this package
// refuses [Config.KTLS] with an error that also says whether the running
// kernel offers the "tls" upper-layer protocol at all.
package tlsconf
