package tlsconf

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// ErrKTLSUnsupported is wrapped by the error New returns when Config.KTLS
// is set: this build has no kernel TLS offload.
var ErrKTLSUnsupported = errors.New("tlsconf: kernel TLS (tls.ktls) is not implemented in this build")

// ulpFile lists the TCP upper-layer protocols the kernel offers; a
// variable so that tests can point it elsewhere.
var ulpFile = "/proc/sys/net/ipv4/tcp_available_ulp"

// ktlsError explains why kernel TLS is refused: always because Go's
// crypto/tls keeps the record layer in user space, and, as a hint for
// later, whether this kernel could do it at all.
func ktlsError() error {
	var kernel string
	b, err := os.ReadFile(ulpFile)
	switch {
	case err != nil:
		kernel = fmt.Sprintf("could not check the kernel either: %v", err)
	case slices.Contains(strings.Fields(string(b)), "tls"):
		kernel = fmt.Sprintf("this kernel does offer the tls ULP (%s), but nothing here would use it", ulpFile)
	default:
		kernel = fmt.Sprintf("this kernel also lacks the tls ULP (%s lists %q; it needs CONFIG_TLS and the tls module)",
			ulpFile, strings.TrimSpace(string(b)))
	}
	return fmt.Errorf("%w: Go's crypto/tls cannot hand its record keys to the kernel; %s; remove tls.ktls to serve TLS in user space",
		ErrKTLSUnsupported, kernel)
}
