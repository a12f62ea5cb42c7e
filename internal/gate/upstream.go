package gate

import (
	"errors"
	"io"
	"net"
	"strings"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/http1"
)

// UpstreamFailure says how a front-end answers an upstream exchange that
// failed before any of its response reached the client: the status, the
// access log's reason ("" when Dial has set it already), and a one-line,
// client-safe text naming target. A failed dial is answered as DialKind
// says, with the dialer's reason; a timeout with 504; an origin that
// closed the connection, answered what could not be parsed, or in a
// transfer coding other than chunked (http1.ErrTransferCoding), with 502.
func UpstreamFailure(err error, target string) (status int, reason, text string) {
	var de *dialer.Error
	var ne net.Error
	switch {
	case errors.As(err, &de):
		return DialKind(err).Status(), "", de.Reason()
	case errors.As(err, &ne) && ne.Timeout():
		return 504, accesslog.ReasonTimedOut, "upstream " + target + " did not answer in time"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return 502, accesslog.ReasonUpstreamFailed, "upstream " + target + " closed the connection without a response"
	case errors.Is(err, http1.ErrTransferCoding):
		return 502, accesslog.ReasonUpstreamFailed, strings.TrimPrefix(http1.ErrTransferCoding.Error(), "http1: ")
	}
	return 502, accesslog.ReasonUpstreamFailed, "malformed response from upstream " + target
}
