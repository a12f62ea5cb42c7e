package accesslog

import (
	"net/netip"
	"strconv"
	"time"
)

// httpStatus returns the HTTP status r stands for (see
// [Record.HTTPStatus]); 0 when nothing was answered.
func httpStatus(r *Record) int {
	switch {
	case r.HTTPStatus != 0:
		return r.HTTPStatus
	case r.Protocol.socks():
		return 0
	}
	return r.Status
}

// socks reports whether p is one of the SOCKS protocols, whose Status is
// a reply code rather than an HTTP status.
func (p Protocol) socks() bool {
	return p == ProtoSOCKS5 || p == ProtoSOCKS5UDP || p == ProtoSOCKS4
}

// tunnel reports whether r is a tunnel or a relay of datagrams rather
// than a request rustle forwarded: CONNECT and CONNECT-UDP on any HTTP
// version, and every SOCKS exchange. A WebSocket upgrade is a request
// (Squid logs it TCP_MISS/101).
func (r *Record) tunnel() bool {
	return r.Protocol.socks() || r.Method == "CONNECT" || r.Method == "CONNECT-UDP"
}

// Squid's result codes (the %Ss of its logformat): how rustle handled the
// request, in the words of Squid's LogTags. The suffixes _ABORTED and
// _TIMEDOUT are appended to them by squidCode.
const (
	squidMiss   = "TCP_MISS"   // a request forwarded to its origin or a parent
	squidTunnel = "TCP_TUNNEL" // a CONNECT, CONNECT-UDP or SOCKS relay
	squidDenied = "TCP_DENIED" // refused by policy or for its credentials
	squidNone   = "NONE_NONE"  // refused before it became a request
)

// squidOutcome is how squidCode and squidError classify a reason.
type squidOutcome uint8

const (
	outcomeServed   squidOutcome = iota // TCP_MISS or TCP_TUNNEL
	outcomeDenied                       // TCP_DENIED
	outcomeInvalid                      // NONE_NONE
	outcomeUpstream                     // TCP_MISS or TCP_TUNNEL with an error
	outcomeEnded                        // cut short (_ABORTED), or refused
)

// squidReason is what a Reason maps to in Squid's words: its outcome,
// whether Squid would add _TIMEDOUT, and the ERR_ page Squid would have
// answered with (its %err_code).
type squidReason struct {
	outcome  squidOutcome
	timedOut bool
	err      string
}

// squidReasons maps every Reason to Squid's words. docs/operations.md
// has the same table.
var squidReasons = map[string]squidReason{
	ReasonAuthMissing:        {outcomeDenied, false, "ERR_CACHE_ACCESS_DENIED"},
	ReasonAuthFailed:         {outcomeDenied, false, "ERR_CACHE_ACCESS_DENIED"},
	ReasonAuthUnavailable:    {outcomeDenied, false, "ERR_CACHE_ACCESS_DENIED"},
	ReasonCoolingDown:        {outcomeDenied, false, "ERR_ACCESS_DENIED"},
	ReasonUserLimit:          {outcomeDenied, false, "ERR_ACCESS_DENIED"},
	ReasonDenied:             {outcomeDenied, false, "ERR_ACCESS_DENIED"},
	ReasonForbidden:          {outcomeDenied, false, "ERR_ACCESS_DENIED"},
	ReasonQuota:              {outcomeEnded, false, "ERR_ACCESS_DENIED"},
	ReasonRevoked:            {outcomeEnded, false, "ERR_ACCESS_DENIED"},
	ReasonDrained:            {outcomeEnded, false, "ERR_SHUTTING_DOWN"},
	ReasonBodyTimeout:        {outcomeServed, true, "ERR_READ_TIMEOUT"},
	ReasonOverloaded:         {outcomeInvalid, false, "ERR_GATEWAY_FAILURE"},
	ReasonBadRequest:         {outcomeInvalid, false, "ERR_INVALID_REQ"},
	ReasonSmuggling:          {outcomeInvalid, false, "ERR_INVALID_REQ"},
	ReasonProtocol:           {outcomeInvalid, false, "ERR_INVALID_REQ"},
	ReasonHeadTooLarge:       {outcomeInvalid, false, "ERR_TOO_BIG"},
	ReasonHeadTimeout:        {outcomeInvalid, true, "ERR_REQUEST_PARSE_TIMEOUT"},
	ReasonTLSHandshake:       {outcomeInvalid, false, "ERR_SECURE_ACCEPT_FAIL"},
	ReasonNotTLS:             {outcomeInvalid, false, "ERR_PROTOCOL_UNKNOWN"},
	ReasonNotSOCKS:           {outcomeInvalid, false, "ERR_PROTOCOL_UNKNOWN"},
	ReasonTLSToPlainPort:     {outcomeInvalid, false, "ERR_PROTOCOL_UNKNOWN"},
	ReasonUnreachable:        {outcomeUpstream, false, "ERR_CONNECT_FAIL"},
	ReasonTimedOut:           {outcomeUpstream, true, "ERR_READ_TIMEOUT"},
	ReasonUpstreamFailed:     {outcomeUpstream, false, "ERR_INVALID_RESP"},
	ReasonDNSFailed:          {outcomeUpstream, false, "ERR_DNS_FAIL"},
	ReasonNoSource:           {outcomeUpstream, false, "ERR_CONNECT_FAIL"},
	ReasonParentUnreachable:  {outcomeUpstream, false, "ERR_CONNECT_FAIL"},
	ReasonParentTimedOut:     {outcomeUpstream, true, "ERR_CONNECT_FAIL"},
	ReasonParentAuth:         {outcomeUpstream, false, "ERR_CANNOT_FORWARD"},
	ReasonParentRefused:      {outcomeUpstream, false, "ERR_CANNOT_FORWARD"},
	ReasonNoParent:           {outcomeUpstream, false, "ERR_CANNOT_FORWARD"},
	ReasonLoop:               {outcomeDenied, false, "ERR_ACCESS_DENIED"},
	ReasonSNIMismatch:        {outcomeDenied, false, "ERR_CONFLICT_HOST"},
	ReasonAuthzDenied:        {outcomeDenied, false, "ERR_ACCESS_DENIED"},
	ReasonAuthzUnavailable:   {outcomeDenied, false, "ERR_ACCESS_DENIED"},
	ReasonNotInterceptable:   {outcomeDenied, false, "ERR_PROTOCOL_UNKNOWN"},
	ReasonClientRejectedCert: {outcomeInvalid, false, "ERR_SECURE_ACCEPT_FAIL"},
	ReasonOriginTLS:          {outcomeUpstream, false, "ERR_SECURE_CONNECT_FAIL"},
	ReasonMisdirected:        {outcomeInvalid, false, "ERR_CONFLICT_HOST"},
	ReasonHTTP11Required:     {outcomeUpstream, false, "ERR_PROTOCOL_UNKNOWN"},
	ReasonNotRedirected:      {outcomeInvalid, false, "ERR_INVALID_REQ"},
}

// appendSquidCode appends Squid's result code for r (its %Ss): TCP_MISS
// or TCP_TUNNEL for what rustle served or tried to, TCP_DENIED for a
// refusal by policy or for credentials, NONE_NONE for what was refused
// before it became a request, with _TIMEDOUT for a timeout and _ABORTED
// for what rustle cut short (a drain; a revocation or a byte quota once
// answered, which before are TCP_DENIED). A reason it does not know
// counts as served.
func appendSquidCode(b []byte, r *Record) []byte {
	base := squidMiss
	if r.tunnel() {
		base = squidTunnel
	}
	sr := squidReasons[r.Reason]
	aborted := false
	switch sr.outcome {
	case outcomeDenied:
		base = squidDenied
	case outcomeInvalid:
		base = squidNone
	case outcomeEnded:
		// A quota spent or a user removed before the request was
		// answered is a refusal; after, and a drain, a cut.
		if status := httpStatus(r); r.Reason != ReasonDrained && (status == 0 || status >= 400) {
			base = squidDenied
		} else {
			aborted = true
		}
	}
	b = append(b, base...)
	if sr.timedOut {
		b = append(b, "_TIMEDOUT"...)
	}
	if aborted {
		b = append(b, "_ABORTED"...)
	}
	return b
}

// squidError returns the name of the error page Squid would have
// answered r with (its %err_code), or "-" when r was served.
func squidError(r *Record) string {
	if sr, ok := squidReasons[r.Reason]; ok {
		return sr.err
	}
	return "-"
}

// appendSquidHierarchy appends Squid's hierarchy code and the address
// rustle connected to (Squid's %Sh/%<a): HIER_DIRECT/IP, or
// FIRST_UP_PARENT/IP through a parent, or HIER_NONE/- when it connected
// nowhere. The address is the IP alone, as Squid writes it.
func appendSquidHierarchy(b []byte, r *Record) []byte {
	switch {
	case !r.Upstream.IsValid():
		return append(b, "HIER_NONE/-"...)
	case r.Parent != "":
		b = append(b, "FIRST_UP_PARENT/"...)
	default:
		b = append(b, "HIER_DIRECT/"...)
	}
	return r.Upstream.Addr().Unmap().AppendTo(b)
}

// appendSquid appends r as a line of [FormatSquid], without the newline.
func appendSquid(b []byte, r *Record) []byte {
	d := max(r.Duration, 0)
	b = appendUnixMillis(b, r.Time.Add(d), 9)
	b = append(b, ' ')
	b = appendPadded(b, d.Milliseconds(), 6)
	b = append(b, ' ')
	b = appendIP(b, r.Client)
	b = append(b, ' ')
	b = appendSquidCode(b, r)
	b = append(b, '/')
	b = appendStatus3(b, httpStatus(r))
	b = append(b, ' ')
	b = strconv.AppendInt(b, max(r.BytesDown, 0), 10)
	b = append(b, ' ')
	if r.Method == "" {
		b = append(b, "NONE"...)
	} else {
		b = appendPercent(b, r.Method, escURL)
	}
	b = append(b, ' ')
	b = appendPercent(b, r.Target, escURL)
	b = append(b, ' ')
	if r.User == "-" {
		b = append(b, "%2D"...)
	} else {
		b = appendPercent(b, r.User, escSquidUser)
	}
	b = append(b, ' ')
	b = appendSquidHierarchy(b, r)
	return append(b, " -"...)
}

var (
	// escURL is what Squid's lines escape in a method and URL: the bytes
	// outside '!'..'~' (a '%' stays: the URL's own escapes are kept).
	escURL = escapeSet("")
	// escSquidUser is what they escape in a user name, as Squid's
	// custom encoding does, and a space, which Squid leaves.
	escSquidUser = escapeSet(`%[]\`)
)

const upperHex = "0123456789ABCDEF"

// appendPercent appends s with every byte of esc written %HH; "" is
// written "-".
func appendPercent(b []byte, s string, esc *escapes) []byte {
	if s == "" {
		return append(b, '-')
	}
	start := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; esc[c] {
			b = append(b, s[start:i]...)
			b = append(b, '%', upperHex[c>>4], upperHex[c&0xf])
			start = i + 1
		}
	}
	return append(b, s[start:]...)
}

// appendUnixMillis appends t as Unix seconds with three decimals, the
// seconds right-aligned in width columns.
func appendUnixMillis(b []byte, t time.Time, width int) []byte {
	ms := t.UnixMilli()
	sec, frac := ms/1000, ms%1000
	if frac < 0 {
		sec, frac = sec-1, frac+1000
	}
	b = appendPadded(b, sec, width)
	return append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
}

// appendPadded appends n right-aligned in width columns, as printf's %*d.
func appendPadded(b []byte, n int64, width int) []byte {
	var digits [20]byte
	s := strconv.AppendInt(digits[:0], n, 10)
	for range width - len(s) {
		b = append(b, ' ')
	}
	return append(b, s...)
}

// appendStatus3 appends status in at least three digits, as printf's
// %03d.
func appendStatus3(b []byte, status int) []byte {
	if status >= 0 && status < 100 {
		b = append(b, '0')
		if status < 10 {
			b = append(b, '0')
		}
	}
	return strconv.AppendInt(b, int64(status), 10)
}

// appendIP appends a's address without its port, an IPv4-mapped IPv6
// address as IPv4, or "-" for the zero AddrPort.
func appendIP(b []byte, a netip.AddrPort) []byte {
	if !a.IsValid() {
		return append(b, '-')
	}
	return a.Addr().Unmap().AppendTo(b)
}
