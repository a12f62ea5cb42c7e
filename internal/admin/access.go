package admin

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"

	"github.com/rustle-proxy/rustle/internal/auth"
	"github.com/rustle-proxy/rustle/internal/config"
)

// Access says who may call the admin server and which Host names it
// answers. Its zero value asks no authentication: for a listener on
// loopback.
type Access struct {
	// Token is the bearer token accepted as "Authorization: Bearer
	// TOKEN"; nil means none.
	Token []byte
	// Users checks Basic Authorization values; nil means none.
	Users *auth.Authenticator
	// Hosts are names (DNS names or IP addresses, without a port)
	// answered in Host besides the listener's own (see
	// config.AdminAccess.Hosts); nil means none.
	Hosts []string
	// HealthAndMetricsOnly makes every endpoint added with Handle answer
	// 404: only /healthz, /readyz and /metrics are served.
	HealthAndMetricsOnly bool
}

// authenticates reports whether a asks for authentication.
func (a *Access) authenticates() bool { return a.Token != nil || a.Users != nil }

// LoadAccess reads the files of c: the bearer token (the first line of
// token_file, surrounding blanks trimmed, at least
// config.MinAdminTokenLen characters) and the htpasswd users. Its errors
// name the key and the file, never the token.
func LoadAccess(c config.AdminAccess) (Access, error) {
	a := Access{Hosts: c.Hosts, HealthAndMetricsOnly: c.HealthAndMetricsOnly}
	if c.TokenFile != "" {
		tok, err := readToken(c.TokenFile)
		if err != nil {
			return Access{}, fmt.Errorf("admin_access.token_file: %w", err)
		}
		a.Token = tok
	}
	if c.Htpasswd != "" {
		users, err := auth.New(auth.Config{Realm: realm, Files: []string{c.Htpasswd}})
		if err != nil {
			return Access{}, fmt.Errorf("admin_access.htpasswd: %w", err)
		}
		if users.Len() == 0 {
			return Access{}, fmt.Errorf("admin_access.htpasswd: %s has no users", c.Htpasswd)
		}
		a.Users = users
	}
	return a, nil
}

// realm is the admin listener's realm in WWW-Authenticate.
const realm = "rustle admin"

// readToken returns the first line of the file at path, trimmed.
func readToken(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read the token: %w", err)
	}
	defer f.Close()
	line, err := bufio.NewReaderSize(f, 4096).ReadSlice('\n')
	if err != nil && len(line) == 0 {
		return nil, fmt.Errorf("read the token from %s: %w", path, err)
	}
	tok := bytes.TrimSpace(line)
	if len(tok) < config.MinAdminTokenLen {
		return nil, fmt.Errorf("%s holds a token of %d characters; at least %d are needed (make one with `openssl rand -hex 32`)",
			path, len(tok), config.MinAdminTokenLen)
	}
	if bytes.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return nil, fmt.Errorf("%s: the token has a blank or a control character", path)
	}
	return bytes.Clone(tok), nil
}

// guard serves next behind the admin listener's checks, in this order:
// the Host (but for /healthz and /readyz, which load balancers probe
// under any name), then for a path that exists the credentials (but for
// /healthz, /readyz and /metrics) or, without authentication, a
// loopback client (unless only health and metrics are served), then for a method other than GET and HEAD the origin
// and the content type. The request goes on with the caller's identity
// (see Caller).
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Path
		probe := path == "/healthz" || path == "/readyz"
		if !probe && !s.hostAllowed(r.Host) {
			s.refuse(w, r, http.StatusMisdirectedRequest, "host", fmt.Sprintf(
				"rustle admin: Host %q is not a name of this listener (admin_access.hosts lists further names)\n", clip(r.Host)))
			return
		}
		if _, pattern := s.mux.Handler(r); pattern == "" {
			next.ServeHTTP(w, r) // 404 or 405
			return
		}
		open := probe || path == "/metrics"
		who := ""
		switch {
		case open:
		case s.access.authenticates():
			var ok bool
			if who, ok = s.authorized(r); !ok {
				var schemes []string
				if s.access.Token != nil {
					schemes = append(schemes, `Bearer realm="`+realm+`"`)
				}
				if s.access.Users != nil {
					schemes = append(schemes, `Basic realm="`+realm+`", charset="UTF-8"`)
				}
				for _, c := range schemes {
					w.Header().Add("WWW-Authenticate", c)
				}
				s.refuse(w, r, http.StatusUnauthorized, "auth", "rustle admin: authentication required (admin_access)\n")
				return
			}
		case !s.access.HealthAndMetricsOnly && !loopbackClient(r.RemoteAddr):
			// Without admin_access only loopback may call: config
			// validation keeps such a listener on loopback, and this
			// holds whatever address it was given. (Serving health and
			// metrics only, the other endpoints answer 404 anyway.)
			s.refuse(w, r, http.StatusForbidden, "remote",
				"rustle admin: without admin_access authentication only loopback clients are answered\n")
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if err := s.cross.Check(r); err != nil {
				s.refuse(w, r, http.StatusForbidden, "cross-origin",
					"rustle admin: cross-origin request refused (Origin or Sec-Fetch-Site names another site)\n")
				return
			}
			if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
				s.refuse(w, r, http.StatusUnsupportedMediaType, "content-type",
					"rustle admin: "+r.Method+" needs Content-Type: application/json, which a browser form cannot send\n")
				return
			}
		}
		if !open {
			r = r.WithContext(context.WithValue(r.Context(), callerKey{}, who))
		}
		next.ServeHTTP(w, r)
	})
}

// callerKey is the context key of the caller's identity.
type callerKey struct{}

// Caller returns who made r, a request the admin listener let through:
// "token" for the bearer token, a user's name for Basic credentials, ""
// without admin_access authentication (a loopback client).
func Caller(r *http.Request) string {
	who, _ := r.Context().Value(callerKey{}).(string)
	return who
}

// loopbackClient reports whether remote, a RemoteAddr, is a loopback
// address.
func loopbackClient(remote string) bool {
	ap, err := netip.ParseAddrPort(remote)
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// authorized reports whether r's Authorization is the token or a
// user's Basic credentials, and who that is: "token", or the user.
func (s *Server) authorized(r *http.Request) (string, bool) {
	v := r.Header.Get("Authorization")
	scheme, cred, _ := strings.Cut(v, " ")
	switch {
	case strings.EqualFold(scheme, "Bearer") && s.access.Token != nil:
		got, want := sha256.Sum256([]byte(strings.TrimSpace(cred))), sha256.Sum256(s.access.Token)
		return "token", subtle.ConstantTimeCompare(got[:], want[:]) == 1
	case strings.EqualFold(scheme, "Basic") && s.access.Users != nil:
		return s.access.Users.Check([]byte(v))
	}
	return "", false
}

// hostAllowed reports whether the admin listener answers host (a Host
// header, with or without a port): empty (HTTP/1.0), localhost, a
// loopback address, the address it is bound to or, bound to 0.0.0.0 or
// ::, any IP address (an address is no DNS rebinding), the host of its
// configured address, or a name of Access.Hosts.
func (s *Server) hostAllowed(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = normalHost(host)
	switch {
	case host == "" || host == "localhost" || s.names[host]:
		return true
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	if ip.IsLoopback() {
		return true
	}
	b := s.bound.Load()
	return b != nil && (b.IsUnspecified() || *b == ip)
}

// normalHost returns host lower-cased, without brackets or a trailing
// dot; an IP address in its canonical form, unmapped and without zone.
func normalHost(host string) string {
	host = strings.TrimSuffix(strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().WithZone("").String()
	}
	return host
}

// refuse answers r with code and the one-line reason, and logs the
// refusal: why (the reason's word), what was asked and by whom, never
// the credentials.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, code int, why, reason string) {
	s.log.Warn("admin request refused", "reason", why, "status", code, "method", r.Method,
		"path", clip(r.URL.Path), "host", clip(r.Host), "remote", r.RemoteAddr)
	writeText(w, code, reason)
}

// clip shortens s, a client's, to 100 bytes for an answer or a log line.
func clip(s string) string {
	if len(s) > 100 {
		return s[:100] + "..."
	}
	return s
}
