package origin

import (
	"errors"
	"io"
	"net"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/http1"
)

// Failure says how a front-end answers an exchange that failed (err from
// Begin, Send or ReadResponse) before any of its response reached the
// client, as the package-level Failure does for the exchange's upstream,
// and a parent's 407 (ErrParentAuth) with 502, parent-auth-failed, and
// ErrHTTP11Required (a request that could not be sent again over
// HTTP/1.1) with 502, http-1.1-required.
//
// A TLS origin (Config.TLS) spoken HTTP/1.1 to that closed without a
// response is told, in the text, that an origin speaking HTTP/2 without
// choosing h2 by ALPN cannot be served: rustle then speaks HTTP/1.1 to
// it, and such an origin may take the connection and close it at the
// first line. (A failure of an origin's HTTP/2 connection or stream
// before the response head reads as a close without a response, with
// the same status and reason, without that text.)
func (x *Exchange) Failure(err error) (status int, reason, text string) {
	if errors.Is(err, ErrParentAuth) && x.parent != nil {
		return 502, accesslog.ReasonParentAuth, "parent proxy " + x.parent.Name() + " refused rustle's credentials"
	}
	if errors.Is(err, ErrHTTP11Required) {
		return 502, accesslog.ReasonHTTP11Required, "origin " + x.Target() + " asked for HTTP/1.1 (HTTP_1_1_REQUIRED) for a request rustle could not send again; it is spoken HTTP/1.1 to from now on: send the request again"
	}
	status, reason, text = Failure(err, x.Target())
	if x.tlsName != "" && !x.upH2 && (errors.Is(err, errUpstreamClosed) || errors.Is(err, io.EOF)) {
		text += " (rustle speaks HTTP/1.1 to an origin that does not choose h2 by ALPN: one that speaks HTTP/2 without announcing it cannot be intercepted)"
	}
	return status, reason, text
}

// Failure says how an HTTP front-end answers a request whose upstream
// (target, as the answer names it) failed before any of its response
// reached the client: a tunnel's or a flow's dial, or an exchange. It
// returns the status, the access log's reason ("" when the grant noted
// it already, as for a dial), and a one-line, client-safe text. It is the
// one mapping every HTTP front-end answers with:
//
//   - a dial refused or failed: as gate.DialKind classifies it (403 for a
//     destination not allowed, 504 for a timeout, 502 otherwise), with the
//     dialer's reason;
//   - no response in time: 504, timed-out;
//   - an upstream that closed without a response, answered what does not
//     parse, a head too large, an unasked 101 or a transfer coding other
//     than chunked: 502, upstream-failed.
func Failure(err error, target string) (status int, reason, text string) {
	var de *dialer.Error
	var ne net.Error
	var te *TLSError
	switch {
	case errors.As(err, &te):
		return 502, accesslog.ReasonOriginTLS, "TLS with origin " + target + " failed: " + te.Why()
	case errors.Is(err, ErrTLSUpgrade):
		return 502, accesslog.ReasonUpstreamFailed, "a WebSocket over HTTP/2 cannot be relayed to a TLS origin; use HTTP/1.1"
	case errors.As(err, &de):
		return gate.DialKind(err).Status(), "", de.Reason()
	case errors.As(err, &ne) && ne.Timeout():
		return 504, accesslog.ReasonTimedOut, "upstream " + target + " did not answer in time"
	case errors.Is(err, errUpstreamClosed), errors.Is(err, errUpstreamCut),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return 502, accesslog.ReasonUpstreamFailed, "upstream " + target + " closed the connection without a response"
	case errors.Is(err, ErrResponseTooLarge):
		return 502, accesslog.ReasonUpstreamFailed, "upstream response head too large"
	case errors.Is(err, ErrUnexpected101):
		return 502, accesslog.ReasonUpstreamFailed, "upstream switched protocols without an upgrade request"
	case errors.Is(err, http1.ErrTransferCoding):
		return 502, accesslog.ReasonUpstreamFailed, "upstream used a transfer coding other than chunked"
	case isParseError(err):
		return 502, accesslog.ReasonUpstreamFailed, "malformed response from upstream " + target
	}
	return 502, accesslog.ReasonUpstreamFailed, "upstream " + target + " failed: connection error"
}

// isParseError reports whether err is a response head that does not
// parse.
func isParseError(err error) bool {
	var pe *http1.ParseError
	return errors.As(err, &pe) || errors.Is(err, http1.ErrBadStatusLine) || errors.Is(err, http1.ErrBadResponseHead)
}
