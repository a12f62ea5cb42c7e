package admin

import (
	"bytes"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
)

// Bounds of the access log tail: the records kept, and the bytes kept
// of a line and of a target (a longer one is cut and ends in "...").
const (
	defaultTailSize = 1000
	tailLineBytes   = 1024
	tailTargetBytes = 512
)

// reasons are the access log's reasons the page counts, each with a
// counter of its own; any other counts as "other".
var reasons = [...]string{
	accesslog.ReasonRevoked, accesslog.ReasonAuthMissing, accesslog.ReasonAuthFailed,
	accesslog.ReasonAuthUnavailable, accesslog.ReasonCoolingDown, accesslog.ReasonUserLimit,
	accesslog.ReasonQuota, accesslog.ReasonOverloaded, accesslog.ReasonDenied, accesslog.ReasonForbidden,
	accesslog.ReasonUnreachable, accesslog.ReasonTimedOut, accesslog.ReasonUpstreamFailed,
	accesslog.ReasonBadRequest, accesslog.ReasonHeadTooLarge, accesslog.ReasonHeadTimeout,
	accesslog.ReasonBodyTimeout, accesslog.ReasonSmuggling, accesslog.ReasonTLSHandshake,
	accesslog.ReasonNotTLS, accesslog.ReasonNotSOCKS, accesslog.ReasonTLSToPlainPort,
	accesslog.ReasonProtocol, accesslog.ReasonDrained, accesslog.ReasonDNSFailed, accesslog.ReasonNoSource,
	accesslog.ReasonParentUnreachable, accesslog.ReasonParentTimedOut, accesslog.ReasonParentAuth,
	accesslog.ReasonParentRefused, accesslog.ReasonNoParent, accesslog.ReasonLoop,
	"other",
}

// reasonIndex maps a reason to its counter in tail.reasons.
var reasonIndex = func() map[string]int {
	m := make(map[string]int, len(reasons))
	for i, r := range reasons {
		m[r] = i
	}
	return m
}()

// tail keeps the latest access log records, as the log wrote them, and
// counts the records by reason. Its record method is the access log's
// tap: it runs on the log's writer goroutine and copies a record into a
// slot whose buffer it reuses, so that it allocates nothing once the
// slots' buffers have grown. Its memory is bounded by the slots.
type tail struct {
	reasons [len(reasons)]atomic.Uint64 // records by reason, reasons' order

	mu    sync.Mutex
	slots []tailSlot // guarded by mu
	kept  uint64     // records kept so far; the next goes to slots[kept%len]; guarded by mu
}

// The string fields of a tailSlot, indexes of its spans.
const (
	fUser = iota
	fMethod
	fTarget
	fReason
	fLine
	fListener
	fParent
	nFields
)

// tailSlot is one record of the tail. Its string fields are spans of
// buf.
type tailSlot struct {
	at        time.Time
	client    netip.AddrPort
	protocol  accesslog.Protocol
	status    int
	up, down  int64
	duration  time.Duration
	buf       []byte
	spans     [nFields][2]int32
	truncated bool // the line was cut
}

func newTail(size int) *tail {
	if size <= 0 {
		size = defaultTailSize
	}
	return &tail{slots: make([]tailSlot, size)}
}

// record is the access log's tap: it counts r's reason and keeps r and
// its line.
func (t *tail) record(r *accesslog.Record, line []byte) {
	if r.Reason != "" {
		i, ok := reasonIndex[r.Reason]
		if !ok {
			i = len(reasons) - 1
		}
		t.reasons[i].Add(1)
	}
	line = bytes.TrimRight(line, "\n")
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &t.slots[t.kept%uint64(len(t.slots))]
	t.kept++
	s.at, s.client, s.protocol, s.status = r.Time, r.Client, r.Protocol, r.Status
	s.up, s.down, s.duration = r.BytesUp, r.BytesDown, r.Duration
	s.buf = s.buf[:0]
	s.truncated = len(line) > tailLineBytes
	for f, v := range [nFields]string{r.User, r.Method, r.Target, r.Reason, "", r.Listener, r.Parent} {
		if f == fLine {
			start := len(s.buf)
			s.buf = append(s.buf, line[:min(len(line), tailLineBytes)]...)
			s.spans[f] = [2]int32{int32(start), int32(len(s.buf))}
			continue
		}
		if f == fTarget && len(v) > tailTargetBytes {
			v = v[:tailTargetBytes]
		}
		s.put(f, v)
	}
}

// put appends v to s.buf as field f.
func (s *tailSlot) put(f int, v string) {
	start := len(s.buf)
	s.buf = append(s.buf, v...)
	s.spans[f] = [2]int32{int32(start), int32(len(s.buf))}
}

// field returns field f of s, as bytes of its buffer.
func (s *tailSlot) field(f int) []byte { return s.buf[s.spans[f][0]:s.spans[f][1]] }

// reasonCounts returns the records counted by reason, those counted at
// least once.
func (t *tail) reasonCounts() map[string]uint64 {
	out := make(map[string]uint64)
	for i := range t.reasons {
		if n := t.reasons[i].Load(); n > 0 {
			out[reasons[i]] = n
		}
	}
	return out
}

// LogFilter selects records of the access log tail; a zero field selects
// every record.
type LogFilter struct {
	// User is the user name, exactly.
	User string
	// Host is part of the target's host, in any case.
	Host string
	// Status is a status ("429") or a class ("4xx").
	Status string
	// Reason is a reason of the access log ("quota"), exactly; "-"
	// selects the records without one.
	Reason string
}

// LogRecord is a record of the access log tail: the record's fields and
// its line as the access log wrote it (the same fields: rustle logs no
// password, header or body).
type LogRecord struct {
	Time       time.Time `json:"time"`
	Listener   string    `json:"listener"`
	Client     string    `json:"client"`
	User       string    `json:"user"`
	Protocol   string    `json:"protocol"`
	Method     string    `json:"method"`
	Target     string    `json:"target"`
	Status     int       `json:"status"`
	Reason     string    `json:"reason"`
	Parent     string    `json:"parent"`
	BytesUp    int64     `json:"bytes_up"`
	BytesDown  int64     `json:"bytes_down"`
	DurationMS float64   `json:"duration_ms"`
	// Line is the line as written, without its newline; cut to 1024
	// bytes and ending in "..." when longer.
	Line string `json:"line"`
}

// matches reports whether s passes f.
func (s *tailSlot) matches(f *LogFilter) bool {
	if f.User != "" && string(s.field(fUser)) != f.User {
		return false
	}
	if f.Reason != "" {
		reason := string(s.field(fReason))
		if reason != f.Reason && (f.Reason != "-" || reason != "") {
			return false
		}
	}
	if f.Status != "" {
		st := strconv.Itoa(s.status)
		if class, ok := strings.CutSuffix(strings.ToLower(f.Status), "xx"); ok {
			if len(st) != 3 || st[:1] != class {
				return false
			}
		} else if st != f.Status {
			return false
		}
	}
	if f.Host != "" && !strings.Contains(strings.ToLower(targetHost(string(s.field(fTarget)))), strings.ToLower(f.Host)) {
		return false
	}
	return true
}

// targetHost returns the host of a record's target: an absolute URL's,
// or a host:port's.
func targetHost(target string) string {
	if _, rest, ok := strings.Cut(target, "://"); ok {
		target, _, _ = strings.Cut(rest, "/")
		if _, h, ok := strings.Cut(target, "@"); ok {
			target = h
		}
	}
	if h, _, ok := strings.Cut(target, "]"); ok && strings.HasPrefix(h, "[") {
		return h[1:]
	}
	if i := strings.LastIndexByte(target, ':'); i >= 0 {
		return target[:i]
	}
	return target
}

// latest returns up to limit records that pass f, newest first.
func (t *tail) latest(f LogFilter, limit int) []LogRecord {
	out := []LogRecord{}
	t.mu.Lock()
	defer t.mu.Unlock()
	n := uint64(len(t.slots))
	for k := t.kept; k > 0 && t.kept-k < n && len(out) < limit; k-- {
		s := &t.slots[(k-1)%n]
		if !s.matches(&f) {
			continue
		}
		rec := LogRecord{
			Time: s.at, Listener: string(s.field(fListener)), User: string(s.field(fUser)),
			Protocol: s.protocol.String(), Method: string(s.field(fMethod)), Target: string(s.field(fTarget)),
			Status: s.status, Reason: string(s.field(fReason)), Parent: string(s.field(fParent)),
			BytesUp: s.up, BytesDown: s.down, DurationMS: float64(s.duration.Microseconds()) / 1000,
			Line: string(s.field(fLine)),
		}
		if s.client.IsValid() {
			rec.Client = s.client.String()
		}
		if s.truncated {
			rec.Line += "..."
		}
		out = append(out, rec)
	}
	return out
}
