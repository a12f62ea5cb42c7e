package tlsconf

import (
	"crypto/tls"
	"fmt"
	"slices"
	"strings"
)

// keyExchanges are the key exchanges crypto/tls implements, in its own
// default order; each is named by its [tls.CurveID.String].
var keyExchanges = []tls.CurveID{
	tls.X25519MLKEM768, tls.SecP256r1MLKEM768, tls.SecP384r1MLKEM1024,
	tls.X25519, tls.CurveP256, tls.CurveP384, tls.CurveP521,
}

// KeyExchangeNames returns the names ParseKeyExchange accepts, in
// crypto/tls's default order of preference: the post-quantum hybrids
// first.
func KeyExchangeNames() []string {
	names := make([]string, len(keyExchanges))
	for i, id := range keyExchanges {
		names[i] = id.String()
	}
	return names
}

// ParseKeyExchange returns the key exchange named name, as
// [tls.CurveID.String] writes it ("X25519MLKEM768", "X25519",
// "CurveP256"); the error lists the names it knows.
func ParseKeyExchange(name string) (tls.CurveID, error) {
	for _, id := range keyExchanges {
		if id.String() == name {
			return id, nil
		}
	}
	return 0, fmt.Errorf("tlsconf: unknown key exchange %q: use one of %s", name, strings.Join(KeyExchangeNames(), ", "))
}

// tls13Only reports whether key exchange id exists only in TLS 1.3 (the
// post-quantum hybrids).
func tls13Only(id tls.CurveID) bool {
	switch id {
	case tls.X25519MLKEM768, tls.SecP256r1MLKEM768, tls.SecP384r1MLKEM1024:
		return true
	}
	return false
}

// pickKeyExchange returns the index in prefs of the first key exchange
// the client of hi supports (a hybrid only when it offers TLS 1.3), or -1
// when it supports none of them.
func pickKeyExchange(prefs []tls.CurveID, hi *tls.ClientHelloInfo) int {
	tls13 := slices.Contains(hi.SupportedVersions, tls.VersionTLS13)
	for i, id := range prefs {
		if slices.Contains(hi.SupportedCurves, id) && (tls13 || !tls13Only(id)) {
			return i
		}
	}
	return -1
}

// checkKeyExchanges refuses a Config.KeyExchanges that is empty but not
// nil, names one twice, or one crypto/tls does not implement.
func checkKeyExchanges(kx []tls.CurveID) error {
	if kx != nil && len(kx) == 0 {
		return fmt.Errorf("tlsconf: an empty list of key exchanges: nil means the default")
	}
	for i, id := range kx {
		if !slices.Contains(keyExchanges, id) {
			return fmt.Errorf("tlsconf: key exchange %d: %v is not one of %s", i, id, strings.Join(KeyExchangeNames(), ", "))
		}
		if slices.Contains(kx[:i], id) {
			return fmt.Errorf("tlsconf: key exchange %v listed twice", id)
		}
	}
	return nil
}
