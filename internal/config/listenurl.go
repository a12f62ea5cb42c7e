package config

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// ParseListenURL parses a gost-style -L flag value such as
// "http://127.0.0.1:8080", "http://user:pass@[::1]:3128", "http://:3128",
// "socks5://user:pass@127.0.0.1:1080", "mixed://127.0.0.1:3128" or
// "https://127.0.0.1:8443?cert=server.pem&key=server.key&alpn=http/1.1".
//
// The scheme is the listener's protocol (see the protocol key). The
// userinfo, percent-decoded, becomes the listener's URLUser, with a plain
// password: the one user of that listener, and of no other. It sets the
// listener's Auth to "basic"; without userinfo URLUser is nil and Auth is
// "" (the configured users, if any, as for a listener of the file). The
// port is required. An https URL
// needs the query parameters cert and key; client_ca, alpn (the
// listener's alpn list, comma-separated: "h2,http/1.1") and http3 ("1"
// serves HTTP/3 on the port over UDP too) are optional;
// other query parameters, a path and a fragment are errors. The Listener's Name is "", for
// [Config.SetDefaults] to fill in; nothing else is validated here that
// [Config.Validate] checks later, except the address.
//
// Error messages never repeat the password.
func ParseListenURL(s string) (Listener, error) {
	fail := func(format string, args ...any) (Listener, error) {
		return Listener{}, fmt.Errorf("config: listen URL %s: %s", redactURL(s), fmt.Sprintf(format, args...))
	}
	scheme, _, ok := strings.Cut(s, "://")
	if !ok {
		return fail("want scheme://[user:password@]host:port, as in http://127.0.0.1:3128")
	}
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // ue.Error() would quote the URL, password and all
		}
		return fail("%v", err)
	}
	if !slices.Contains(protocols, u.Scheme) {
		return fail("scheme %q is not one of %s", scheme, strings.Join(protocols, ", "))
	}
	if u.Opaque != "" || (u.Path != "" && u.Path != "/") || u.Fragment != "" {
		return fail("want no path or fragment after host:port")
	}
	var tlsc ListenerTLS
	var alpn []string
	var http3 bool
	if u.RawQuery != "" || u.ForceQuery {
		if u.Scheme != "https" {
			return fail("query parameters are only for https:// (cert, key, client_ca, alpn, http3)")
		}
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			return fail("bad query: %v", err)
		}
		for k, vs := range q {
			if len(vs) != 1 {
				return fail("query parameter %q given %d times", k, len(vs))
			}
			switch k {
			case "cert":
				tlsc.Cert = vs[0]
			case "key":
				tlsc.Key = vs[0]
			case "client_ca":
				tlsc.ClientCA = vs[0]
			case "alpn":
				alpn = strings.Split(vs[0], ",")
			case "http3":
				if http3, err = strconv.ParseBool(vs[0]); err != nil {
					return fail("http3=%q: want 1 or 0", vs[0])
				}
			default:
				return fail("unknown query parameter %q (want cert, key, client_ca, alpn, http3)", k)
			}
		}
	}
	if u.Scheme == "https" && (tlsc.Cert == "" || tlsc.Key == "") {
		return fail("https:// needs ?cert=FILE&key=FILE")
	}
	if u.Port() == "" {
		return fail("missing port")
	}
	if _, _, err := splitListenAddress(u.Host); err != nil {
		return fail("%v", err)
	}
	l := Listener{Address: u.Host, Protocol: u.Scheme, TLS: tlsc, ALPN: alpn, HTTP3: http3}
	if u.User == nil {
		return l, nil
	}
	name := u.User.Username()
	password, ok := u.User.Password()
	switch {
	case name == "":
		return fail("empty user name")
	case strings.Contains(name, ":"):
		return fail("user name %q contains ':'", name)
	case !ok || password == "":
		return fail("user %q has no password", name)
	}
	l.Auth = AuthBasic
	l.URLUser = &User{Name: name, Password: password}
	return l, nil
}

// redactURL returns s with any password replaced by "xxxxx", or, when s
// does not parse, with everything before its last '@' replaced.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	if i := strings.LastIndexByte(s, '@'); i >= 0 {
		scheme, _, ok := strings.Cut(s, "://")
		if !ok {
			return "xxxxx" + s[i:]
		}
		return scheme + "://xxxxx" + s[i:]
	}
	return s
}
