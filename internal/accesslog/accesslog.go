// Package accesslog writes rustle's access log: one line per HTTP request,
// CONNECT or SOCKS tunnel, or SOCKS UDP association, as JSON lines, as a
// compact positional text format, in the formats other tools read
// (Squid's native access.log, NCSA Common and Combined), or by an
// operator's template over the record's fields.
//
// The data path never waits for the log. [Logger.Log] copies a [Record]
// into a slot of a fixed pool and hands it to one writer goroutine through
// a bounded queue; when every slot is taken (a slow disk, a stalled pipe on
// standard output) the record is dropped and counted ([Logger.Dropped])
// instead. The writer formats queued records in batches and writes each
// batch with one write call, so a busy proxy makes few system calls.
//
// A log written to a file is reopened by [Logger.Reopen], which rustle
// calls on SIGUSR1: logrotate renames the file, then signals, and the next
// lines go to a new file at the configured path.
package accesslog

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Protocol is what a logged request or tunnel spoke to rustle.
type Protocol uint8

// The protocols of a [Record]. The zero Protocol is logged as "-".
const (
	// ProtoHTTP is a plain HTTP request (absolute-form, any method but
	// CONNECT).
	ProtoHTTP Protocol = iota + 1
	// ProtoConnect is an HTTP CONNECT tunnel.
	ProtoConnect
	// ProtoWebSocket is an HTTP/1.1 request upgraded to WebSocket and
	// relayed as a tunnel.
	ProtoWebSocket
	// ProtoH2 is a request or tunnel carried in an HTTP/2 stream.
	ProtoH2
	// ProtoSOCKS5 is a SOCKS5 CONNECT tunnel.
	ProtoSOCKS5
	// ProtoSOCKS5UDP is a SOCKS5 UDP association.
	ProtoSOCKS5UDP
	// ProtoSOCKS4 is a SOCKS4 or SOCKS4a CONNECT tunnel.
	ProtoSOCKS4
	// ProtoH3 is a request, tunnel or CONNECT-UDP flow carried in an
	// HTTP/3 stream.
	ProtoH3
	// ProtoTransparent is a connection the kernel redirected to a
	// transparent listener: an HTTP request on it (its method, and the
	// URL its Host and path make), or the tunnel it became (method
	// CONNECT, target the TLS server name or the original destination,
	// and its port).
	ProtoTransparent
)

var protoNames = [...]string{
	ProtoHTTP:      "http",
	ProtoConnect:   "connect",
	ProtoWebSocket: "websocket",
	ProtoH2:        "h2",
	ProtoSOCKS5:    "socks5",
	ProtoSOCKS5UDP: "socks5-udp",
	ProtoSOCKS4:    "socks4",
	ProtoH3:        "h3",

	ProtoTransparent: "transparent",
}

// String returns the protocol's name as logged: "http", "connect",
// "websocket", "h2", "socks5", "socks5-udp", "socks4", "h3",
// "transparent", or "-" for the zero value and unknown values.
func (p Protocol) String() string {
	if int(p) < len(protoNames) && protoNames[p] != "" {
		return protoNames[p]
	}
	return "-"
}

// Record is one access log entry. Every field may be left zero; a zero
// field is logged as "-" in the text format and as "" or 0 in JSON.
//
// [Logger.Log] copies the record, strings included, before it returns, so
// the caller may reuse the Record and the memory its strings point to at
// once (strings made with unsafe.String over a reused buffer are fine).
type Record struct {
	// Time is when the request or tunnel started; zero means the time Log
	// is called.
	Time time.Time
	// Listener is the name of the listener that accepted the client.
	Listener string
	// Client is the client's address (after PROXY protocol, when used).
	Client netip.AddrPort
	// User is the authenticated user name; for a refusal of wrong
	// credentials or a cool-down, the user name they tried (never the
	// password); "" when there was no authentication, or credentials
	// that named no user (another scheme, undecodable).
	User string
	// Protocol is what the client spoke.
	Protocol Protocol
	// Method is the HTTP method ("GET", "CONNECT"); for SOCKS, "CONNECT"
	// or "UDP ASSOCIATE" (text lines write its space \x20), "BIND" for
	// a refused SOCKS4 BIND, and "" for a SOCKS5 exchange refused before
	// any request (a failed login, a greeting without an acceptable
	// method), whose Target is "" too.
	Method string
	// Target is the request target: an absolute URL for plain HTTP, or
	// host:port for tunnels and SOCKS.
	Target string
	// Status is the HTTP status sent to the client; for SOCKS, the reply
	// code (0 is success; SOCKS4's 90-93), or for a SOCKS5 exchange
	// refused before any request what was sent instead: the RFC 1929
	// status (1) of a failed login, 255 (no acceptable method) for a
	// greeting. Zero when no response was sent.
	Status int
	// HTTPStatus is the HTTP status Status stands for, which the squid,
	// common and combined formats write: for SOCKS, the status whose
	// class the metrics count the reply in (200 for a success, 403 for
	// a destination not allowed, 407 for refused credentials). Zero
	// means Status itself on every protocol but SOCKS, and nothing
	// answered on SOCKS. The JSON and text formats do not write it.
	HTTPStatus int
	// BytesUp is, on every protocol, the payload rustle wrote to the
	// upstream: the content of the request body (without chunked or
	// HTTP/2 framing), or what a tunnel carried from the client; heads,
	// trailers and rustle's own answers never count, nor bytes read but
	// not written.
	BytesUp int64
	// BytesDown is, on every protocol, the payload rustle wrote to the
	// client: the content of the response body (without chunked or
	// HTTP/2 framing), or what a tunnel carried from the upstream; heads,
	// trailers and rustle's own answers never count, nor bytes read but
	// not written.
	BytesDown int64
	// Duration is how long the request or tunnel lasted.
	Duration time.Duration
	// Upstream is the address rustle connected to; zero when it did not
	// connect.
	Upstream netip.AddrPort
	// Rule names the ACL rule that decided the request; "" when none did.
	Rule string
	// Reason says why rustle refused the request or ended it before its
	// time, one of the Reason constants; "" when it was served and ended
	// as its client or upstream made it. Text lines carry it as the 14th
	// field when it or a later optional field (Source, Route, Parent) is
	// set, "-" when unset; JSON lines as "reason", only when it is set.
	Reason string
	// Source is the local address of the upstream connection when an
	// egress source chose it ([egress] bind, bind_same, a prefix or an
	// interface); zero otherwise. Text lines carry it as the 15th field
	// when it, Route or Parent is set, "-" when unset; JSON lines as
	// "source", only when it is set.
	Source netip.AddrPort
	// Route names the route (see package route) that chose how the
	// request reached its destination; "" when no route matched (direct).
	// Text lines carry Route and Parent as the 16th and 17th fields, only
	// when one of them is set ("-" for the unset one); JSON lines as
	// "route" and "parent", each only when it is set.
	Route string
	// Parent names the parent proxy the request or tunnel went through;
	// "" when it went direct.
	Parent string
	// WouldDeny names the access rule that would have refused the
	// request and let it through because it is a report rule or its
	// policy is in audit mode ("default" for a default of deny); ""
	// when no rule would have refused it. Text lines carry it as the
	// 18th field, only when it is set (the fields before it "-" when
	// unset); JSON lines as "would_deny", only when it is set. The squid,
	// common and combined formats have no place for it: a template adds
	// it to them ("{squid} {would_deny}").
	WouldDeny string
	// SNI is what the SNI check read of a tunnel's first client bytes
	// (listen.sni or a rule's sni "log" or "match", or a rule on
	// sni_hosts): the server_name of its TLS ClientHello, or, in
	// brackets, why there is none: [no-sni] (a ClientHello without
	// one), [not-tls] (the first bytes were no TLS handshake, or an
	// SSLv2-style hello), [malformed], [too-large] (over the reader's
	// 16 KiB), [incomplete] (the client closed or timed out before the
	// hello was whole). "" when nothing was read: another protocol, or
	// the check off. Text lines carry it as the 19th field, only when it
	// is set (the optional fields before it "-" when unset); JSON lines
	// as "sni", only when it is set; templates as {sni}. The squid,
	// common and combined formats, whose fields are fixed, do not carry
	// it.
	SNI string
	// Intercepted says the record is of a tunnel whose TLS rustle
	// intercepted (see package intercept), or of a request inside one
	// (its Target an https URL). Text lines carry "intercepted" as the
	// 20th field, only when it is set (the optional fields before it "-"
	// when unset); JSON lines as "intercepted": true, only when it is
	// set; templates as {intercepted} ("intercepted", or "-").
	Intercepted bool
	// Original is the destination a transparent listener's client
	// connected to before the kernel redirected the connection (see
	// ProtoTransparent); zero for every other protocol. Text lines carry
	// it as the 21st field, only when it is set (the optional fields before
	// it "-" when unset); JSON lines as "orig_dst", only when it
	// is set; templates as {orig_dst}. The squid, common and combined
	// formats name the host the client gave (Target) and, in Squid's
	// hierarchy field, the address rustle connected to (Upstream):
	// a template adds it to them ("{squid} {orig_dst}").
	Original netip.AddrPort
}

// The reasons of a [Record]: short, fixed words an operator can grep
// for. A refusal's status says what the client was answered.
const (
	// ReasonRevoked: a reload removed the request's or tunnel's user.
	ReasonRevoked = "revoked"
	// ReasonAuthMissing: the request carried no credentials on a port
	// that requires them (the usual first 407 challenge).
	ReasonAuthMissing = "auth-missing"
	// ReasonAuthFailed: the credentials were wrong; User is the name
	// tried (never the password).
	ReasonAuthFailed = "auth-failed"
	// ReasonAuthUnavailable: an identity provider that might have
	// accepted the credentials (a directory, a token issuer's key set)
	// could not be asked, and none accepted them: 503, not a 407 the
	// client would answer with the same credentials, and not a failed
	// authentication. User is the name tried.
	ReasonAuthUnavailable = "auth-unavailable"
	// ReasonCoolingDown: the client's address, or the user name tried
	// (User) at that address, is cooling down after failed
	// authentications; the credentials were not checked (or their
	// failure started the cool-down).
	ReasonCoolingDown = "cooling-down"
	// ReasonUserLimit: the user has too many connections.
	ReasonUserLimit = "user-limit"
	// ReasonQuota: the user's quota of bytes or requests for the period
	// is spent: the request was refused, or the tunnel ended when it
	// crossed the byte quota.
	ReasonQuota = "quota"
	// ReasonOverloaded: rustle holds as many connections as
	// limits.max_connections allows (503).
	ReasonOverloaded = "overloaded"
	// ReasonDenied: an access rule (Rule) refused the request.
	ReasonDenied = "denied"
	// ReasonForbidden: the destination address is not allowed (the
	// private-destination guard, or a rule once the name resolved).
	ReasonForbidden = "forbidden"
	// ReasonUnreachable: the upstream could not be reached.
	ReasonUnreachable = "unreachable"
	// ReasonTimedOut: the upstream did not answer in time.
	ReasonTimedOut = "timed-out"
	// ReasonUpstreamFailed: the upstream closed the connection without
	// a response, or answered one rustle refuses to relay (malformed,
	// too large a head, a transfer coding it cannot frame): 502.
	ReasonUpstreamFailed = "upstream-failed"
	// ReasonBadRequest: the request was malformed (400).
	ReasonBadRequest = "bad-request"
	// ReasonHeadTooLarge: the request head exceeded the limit (431).
	ReasonHeadTooLarge = "head-too-large"
	// ReasonHeadTimeout: the client began a request head but did not
	// finish it within the read-header timeout (408). A connection that
	// sends nothing, or stays idle between requests, is closed without a
	// record.
	ReasonHeadTimeout = "head-timeout"
	// ReasonBodyTimeout: the client stopped sending its request body:
	// none of it came for the write timeout (408, or on HTTP/2 a reset
	// stream once the response had begun).
	ReasonBodyTimeout = "body-timeout"
	// ReasonSmuggling: the request's framing was ambiguous (conflicting
	// Content-Length and Transfer-Encoding, and the like) and refused.
	ReasonSmuggling = "smuggling"
	// ReasonTLSHandshake: the TLS handshake with the client failed.
	ReasonTLSHandshake = "tls-handshake"
	// ReasonNotTLS: a client spoke plain HTTP (or anything but TLS) to a
	// TLS port.
	ReasonNotTLS = "not-tls"
	// ReasonNotSOCKS: a client spoke neither SOCKS5 nor SOCKS4 to a
	// SOCKS port (HTTP, an http:// proxy URL for it: answered 400).
	ReasonNotSOCKS = "not-socks"
	// ReasonTLSToPlainPort: a client began a TLS handshake on a port
	// that speaks plain HTTP (an https:// proxy URL for an http or mixed
	// listener); it was answered with a TLS handshake_failure alert.
	ReasonTLSToPlainPort = "tls-to-plain-port"
	// ReasonProtocol: the client broke its protocol (an HTTP/2
	// protocol error).
	ReasonProtocol = "protocol"
	// ReasonDrained: rustle's shutdown (drain) ended the request or tunnel.
	ReasonDrained = "drained"
	// ReasonDNSFailed: the destination's name could not be resolved: no
	// such name, or no configured resolver answered (502).
	ReasonDNSFailed = "dns-failed"
	// ReasonNoSource: the egress configuration has no source address of
	// the destination's address family (502).
	ReasonNoSource = "no-source"
	// ReasonParentUnreachable: the route's parent proxy (Parent) could
	// not be connected to, or broke its handshake (502).
	ReasonParentUnreachable = "parent-unreachable"
	// ReasonParentTimedOut: the parent did not finish its handshake
	// within its connect timeout (504).
	ReasonParentTimedOut = "parent-timed-out"
	// ReasonParentAuth: the parent refused rustle's credentials for it
	// (502).
	ReasonParentAuth = "parent-auth-failed"
	// ReasonParentRefused: the parent refused to connect to the
	// destination, or answered in another protocol (502).
	ReasonParentRefused = "parent-refused"
	// ReasonNoParent: every parent of the route (Route) is down and the
	// route does not fall back to direct (502).
	ReasonNoParent = "no-parent"
	// ReasonLoop: the request came back to this rustle through a parent
	// (it named this rustle in Via, or its connection was the other end
	// of one of rustle's own parent handshakes): refused 508 (SOCKS5:
	// not allowed); or a parent answered a CONNECT 508, which rustle
	// answers 508 too.
	ReasonLoop = "loop"
	// ReasonSNIMismatch: the SNI check (sni = "match") closed a tunnel
	// before any byte of it reached the origin: its ClientHello named
	// another host than the tunnel's (SNI, Target), or none where the
	// tunnel named a host, or its first bytes were no ClientHello; for a
	// tunnel to an IP address, the rules refused the name its hello
	// gave. The client had been answered (200, SOCKS success): its
	// hello comes only after the answer.
	ReasonSNIMismatch = "sni-mismatch"
	// ReasonClientRejectedCert: rustle intercepted the tunnel (see
	// package intercept) and its client refused the certificate rustle
	// minted (a TLS alert during the handshake: a client that does not
	// trust rustle's CA, or pins the origin's key). Nothing reached the
	// origin; to let such a client through, list its host in
	// intercept.bypass.
	ReasonClientRejectedCert = "client-rejected-certificate"
	// ReasonNotInterceptable: an interception rule names the tunnel, and
	// its first bytes were no TLS ClientHello rustle could intercept: the
	// tunnel was closed before any byte reached the origin.
	ReasonNotInterceptable = "not-interceptable"
	// ReasonOriginTLS: a request inside an intercepted tunnel could not
	// be sent: the TLS handshake with the origin failed (a certificate
	// the system roots or intercept.upstream_ca do not verify for the
	// name, expired or self-signed; no protocol in common): 502 with the
	// reason.
	ReasonOriginTLS = "origin-tls"
	// ReasonMisdirected: a request inside an intercepted tunnel named
	// another host (Host, :authority) than the one the tunnel's
	// certificate was minted for: 421.
	ReasonMisdirected = "misdirected"
	// ReasonHTTP11Required: the origin answered an HTTP/2 or HTTP/3
	// client's request with a 401 offering NTLM or Negotiate, which
	// authenticate the connection: rustle reset the stream with
	// HTTP_1_1_REQUIRED (H3_VERSION_FALLBACK) rather than relay it, so
	// that the client retries over HTTP/1.1, whose client connection
	// keeps one upstream; or an origin spoken HTTP/2 to reset the
	// request's stream so itself and the request could not be sent
	// again over HTTP/1.1: status 0 (the stream reset so in turn), 502
	// to an HTTP/1.1 client.
	ReasonHTTP11Required = "http-1.1-required"
	// ReasonNotRedirected: a connection to a transparent listener had no
	// original destination (it was not redirected: the conntrack has
	// none, or it names one of rustle's own listening addresses), and
	// was closed unanswered.
	ReasonNotRedirected = "not-redirected"
	// ReasonAuthzDenied: the decision service ([authz]) refused the
	// request the access rules allowed (Rule names the rule that did):
	// 403 (SOCKS5: not allowed), or, for a tunnel decided with its
	// ClientHello, closed after its answer as for sni-mismatch.
	ReasonAuthzDenied = "authz-denied"
	// ReasonAuthzUnavailable: the decision service could not decide the
	// request (down, too slow, every call busy, an answer that is none)
	// and authz.on_error is "deny": 503 (SOCKS5: not allowed), or a
	// tunnel closed after its answer.
	ReasonAuthzUnavailable = "authz-unavailable"
)

// Format is an access log line format.
type Format string

// The formats a [Logger] writes.
const (
	// FormatText is the compact positional format, one line per record,
	// fields separated by one space in the order of [Record]'s fields:
	//
	//	TIME LISTENER CLIENT USER PROTOCOL METHOD TARGET STATUS UP DOWN DURATION_MS UPSTREAM RULE [REASON [SOURCE [ROUTE PARENT [WOULD_DENY [SNI [INTERCEPTED [ORIG_DST]]]]]]]
	//
	// Empty fields are "-"; bytes outside '!'..'~', '\' and a value of
	// exactly "-" are escaped as \xHH, so a field never holds a space and
	// every line splits into exactly 13 fields, 14 when the record has
	// a Reason, 15 when it has a Source, 17 when it has a Route or a
	// Parent, 18 when it has a WouldDeny, 19 when it has an SNI, or 20
	// when it is Intercepted or has an Original (each
	// optional field before the last one set is then "-" when unset).
	FormatText Format = "text"
	// FormatJSON writes one JSON object per line with the keys time,
	// listener, client, user, protocol, method, target, status, bytes_up,
	// bytes_down, duration_ms, upstream and rule, always all of them,
	// and reason, source, route, parent, would_deny, sni, intercepted
	// (true) and orig_dst when the record has them.
	// Invalid UTF-8 is replaced by U+FFFD.
	FormatJSON Format = "json"
	// FormatSquid is Squid's native access.log format, field for field
	// (Squid's logformat "squid": %ts.%03tu %6tr %>a %Ss/%03>Hs %<st %rm
	// %ru %[un %Sh/%<a %mt), ten fields separated by spaces (the elapsed
	// time right-aligned in six columns):
	//
	//	END_TIME ELAPSED_MS CLIENT_IP SQUID_CODE/STATUS BYTES METHOD URL USER HIERARCHY/UPSTREAM_IP CONTENT_TYPE
	//
	// END_TIME is the Unix time the request or tunnel ended, with
	// milliseconds, as Squid writes it; STATUS is [Record.HTTPStatus] in
	// three digits (000 when nothing was answered); SQUID_CODE is
	// rustle's reason mapped to Squid's result codes (TCP_MISS,
	// TCP_TUNNEL, TCP_DENIED, NONE_NONE, with _ABORTED or _TIMEDOUT);
	// BYTES is BytesDown; METHOD is NONE when the record has none;
	// HIERARCHY is HIER_DIRECT, FIRST_UP_PARENT through a parent, or
	// HIER_NONE/- when rustle connected nowhere; CONTENT_TYPE is always
	// "-". Bytes outside '!'..'~' in the method and URL, and those and
	// '%', '[', ']', '\' in the user, are written %HH, so every line
	// splits into exactly ten fields on whitespace.
	FormatSquid Format = "squid"
	// FormatCommon is the NCSA Common Log Format (Apache's "%h %l %u %t
	// "%r" %>s %b"):
	//
	//	CLIENT_IP - USER [02/Jan/2006:15:04:05 +0000] "METHOD TARGET VERSION" STATUS BYTES
	//
	// with the start time in UTC, VERSION HTTP/1.1, HTTP/2.0, HTTP/3.0,
	// SOCKS5 or SOCKS4 after the protocol, the request "-" when the
	// record has neither method nor target, STATUS [Record.HTTPStatus]
	// and BYTES BytesDown, each "-" when zero. Bytes outside '!'..'~',
	// '"' and '\' (and '[' and ']' in the user) are written \xHH, as
	// Apache escapes them, so a value never holds a space or a quote.
	FormatCommon Format = "common"
	// FormatCombined is the NCSA Combined Log Format: [FormatCommon]
	// followed by the quoted Referer and User-Agent, which rustle does
	// not record: always "-" "-".
	FormatCombined Format = "combined"
	// FormatTemplate writes [Config.Template], whose {name} fields are
	// replaced by the record's values; see [TemplateFields].
	FormatTemplate Format = "template"
)

// ErrClosed is returned by [Logger.Reopen] after [Logger.Close].
var ErrClosed = errors.New("accesslog: logger closed")

// Config configures a [Logger].
type Config struct {
	// Format is the line format; "" means [FormatText].
	Format Format
	// Template is the line of [FormatTemplate] (see [TemplateFields]);
	// it must be "" for the other formats.
	Template string
	// Path is the file the log is appended to, created with mode 0640 if
	// missing; "" means Writer.
	Path string
	// Writer receives the log when Path is ""; nil means standard output.
	Writer io.Writer
	// QueueSize is the number of records that may wait for the writer;
	// past it records are dropped. 0 means 4096.
	QueueSize int
	// Logger receives the logger's own errors (a failed write or
	// reopen); nil discards them.
	Logger *slog.Logger
}

// DefaultQueueSize is the queue size used when [Config.QueueSize] is 0.
const DefaultQueueSize = 4096

// Field size limits. A longer string field is cut and ends in "...".
const (
	// MaxTargetBytes is the most bytes of Record.Target kept.
	MaxTargetBytes = 2048
	// MaxFieldBytes is the most bytes kept of each other string field.
	MaxFieldBytes = 256
)

// batchBytes is roughly how much the writer formats before it writes.
const batchBytes = 64 << 10

// Logger writes access log records asynchronously. Its methods are safe
// for concurrent use.
type Logger struct {
	format Format
	tmpl   *template // the parsed Template of FormatTemplate
	path   string
	log    *slog.Logger

	free  chan *slot // slots available to Log
	queue chan *slot // filled slots waiting for the writer

	reopenReq chan chan error
	stop      chan struct{}
	done      chan struct{} // closed when run returns

	dropped atomic.Uint64
	closed  atomic.Bool
	tap     atomic.Pointer[func(r *Record, line []byte)] // see SetTap

	closeOnce sync.Once

	// Owned by run once New returns.
	w       io.Writer
	file    *os.File // the open file when path is set; nil otherwise
	failing bool     // the last write failed
}

// slot holds one queued record. The record's string fields point into
// buf, which the slot owns.
type slot struct {
	rec Record
	buf []byte
}

// New starts a Logger. It opens Path, if set, and returns its error.
func New(cfg Config) (*Logger, error) {
	switch cfg.Format {
	case "":
		cfg.Format = FormatText
	case FormatText, FormatJSON, FormatSquid, FormatCommon, FormatCombined, FormatTemplate:
	default:
		return nil, fmt.Errorf("accesslog: unknown format %q", cfg.Format)
	}
	var tmpl *template
	switch {
	case cfg.Format == FormatTemplate:
		t, err := parseTemplate(cfg.Template)
		if err != nil {
			return nil, fmt.Errorf("accesslog: template: %w", err)
		}
		tmpl = t
	case cfg.Template != "":
		return nil, fmt.Errorf("accesslog: a template is only for format %q, not %q", FormatTemplate, cfg.Format)
	}
	n := cfg.QueueSize
	if n <= 0 {
		n = DefaultQueueSize
	}
	l := &Logger{
		format:    cfg.Format,
		tmpl:      tmpl,
		path:      cfg.Path,
		log:       cfg.Logger,
		free:      make(chan *slot, n),
		queue:     make(chan *slot, n),
		reopenReq: make(chan chan error),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		w:         cfg.Writer,
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if l.path != "" {
		f, err := openFile(l.path)
		if err != nil {
			return nil, err
		}
		l.file, l.w = f, f
	} else if l.w == nil {
		l.w = os.Stdout
	}
	slots := make([]slot, n)
	for i := range slots {
		l.free <- &slots[i]
	}
	go l.run()
	return l, nil
}

func openFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("accesslog: open %s: %w", path, err)
	}
	return f, nil
}

// Log queues a copy of r for writing and returns at once. When the queue
// is full, or the Logger is closed, the record is dropped and counted in
// [Logger.Dropped]. Log does not allocate, except to grow a slot's buffer
// the first time a slot holds a record with longer strings than before.
// On a nil Logger (the access log is off) it does nothing.
func (l *Logger) Log(r *Record) {
	if l == nil {
		return
	}
	if l.closed.Load() {
		l.dropped.Add(1)
		return
	}
	var s *slot
	select {
	case s = <-l.free:
	default:
		l.dropped.Add(1)
		return
	}
	s.fill(r)
	l.queue <- s // never blocks: there are as many places as slots
}

// fill copies r into s, its strings into s.buf.
func (s *slot) fill(r *Record) {
	user, method := clip(r.User, MaxFieldBytes), clip(r.Method, MaxFieldBytes)
	target, rule := clip(r.Target, MaxTargetBytes), clip(r.Rule, MaxFieldBytes)
	listener, wouldDeny := clip(r.Listener, MaxFieldBytes), clip(r.WouldDeny, MaxFieldBytes)
	sni := clip(r.SNI, MaxFieldBytes)
	need := len(user) + len(method) + len(target) + len(rule) + len(listener) + len(wouldDeny) + len(sni) + 7*len(ellipsis)
	if cap(s.buf) < need {
		s.buf = make([]byte, 0, max(need, 256))
	}
	s.buf = s.buf[:0]
	s.rec = *r
	if s.rec.Time.IsZero() {
		s.rec.Time = time.Now()
	}
	s.rec.User = s.keep(user, r.User)
	s.rec.Method = s.keep(method, r.Method)
	s.rec.Target = s.keep(target, r.Target)
	s.rec.Rule = s.keep(rule, r.Rule)
	s.rec.Listener = s.keep(listener, r.Listener)
	s.rec.WouldDeny = s.keep(wouldDeny, r.WouldDeny)
	s.rec.SNI = s.keep(sni, r.SNI)
}

const ellipsis = "..."

// clip returns the part of v that is kept when v is longer than limit.
func clip(v string, limit int) string {
	if len(v) > limit {
		return v[:limit-len(ellipsis)]
	}
	return v
}

// keep appends part (and an ellipsis when it was cut from orig) to s.buf
// and returns a string over the appended bytes. s.buf has room for it, so
// earlier strings stay valid.
func (s *slot) keep(part, orig string) string {
	if orig == "" {
		return ""
	}
	start := len(s.buf)
	s.buf = append(s.buf, part...)
	if len(part) < len(orig) {
		s.buf = append(s.buf, ellipsis...)
	}
	return unsafe.String(&s.buf[start], len(s.buf)-start)
}

// SetTap makes the writer call fn with each record it writes and its
// line as formatted, newline included, before the write; nil stops it.
// fn runs on the writer goroutine, never on the data path: it must be
// quick and must copy what it keeps, for the record and the line are
// reused once it returns. rustle's admin page keeps the latest records
// this way.
func (l *Logger) SetTap(fn func(r *Record, line []byte)) {
	if l == nil {
		return
	}
	if fn == nil {
		l.tap.Store(nil)
		return
	}
	l.tap.Store(&fn)
}

// Dropped returns the number of records dropped so far: those that found
// the queue full or the Logger closed, and those whose write failed.
func (l *Logger) Dropped() uint64 { return l.dropped.Load() }

// Reopen closes the log file and opens Path again, so that after
// logrotate renamed the file the next lines go to a new file. Records
// queued before Reopen are written to the old file. If the new file
// cannot be opened the old one stays in use and the error is returned.
// Reopen is a no-op for a log without a Path, and returns [ErrClosed]
// after Close.
func (l *Logger) Reopen() error {
	if l.path == "" {
		return nil
	}
	res := make(chan error, 1)
	select {
	case l.reopenReq <- res:
		return <-res
	case <-l.done:
		return ErrClosed
	}
}

// Close writes every queued record, closes the file and stops the
// writer. Records logged concurrently with Close may be dropped. Close is
// idempotent; it returns the error of closing the file, if any, from the
// first call.
func (l *Logger) Close() error {
	var err error
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		close(l.stop)
		<-l.done
		if l.file != nil {
			if cerr := l.file.Close(); cerr != nil {
				err = fmt.Errorf("accesslog: close %s: %w", l.path, cerr)
			}
		}
	})
	return err
}

// run is the writer goroutine: it formats queued records in batches and
// writes them, and serves reopen requests, until stop is closed, then
// writes what is left in the queue.
func (l *Logger) run() {
	defer close(l.done)
	buf := make([]byte, 0, batchBytes+4096)
	for {
		select {
		case s := <-l.queue:
			var n int
			buf, n = l.batch(buf[:0], s)
			l.write(buf, n)
		case res := <-l.reopenReq:
			buf = l.drain(buf)
			res <- l.reopen()
		case <-l.stop:
			l.drain(buf)
			return
		}
	}
}

// drain writes every record queued now, formatting into buf, and
// returns buf, perhaps grown.
func (l *Logger) drain(buf []byte) []byte {
	for {
		select {
		case s := <-l.queue:
			var n int
			buf, n = l.batch(buf[:0], s)
			l.write(buf, n)
		default:
			return buf
		}
	}
}

// batch formats s and then whatever else is queued, without waiting, up
// to about batchBytes, returning the slots to the free list. It returns
// the lines and how many there are.
func (l *Logger) batch(buf []byte, s *slot) ([]byte, int) {
	n := 0
	tap := l.tap.Load()
	for {
		start := len(buf)
		buf = l.appendRecord(buf, &s.rec)
		if tap != nil {
			(*tap)(&s.rec, buf[start:])
		}
		n++
		s.rec = Record{} // drop references to the caller's values
		l.free <- s
		if len(buf) >= batchBytes {
			return buf, n
		}
		select {
		case s = <-l.queue:
		default:
			return buf, n
		}
	}
}

func (l *Logger) appendRecord(buf []byte, r *Record) []byte {
	switch l.format {
	case FormatJSON:
		return appendJSON(buf, r)
	case FormatSquid:
		return append(appendSquid(buf, r), '\n')
	case FormatCommon:
		return append(appendCommon(buf, r), '\n')
	case FormatCombined:
		return append(appendCombined(buf, r), '\n')
	case FormatTemplate:
		return append(l.tmpl.append(buf, r), '\n')
	}
	return appendText(buf, r)
}

// write writes n lines in buf, counting them as dropped if the write
// fails. It logs the first failure and the recovery, not every failure.
func (l *Logger) write(buf []byte, n int) {
	_, err := l.w.Write(buf)
	switch {
	case err != nil:
		l.dropped.Add(uint64(n))
		if !l.failing {
			l.failing = true
			l.log.Warn("access log: write failed; dropping lines until a write succeeds",
				"path", l.path, "err", err)
		}
	case l.failing:
		l.failing = false
		l.log.Info("access log: writes succeed again", "path", l.path, "dropped_total", l.dropped.Load())
	}
}

// reopen opens the path again and, on success, closes the old file.
func (l *Logger) reopen() error {
	f, err := openFile(l.path)
	if err != nil {
		return err
	}
	old := l.file
	l.file, l.w = f, f
	l.failing = false
	if err := old.Close(); err != nil {
		return fmt.Errorf("accesslog: close old %s: %w", l.path, err)
	}
	return nil
}
