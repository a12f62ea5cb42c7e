// Package pac makes the proxy auto-configuration file (PAC: a
// JavaScript FindProxyForURL(url, host), which browsers, libproxy,
// Windows and macOS read) that rustle serves at /proxy.pac: generated
// from the [pac] table (DIRECT for the bypass names, suffixes and
// ranges, the proxies in failover order for the rest), or the operator's
// own file, checked when it loads.
//
// A generated file is correct by construction: it is made of a few
// fixed statements, and the values written into it (names, addresses,
// host:port) are of characters that need no quoting. An operator's file
// is checked without a JavaScript engine (see Check): rustle carries
// none, and the browsers evaluate the file themselves. The check scans
// its tokens (strings, template literals, comments, regular expression
// literals) and its brackets, and asks for a FindProxyForURL
// definition: the errors it finds are the syntax errors a hand-edited
// file most often has, each refused with its line; what only an
// evaluation finds (an unknown function called, a statement a parser
// refuses inside balanced brackets) is not.
package pac

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/rustle-proxy/rustle/internal/config"
)

// ContentType is what a PAC file is served as.
const ContentType = "application/x-ns-proxy-autoconfig"

// Path is where a listener serves the PAC file (config.PACPath).
const Path = config.PACPath

// MaxFileBytes bounds an operator's PAC file.
const MaxFileBytes = 1 << 20

// PAC is a PAC file ready to serve. It is immutable and safe for
// concurrent use.
type PAC struct {
	// body is the whole file; for a generated file without proxies, the
	// part before the return statement's proxy list (see Body).
	body []byte
	// fromHost says the proxy list is the host the file was fetched by.
	fromHost bool
}

// New makes the PAC that cfg describes: the operator's file (relative to
// the working directory: the configuration resolves it), read and
// checked, or a generated one. The error names the file's line for a
// file that does not check. cfg is valid (config.Validate).
func New(cfg config.PAC) (*PAC, error) {
	if cfg.File != "" {
		b, err := os.ReadFile(cfg.File)
		if err != nil {
			return nil, fmt.Errorf("pac: %w", err)
		}
		if err := Check(b); err != nil {
			return nil, fmt.Errorf("pac: %s: %w", cfg.File, err)
		}
		return &PAC{body: b}, nil
	}
	return generate(cfg)
}

// Body returns the file for a client that fetched it with host (its
// Host: host[:port]); defPort is the port of the listener it was
// fetched from, for a host without one. Only a generated file without
// pac.proxies depends on them: it names host[:defPort] as the proxy. An
// error means host is no host:port of a name or an address (the client
// is answered 400).
func (p *PAC) Body(host string, defPort uint16) ([]byte, error) {
	if !p.fromHost {
		return p.body, nil
	}
	hp := host
	if i := strings.LastIndexByte(host, ':'); i < 0 || strings.HasSuffix(host, "]") {
		hp = host + ":" + strconv.Itoa(int(defPort))
	}
	if err := config.CheckPACHostPort(hp); err != nil {
		return nil, fmt.Errorf("pac: Host %q: %w", host, err)
	}
	b := make([]byte, 0, len(p.body)+len(hp)+32)
	b = append(b, p.body...)
	b = append(b, "\"PROXY "...)
	b = append(b, hp...)
	return append(b, "\";\n}\n"...), nil
}

// generate writes the PAC of a [pac] table without a file.
func generate(cfg config.PAC) (*PAC, error) {
	var b strings.Builder
	b.WriteString("// rustle's proxy auto-configuration, generated from [pac] in its configuration.\n")
	b.WriteString("function FindProxyForURL(url, host) {\n")
	b.WriteString("\thost = host.toLowerCase();\n")
	b.WriteString("\tif (host.charAt(0) == \"[\") host = host.substring(1, host.length - 1);\n")
	var v4, v6 []netip.Prefix
	for _, s := range cfg.Bypass {
		e, err := config.ParsePACBypass(s)
		if err != nil {
			return nil, fmt.Errorf("pac: bypass: %w", err)
		}
		switch {
		case e.Local:
			b.WriteString("\tif (isPlainHostName(host) && host.indexOf(\":\") < 0) return \"DIRECT\";\n") // an IPv6 literal has no dot either
		case e.Name != "":
			fmt.Fprintf(&b, "\tif (host == %q) return \"DIRECT\";\n", e.Name)
		case e.Suffix != "" && e.Exact:
			fmt.Fprintf(&b, "\tif (host == %q || dnsDomainIs(host, %q)) return \"DIRECT\";\n", e.Suffix[1:], e.Suffix)
		case e.Suffix != "":
			fmt.Fprintf(&b, "\tif (dnsDomainIs(host, %q)) return \"DIRECT\";\n", e.Suffix)
		case e.Prefix.Addr().Is4():
			v4 = append(v4, e.Prefix)
		default:
			v6 = append(v6, e.Prefix)
		}
	}
	if len(v4) > 0 {
		b.WriteString("\tif (/^[0-9]+\\.[0-9]+\\.[0-9]+\\.[0-9]+$/.test(host)) {\n")
		for _, p := range v4 {
			mask := netip.AddrFrom4([4]byte(maskBytes(p.Bits(), 4)))
			fmt.Fprintf(&b, "\t\tif (isInNet(host, %q, %q)) return \"DIRECT\";\n", p.Addr().String(), mask.String())
		}
		b.WriteString("\t}\n")
	}
	if len(v6) > 0 {
		b.WriteString("\tif (host.indexOf(\":\") >= 0 && typeof isInNetEx == \"function\") {\n")
		for _, p := range v6 {
			fmt.Fprintf(&b, "\t\tif (isInNetEx(host, %q)) return \"DIRECT\";\n", p.String())
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("\treturn ")
	if len(cfg.Proxies) == 0 {
		return &PAC{body: []byte(b.String()), fromHost: true}, nil
	}
	list := make([]string, 0, len(cfg.Proxies))
	for _, s := range cfg.Proxies {
		pp, err := config.ParsePACProxy(s)
		if err != nil {
			return nil, fmt.Errorf("pac: proxies: %w", err)
		}
		if pp.Kind == "DIRECT" {
			list = append(list, "DIRECT")
		} else {
			list = append(list, pp.Kind+" "+pp.HostPort)
		}
	}
	fmt.Fprintf(&b, "%q;\n}\n", strings.Join(list, "; "))
	return &PAC{body: []byte(b.String())}, nil
}

// maskBytes returns the n-byte mask of a prefix of bits.
func maskBytes(bits, n int) []byte {
	m := make([]byte, n)
	for i := range m {
		switch {
		case bits >= 8:
			m[i] = 0xff
			bits -= 8
		case bits > 0:
			m[i] = byte(0xff << (8 - bits))
			bits = 0
		}
	}
	return m
}

// SyntaxError is a PAC file that does not check, at Line (from 1).
type SyntaxError struct {
	Line int
	Msg  string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

// errNoFunction is a file without a FindProxyForURL definition.
var errNoFunction = errors.New("defines no FindProxyForURL function (function FindProxyForURL(url, host) { ... })")
