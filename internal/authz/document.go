package authz

import (
	"net/netip"
	"strconv"

	"github.com/rustle-proxy/rustle/internal/accesslog"
)

// AppendDocument appends to b the document sent about in, as the service
// reads it (see the package documentation), and the cache keys it:
// {"input":{...}}, every field present, in a fixed order; host is Host,
// or Addr when Host is "". Strings are escaped as the JSON access log
// escapes them (accesslog.AppendJSONString), invalid UTF-8 replaced by
// U+FFFD. It allocates
// nothing beyond b's growth.
func (in *Input) AppendDocument(b []byte) []byte {
	b = append(b, `{"input":{"listener":`...)
	b = accesslog.AppendJSONString(b, in.Listener)
	b = append(b, `,"user":`...)
	b = accesslog.AppendJSONString(b, in.User)
	b = append(b, `,"groups":[`...)
	for i, g := range in.Groups {
		if i > 0 {
			b = append(b, ',')
		}
		b = accesslog.AppendJSONString(b, g)
	}
	b = append(b, `],"client":`...)
	b = appendAddr(b, in.Client)
	b = append(b, `,"host":`...)
	if in.Host == "" && in.Addr.IsValid() {
		b = appendAddr(b, in.Addr)
	} else {
		b = accesslog.AppendJSONString(b, in.Host)
	}
	b = append(b, `,"port":`...)
	b = strconv.AppendUint(b, uint64(in.Port), 10)
	b = append(b, `,"method":`...)
	b = accesslog.AppendJSONString(b, in.Method)
	b = append(b, `,"protocol":`...)
	b = accesslog.AppendJSONString(b, in.Protocol)
	b = append(b, `,"sni":`...)
	b = accesslog.AppendJSONString(b, in.SNI)
	return append(b, "}}"...)
}

// appendAddr appends a as a JSON string, "" for the zero Addr.
func appendAddr(b []byte, a netip.Addr) []byte {
	b = append(b, '"')
	if a.IsValid() {
		b = a.WithZone("").AppendTo(b)
	}
	return append(b, '"')
}
