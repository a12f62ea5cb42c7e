package sni

import "fmt"

// Mode is the SNI check's setting for a tunnel: whether rustle reads the
// ClientHello its client sends, and what it does with it.
type Mode uint8

// The modes, with their configuration names.
const (
	// Unset is no setting: a rule without one takes its listener's, and a
	// listener without one is Off ("").
	Unset Mode = iota
	// Off reads nothing: the tunnel is dialled and relayed as it comes
	// ("off").
	Off
	// Log reads the ClientHello and logs its server_name, refusing
	// nothing ("log").
	Log
	// Match reads the ClientHello and closes the tunnel, before any byte
	// reaches the origin, unless it names the host the tunnel was asked
	// for ("match").
	Match
)

// String returns the configuration name of m ("" for Unset).
func (m Mode) String() string {
	switch m {
	case Off:
		return "off"
	case Log:
		return "log"
	case Match:
		return "match"
	}
	return ""
}

// ParseMode returns the Mode named s: "off", "log", "match", or "" for
// Unset.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "":
		return Unset, nil
	case "off":
		return Off, nil
	case "log":
		return Log, nil
	case "match":
		return Match, nil
	}
	return Unset, fmt.Errorf("%q is not \"off\", \"log\" or \"match\"", s)
}

// Or returns m, or def when m is Unset.
func (m Mode) Or(def Mode) Mode {
	if m == Unset {
		return def
	}
	return m
}

// Reads reports whether the mode reads the ClientHello (Log or Match).
func (m Mode) Reads() bool { return m == Log || m == Match }
