package origin

import (
	"net/netip"
	"strconv"

	"golang.org/x/net/http2/hpack"

	"github.com/rustle-proxy/rustle/internal/route"
)

// FieldRequest is a request as HTTP/2 and HTTP/3 carry it: the values of
// its pseudo-header fields and its regular fields, which AppendFieldHead
// turns into the HTTP/1.1 head an upstream gets.
type FieldRequest struct {
	// Method is the request method; for a WebSocket handshake
	// (WebSocketKey set) the head says GET.
	Method string
	// Authority is the target's host[:port] (:authority), sent as Host
	// (and in the absolute form to an http parent).
	Authority string
	// Path is the origin-form target (:path): "/…", or "*".
	Path string
	// Fields are the regular fields in their order, names in lower case.
	Fields []hpack.HeaderField
	// ContentLength is the body's declared length; -1 = unknown.
	ContentLength int64
	// HasBody says that a body follows the head (a stream not ended with
	// the head).
	HasBody bool
	// WebSocketKey, when not "", makes the head a WebSocket handshake
	// (RFC 6455 §4.1, for an extended CONNECT of RFC 8441 or RFC 9220)
	// with this Sec-WebSocket-Key.
	WebSocketKey string
	// ClientAddr is the client's address, for the Forwarded element.
	ClientAddr netip.Addr
	// Via is rustle's Via element for the version the request came in
	// ("2 rustle", "3 rustle"), sent when the configuration asks for Via.
	Via string
	// Major is the version the request came in (2, 3): a request sent to
	// a parent names Instance in a Via element for it, whatever the
	// configuration says, so that one that comes back is seen as a loop.
	Major int
	// Instance is the rustle a request to a parent names (see
	// route.Instance); nil = the process's default instance.
	Instance *route.Instance
	// MaxForwards replaces the client's Max-Forwards of a TRACE or
	// OPTIONS it applies to (see MaxForwards); -1 = the client's fields
	// go as they are.
	MaxForwards int
}

// AppendFieldHead appends the HTTP/1.1 request head an upstream gets for
// r: the request line in origin form (absolute form, with the parent's
// Proxy-Authorization, to parent, an http parent; nil = none), Host from
// the authority, the client's fields less hop-by-hop and proxy ones,
// cookie fields joined into one (RFC 9113 §8.2.3, RFC 9114 §4.2.1), the
// Forwarded element and Via the configuration asks for (to a parent, a
// Via naming Instance, always), Max-Forwards as r says, and the framing:
// Content-Length when the client gave one, chunked when the body's length
// is unknown (chunked reports that). The header rules h (nil = none; see
// Exchange.Headers) leave out the client's fields they drop, the
// Forwarded element too when they name its field, and add their own.
// Names go out in canonical case (content-type -> Content-Type), which
// HTTP/1.1 origins expect; a rule's as the configuration spells them.
func (c *Client) AppendFieldHead(out []byte, r *FieldRequest, parent *route.Parent, h *Headers) (_ []byte, chunked bool) {
	method := r.Method
	ws := r.WebSocketKey != ""
	if ws {
		method = "GET"
	}
	out = append(out, method...)
	out = append(out, ' ')
	out = AppendRequestTarget(out, parent, r.Authority, r.Path)
	out = append(out, " HTTP/1.1\r\nHost: "...)
	out = append(out, r.Authority...)
	out = append(out, "\r\n"...)

	fwdName := lowerForwardedName(c.cfg.Forwarded)
	var fwdValues []string
	cookies := 0
	for _, f := range r.Fields {
		if h != nil && h.DropsRequestName(f.Name) {
			continue
		}
		switch f.Name {
		case "host", "content-length", "http2-settings":
			continue
		case "cookie":
			cookies++
			continue
		case fwdName:
			fwdValues = append(fwdValues, f.Value)
			continue
		case "max-forwards":
			if r.MaxForwards >= 0 {
				continue // replaced below
			}
		}
		if HopByHop(f.Name) {
			continue
		}
		if ws {
			switch f.Name {
			case "sec-websocket-key", "sec-websocket-accept", "sec-websocket-version":
				continue
			}
		}
		out = appendField(out, f.Name, f.Value)
	}
	if cookies > 0 {
		out = append(out, "Cookie: "...)
		n := 0
		for _, f := range r.Fields {
			if f.Name != "cookie" {
				continue
			}
			if n > 0 {
				out = append(out, "; "...)
			}
			out = append(out, f.Value...)
			n++
		}
		out = append(out, "\r\n"...)
	}
	if name := ForwardedName(c.cfg.Forwarded); name != "" && r.ClientAddr.IsValid() && !h.DropsRequestName(fwdName) {
		out = append(out, name...)
		out = append(out, ": "...)
		for _, v := range fwdValues {
			out = append(out, v...)
			out = append(out, ", "...)
		}
		out = AppendForwardedFor(out, c.cfg.Forwarded, r.ClientAddr)
		out = append(out, "\r\n"...)
	}
	switch {
	case ws:
		out = append(out, "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: "...)
		out = append(out, r.WebSocketKey...)
		out = append(out, "\r\n"...)
	case r.ContentLength >= 0:
		out = append(out, "Content-Length: "...)
		out = strconv.AppendInt(out, r.ContentLength, 10)
		out = append(out, "\r\n"...)
	case r.HasBody:
		out = append(out, "Transfer-Encoding: chunked\r\n"...)
		chunked = true
	case r.Method == "POST" || r.Method == "PUT" || r.Method == "PATCH":
		out = append(out, "Content-Length: 0\r\n"...)
	}
	out = AppendMaxForwards(out, r.MaxForwards)
	out = h.AppendRequest(out)
	// Via names the version of the message as received (RFC 9110
	// §7.6.3).
	switch {
	case parent != nil:
		// To a parent, always: a request that comes back names this
		// rustle (a loop).
		out = append(out, r.Instance.ViaLine(r.Major)...)
	case c.cfg.Via && r.Via != "":
		out = append(out, "Via: "...)
		out = append(out, r.Via...)
		out = append(out, "\r\n"...)
	}
	out = AppendParentAuthorization(out, parent)
	return append(out, "\r\n"...), chunked
}

// lowerForwardedName is ForwardedName in lower case, as HTTP/2 and HTTP/3
// fields are named; "" for ForwardedNone.
func lowerForwardedName(mode string) string {
	switch mode {
	case ForwardedRFC:
		return "forwarded"
	case ForwardedXFF:
		return "x-forwarded-for"
	}
	return ""
}

// appendField appends "Name: value\r\n", the name in canonical case
// (content-type -> Content-Type).
func appendField(out []byte, name, value string) []byte {
	upper := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		if upper && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		upper = c == '-'
		out = append(out, c)
	}
	out = append(out, ": "...)
	out = append(out, value...)
	return append(out, "\r\n"...)
}
