package socks5

import (
	"bytes"
	"encoding/binary"
	"net/netip"
)

// SOCKS4 constants.
const (
	version4 = 0x04

	socks4Granted  = 0x5A
	socks4Rejected = 0x5B

	// maxSOCKS4Field is the longest USERID or SOCKS4a host name accepted,
	// without its terminating NUL.
	maxSOCKS4Field = 255
)

// socks4Request is a SOCKS4 or SOCKS4a request. The USERID is not kept:
// rustle does not use it.
type socks4Request struct {
	cmd byte
	dst addr
}

// parseSOCKS4 parses a SOCKS4 request, VN CD DSTPORT DSTIP USERID NUL, or
// a SOCKS4a one, whose DSTIP is 0.0.0.x with x not 0 and which carries a
// host name and a NUL after the USERID's NUL. It returns errShort while b
// holds only a prefix of one, errVersion when VN is not 4 and
// errUserIDTooBig when the USERID or the host name runs past
// maxSOCKS4Field bytes. A request whose destination is not usable
// (errBadHost, errUnspecified) is returned whole, with its length, along
// with the error.
func parseSOCKS4(b []byte) (socks4Request, int, error) {
	if len(b) < 1 {
		return socks4Request{}, 0, errShort
	}
	if b[0] != version4 {
		return socks4Request{}, 0, errVersion
	}
	if len(b) < 8 {
		return socks4Request{}, 0, errShort
	}
	req := socks4Request{cmd: b[1]}
	req.dst.port = binary.BigEndian.Uint16(b[2:4])
	ip := [4]byte(b[4:8])
	n, ok, err := nulField(b, 8)
	if !ok {
		return socks4Request{}, 0, err
	}
	if ip[0] != 0 || ip[1] != 0 || ip[2] != 0 || ip[3] == 0 {
		req.dst.ip = netip.AddrFrom4(ip)
		if req.dst.ip.IsUnspecified() {
			return req, n, errUnspecified
		}
		return req, n, nil
	}
	hostStart := n
	n, ok, err = nulField(b, hostStart)
	if !ok {
		return socks4Request{}, 0, err
	}
	req.dst.ip, req.dst.host, err = parseHost(b[hostStart : n-1])
	if err == nil && req.dst.ip.IsValid() && req.dst.ip.IsUnspecified() {
		err = errUnspecified
	}
	return req, n, err
}

// nulField finds the NUL that ends the field starting at b[start] and
// returns the offset just past it. Without one it reports false and
// errShort, or errUserIDTooBig once more than maxSOCKS4Field bytes have
// gone by.
func nulField(b []byte, start int) (int, bool, error) {
	field := b[start:]
	if len(field) > maxSOCKS4Field+1 {
		field = field[:maxSOCKS4Field+1]
	}
	if i := bytes.IndexByte(field, 0); i >= 0 {
		return start + i + 1, true, nil
	}
	if len(field) > maxSOCKS4Field {
		return 0, false, errUserIDTooBig
	}
	return 0, false, errShort
}

// socks4Method names a SOCKS4 command as the access log shows it.
func socks4Method(cmd byte) string {
	switch cmd {
	case cmdConnect:
		return "CONNECT"
	case cmdBind:
		return "BIND"
	}
	return ""
}

// appendSOCKS4Reply appends a SOCKS4 reply: VN (0) CD DSTPORT DSTIP, with
// bnd as DSTPORT and DSTIP when it is an IPv4 address and zeros otherwise.
func appendSOCKS4Reply(b []byte, cd byte, bnd netip.AddrPort) []byte {
	b = append(b, 0, cd)
	if ip := bnd.Addr().Unmap(); ip.Is4() {
		b = binary.BigEndian.AppendUint16(b, bnd.Port())
		a4 := ip.As4()
		return append(b, a4[:]...)
	}
	return append(b, 0, 0, 0, 0, 0, 0)
}
