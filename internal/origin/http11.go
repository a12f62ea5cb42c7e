package origin

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/http1"
)

// ErrHTTP11Required is an origin spoken HTTP/2 to (it chose h2 by ALPN)
// resetting the request's stream with HTTP_1_1_REQUIRED (RFC 9113 §7),
// as IIS does for NTLM and Negotiate. Send retries such a request once
// on a new connection that offers http/1.1 alone when it can be sent
// again, and the Client offers that origin http/1.1 alone for a while
// (see h1Only); an HTTP/2 or HTTP/3 front-end that meets it passes it on
// to its client (see HTTP11Required), an HTTP/1.1 one answers it as
// Failure says.
var ErrHTTP11Required = errors.New("origin: the origin asked for HTTP/1.1 (HTTP_1_1_REQUIRED)")

// maxSkippedBody bounds the response body RetryOverHTTP11 reads past to
// keep the upstream: a 401's is a line or a small page.
const maxSkippedBody = 64 << 10

// RetryOverHTTP11 is for a front-end whose client multiplexes its
// requests on one connection (HTTP/2, HTTP/3): it reports whether the
// final response in Resp must not be relayed to it but the request
// refused with the protocol's word for "retry over HTTP/1.1"
// (HTTP_1_1_REQUIRED, RFC 9113 §7; H3_VERSION_FALLBACK, RFC 9114 §8.1).
// It is so for a 401 whose WWW-Authenticate offers NTLM or Negotiate:
// those authenticate the connection, the client's answer to the
// challenge must come on the one that carried it, and the streams of an
// HTTP/2 or HTTP/3 client are not bound to one upstream (each takes an
// idle one of its identity) where an HTTP/1.1 client connection keeps
// its own.
//
// When it is, the grant is noted as answered nothing (status 0) with the
// reason http-1.1-required, which its Finish logs (at debug, "gate:
// request refused"), and the response's body, up to 64 KiB, is read to
// its end: reuse then says whether the upstream is at a message boundary
// and may go back to the pool (Release(reuse)). The front-end resets the
// stream with its code and relays nothing of the response.
func (x *Exchange) RetryOverHTTP11() (refused, reuse bool) {
	h := &x.Resp
	if h.Status != 401 || !offersConnectionAuth(h) {
		return false, false
	}
	x.noteHTTP11()
	keep := x.KeepAlive()
	for n := 0; ; {
		data, last, err := x.NextBody()
		if err != nil {
			return true, false
		}
		if n += len(data); n > maxSkippedBody {
			return true, false
		}
		if last {
			return true, keep
		}
	}
}

// HTTP11Required is for a front-end whose client multiplexes its
// requests on one connection (HTTP/2, HTTP/3): it reports whether err,
// from Send or ReadResponse, is ErrHTTP11Required, which the front-end
// passes on to its client by resetting the stream with its protocol's
// word for it (HTTP_1_1_REQUIRED, H3_VERSION_FALLBACK) rather than
// answering. The grant is then noted as RetryOverHTTP11 notes it.
func (x *Exchange) HTTP11Required(err error) bool {
	if !errors.Is(err, ErrHTTP11Required) {
		return false
	}
	x.noteHTTP11()
	return true
}

// noteHTTP11 notes the grant as answered nothing (status 0), with the
// reason http-1.1-required, which its Finish logs.
func (x *Exchange) noteHTTP11() {
	x.g.SetReason(accesslog.ReasonHTTP11Required)
	x.g.AnswerNothing()
}

// The origins that asked for HTTP/1.1 (see h1Only): at most
// maxH1Only, each for h1OnlyFor since it last asked.
const (
	maxH1Only = 1024
	h1OnlyFor = 10 * time.Minute
)

// h1Origins are the pool keys of the origins that reset a stream with
// HTTP_1_1_REQUIRED lately, with when each did: their TLS handshakes
// offer http/1.1 alone, and their HTTP/2 connections are not reused.
type h1Origins struct {
	n  atomic.Int32 // len(m), read without the lock: most Clients never have one
	mu sync.Mutex
	m  map[string]time.Time
}

// note remembers key as an origin that asked for HTTP/1.1 now. Past
// maxH1Only keys, the expired ones are dropped, or all when none is.
func (o *h1Origins) note(key []byte, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = make(map[string]time.Time)
	}
	if _, ok := o.m[string(key)]; !ok && len(o.m) >= maxH1Only {
		for k, at := range o.m {
			if now.Sub(at) >= h1OnlyFor {
				delete(o.m, k)
			}
		}
		if len(o.m) >= maxH1Only {
			clear(o.m)
		}
	}
	o.m[string(key)] = now
	o.n.Store(int32(len(o.m)))
}

// has reports whether key asked for HTTP/1.1 within h1OnlyFor of now.
func (o *h1Origins) has(key []byte, now time.Time) bool {
	if o.n.Load() == 0 {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	at, ok := o.m[string(key)]
	return ok && now.Sub(at) < h1OnlyFor
}

// h1Only reports whether the request's origin is to be offered http/1.1
// alone: a WebSocket handshake, or an origin that asked for HTTP/1.1
// lately.
func (x *Exchange) h1Only() bool {
	// The count first: no clock reading per request while no origin
	// asked.
	return x.upgrade || (x.c.h1.n.Load() != 0 && x.c.h1.has(x.key, time.Now()))
}

// offersConnectionAuth reports whether h's WWW-Authenticate fields offer
// a scheme that authenticates the connection rather than the request:
// NTLM or Negotiate (RFC 4559), ASCII case ignored, among any other
// challenges of the same or other fields.
func offersConnectionAuth(h *http1.Head) bool {
	for i := range h.Fields {
		f := &h.Fields[i]
		if !http1.EqualFold(f.Name.Of(h.Buf), "www-authenticate") {
			continue
		}
		for _, scheme := range challengeSchemes(f.Value.Of(h.Buf), nil) {
			if http1.EqualFold(scheme, "ntlm") || http1.EqualFold(scheme, "negotiate") {
				return true
			}
		}
	}
	return false
}

// challengeSchemes appends to dst the auth-schemes of v, the value of a
// WWW-Authenticate field (RFC 9110 §11.6.1): a comma-separated list of
// challenges, each a scheme token followed by a token68 or by
// comma-separated auth-params (name=value, the value maybe a quoted
// string, which may hold commas). An element whose first token is
// followed by "=" is an auth-param of the challenge before it, not a
// scheme.
func challengeSchemes(v []byte, dst [][]byte) [][]byte {
	i := 0
	for i < len(v) {
		// The start of a list element: skip whitespace and empty
		// elements.
		for i < len(v) && (v[i] == ' ' || v[i] == '\t' || v[i] == ',') {
			i++
		}
		start := i
		for i < len(v) && http1.IsTokenChar(v[i]) {
			i++
		}
		tok := v[start:i]
		j := i
		for j < len(v) && (v[j] == ' ' || v[j] == '\t') {
			j++
		}
		if len(tok) > 0 && (j == len(v) || v[j] != '=') {
			dst = append(dst, tok)
		}
		i = nextElement(v, i)
	}
	return dst
}

// nextElement returns the index in v, a comma-separated list, of the
// comma that ends the element i is in (one outside a quoted string), or
// len(v).
func nextElement(v []byte, i int) int {
	quoted := false
	for ; i < len(v); i++ {
		switch c := v[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case c == ',' && !quoted:
			return i
		}
	}
	return len(v)
}
