package route

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrorKind says how dialing through a parent failed.
type ErrorKind uint8

// The ways a dial through a parent fails.
const (
	// Unreachable: the parent's address could not be connected to, or
	// the connection broke during the handshake (502).
	Unreachable ErrorKind = iota + 1
	// TimedOut: the connect or the handshake took longer than the
	// parent's connect timeout (504).
	TimedOut
	// AuthFailed: the parent refused rustle's credentials for it, or
	// wants credentials rustle has none of (502: the operator's problem,
	// never the client's 407).
	AuthFailed
	// Refused: the parent answered, but refused to connect to the
	// destination (an HTTP status other than 2xx, a SOCKS reply other
	// than success): 502.
	Refused
	// Protocol: the parent's answer is not the protocol it was
	// configured with (502).
	Protocol
	// Looped: the parent answered 508 Loop Detected: the request came
	// back to a rustle it had passed, through this parent (508). Like
	// Refused, it does not count against the parent's health.
	Looped
)

// String returns k's name, as metrics and logs name it.
func (k ErrorKind) String() string {
	switch k {
	case Unreachable:
		return "unreachable"
	case TimedOut:
		return "timed-out"
	case AuthFailed:
		return "auth-failed"
	case Refused:
		return "refused"
	case Protocol:
		return "protocol"
	case Looped:
		return "loop"
	}
	return "unknown"
}

// Status returns the HTTP status a proxy answers k with: 504 for
// TimedOut, 508 for Looped, 502 otherwise.
func (k ErrorKind) Status() int {
	switch k {
	case TimedOut:
		return 504
	case Looped:
		return 508
	}
	return 502
}

// Error is a failed dial through a parent.
type Error struct {
	// Parent is the parent's configured name.
	Parent string
	// Kind says how it failed.
	Kind ErrorKind
	// Code is the parent's answer for Refused and AuthFailed: the HTTP
	// status, or the SOCKS reply code; 0 = none.
	Code int
	// Err is the cause.
	Err error
}

func (e *Error) Error() string {
	return fmt.Sprintf("route: parent %s: %s: %v", e.Parent, e.Kind, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Reason is a one-line, client-safe description of the failure (no
// credential, no address the parent answered), for the body of a 502 or
// 504 answer.
func (e *Error) Reason() string {
	p := "parent proxy " + e.Parent
	switch e.Kind {
	case Unreachable:
		return p + " is unreachable"
	case TimedOut:
		return p + " timed out"
	case AuthFailed:
		return p + " refused rustle's credentials"
	case Refused:
		if e.Code != 0 {
			return p + " refused the connection (" + strconv.Itoa(e.Code) + ")"
		}
		return p + " refused the connection"
	case Looped:
		return "loop detected: parent proxy " + e.Parent + " leads back to a proxy the request has passed"
	}
	return p + " answered in another protocol"
}

// ErrNoParent is returned by [Route.Pick] when every parent of a route
// without a direct fallback is down.
var ErrNoParent = errors.New("route: no parent of the route is up")

// countsAgainst reports whether a failure of kind k counts against the
// parent's health: a parent that refuses one destination is still up.
func (k ErrorKind) countsAgainst() bool { return k != Refused && k != Looped }
