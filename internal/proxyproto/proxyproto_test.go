package proxyproto

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"net/netip"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var cmpAddr = cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// v2 builds a v2 header from its parts after the signature.
func v2(verCmd, famProto byte, body ...[]byte) []byte {
	b := append([]byte(nil), v2Signature...)
	joined := bytes.Join(body, nil)
	b = append(b, verCmd, famProto)
	b = binary.BigEndian.AppendUint16(b, uint16(len(joined)))
	return append(b, joined...)
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		panic(err)
	}
	return b
}

func tlv(t byte, v string) []byte {
	b := []byte{t}
	b = binary.BigEndian.AppendUint16(b, uint16(len(v)))
	return append(b, v...)
}

var inet = mustHex("c0000201 c6336405 d431 0050")                                                  // 192.0.2.1:54321 -> 198.51.100.5:80
var inet6 = mustHex("20010db8000000000000000000000001 20010db8000000000000000000000002 0457 01bb") // [2001:db8::1]:1111 -> [2001:db8::2]:443

func TestParseValid(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want Header
	}{
		{"v1 tcp4", []byte("PROXY TCP4 192.0.2.1 198.51.100.5 54321 80\r\n"),
			Header{Version: 1, Source: ap("192.0.2.1:54321"), Destination: ap("198.51.100.5:80")}},
		{"v1 tcp6", []byte("PROXY TCP6 2001:db8::1 2001:db8::2 1111 443\r\n"),
			Header{Version: 1, Source: ap("[2001:db8::1]:1111"), Destination: ap("[2001:db8::2]:443")}},
		{"v1 tcp6 mapped", []byte("PROXY TCP6 ::ffff:192.0.2.1 ::1 0 65535\r\n"),
			Header{Version: 1, Source: ap("[::ffff:192.0.2.1]:0"), Destination: ap("[::1]:65535")}},
		{"v1 unknown", []byte("PROXY UNKNOWN\r\n"), Header{Version: 1, Command: CommandLocal}},
		{"v1 unknown with addresses", []byte("PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n"), Header{Version: 1, Command: CommandLocal}},
		{"v1 longest", []byte("PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n"),
			Header{Version: 1, Source: ap("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"), Destination: ap("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535")}},
		{"v2 haproxy capture", mustHex("0d0a0d0a000d0a515549540a 21 11 000c ac130001 ac130003 a652 0050"),
			Header{Version: 2, Source: ap("172.19.0.1:42578"), Destination: ap("172.19.0.3:80")}},
		{"v2 inet", v2(0x21, 0x11, inet), Header{Version: 2, Source: ap("192.0.2.1:54321"), Destination: ap("198.51.100.5:80")}},
		{"v2 inet udp", v2(0x21, 0x12, inet), Header{Version: 2, Source: ap("192.0.2.1:54321"), Destination: ap("198.51.100.5:80"), Datagram: true}},
		{"v2 inet6", v2(0x21, 0x21, inet6), Header{Version: 2, Source: ap("[2001:db8::1]:1111"), Destination: ap("[2001:db8::2]:443")}},
		{"v2 tlvs", v2(0x21, 0x11, inet, tlv(TypeAuthority, "example.com"), tlv(TypeNoop, ""), tlv(0xea, "vpce-1234")),
			Header{Version: 2, Source: ap("192.0.2.1:54321"), Destination: ap("198.51.100.5:80"), TLVs: []TLV{
				{TypeAuthority, []byte("example.com")}, {TypeNoop, []byte{}}, {0xea, []byte("vpce-1234")}}}},
		{"v2 local", v2(0x20, 0x00), Header{Version: 2, Command: CommandLocal}},
		{"v2 local with addresses and junk", v2(0x20, 0x11, inet, []byte{1, 2}), Header{Version: 2, Command: CommandLocal}},
		{"v2 unspec", v2(0x21, 0x00), Header{Version: 2}},
		{"v2 unix", v2(0x21, 0x31, make([]byte, unixLen)), Header{Version: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			payload := []byte("GET / HTTP/1.1\r\n")
			data := append(append([]byte(nil), tt.in...), payload...)
			h, n, err := Parse(data)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if n != len(tt.in) {
				t.Errorf("Parse consumed %d bytes, want %d", n, len(tt.in))
			}
			if diff := cmp.Diff(&tt.want, h, cmpAddr, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
			for _, r := range []io.Reader{bytes.NewReader(data), iotest.OneByteReader(bytes.NewReader(data))} {
				h, err := Read(r)
				if err != nil {
					t.Fatalf("Read: %v", err)
				}
				if diff := cmp.Diff(&tt.want, h, cmpAddr, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("Read (-want +got):\n%s", diff)
				}
				rest, _ := io.ReadAll(r)
				if !bytes.Equal(rest, payload) {
					t.Errorf("after Read the stream holds %q, want %q", rest, payload)
				}
			}
			for i := range len(tt.in) {
				if _, _, err := Parse(tt.in[:i]); !errors.Is(err, ErrIncomplete) {
					t.Fatalf("Parse of the first %d bytes = %v, want ErrIncomplete", i, err)
				}
			}
		})
	}
}

func TestParseInvalid(t *testing.T) {
	long := "PROXY TCP4 1.1.1.1 1.1.1.1 1 1" + strings.Repeat(" ", 80) + "\r\n"
	big := v2(0x21, 0x11, inet, tlv(0xe0, strings.Repeat("x", 4100)))
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"http", []byte("GET http://example.com/ HTTP/1.1\r\n"), ErrNoHeader},
		{"socks5", []byte{5, 1, 0}, ErrNoHeader},
		{"tls", []byte{0x16, 3, 1, 0, 0xa5}, ErrNoHeader},
		{"lower case", []byte("proxy TCP4 1.1.1.1 1.1.1.1 1 1\r\n"), ErrNoHeader},
		{"v1 LF only", []byte("PROXY TCP4 1.1.1.1 1.1.1.1 1 1\n"), ErrInvalid},
		{"v1 too long", []byte(long), ErrInvalid},
		{"v1 no CRLF within 107 bytes", []byte("PROXY TCP4 " + strings.Repeat("1", 120)), ErrInvalid},
		{"v1 bad protocol", []byte("PROXY UDP4 1.1.1.1 1.1.1.1 1 1\r\n"), ErrInvalid},
		{"v1 tcp4 with ipv6", []byte("PROXY TCP4 ::1 ::1 1 1\r\n"), ErrInvalid},
		{"v1 tcp6 with ipv4", []byte("PROXY TCP6 1.1.1.1 1.1.1.1 1 1\r\n"), ErrInvalid},
		{"v1 zone", []byte("PROXY TCP6 fe80::1%eth0 ::1 1 1\r\n"), ErrInvalid},
		{"v1 missing port", []byte("PROXY TCP4 1.1.1.1 1.1.1.1 1\r\n"), ErrInvalid},
		{"v1 extra field", []byte("PROXY TCP4 1.1.1.1 1.1.1.1 1 1 1\r\n"), ErrInvalid},
		{"v1 double space", []byte("PROXY TCP4 1.1.1.1  1.1.1.1 1 1\r\n"), ErrInvalid},
		{"v1 port too big", []byte("PROXY TCP4 1.1.1.1 1.1.1.1 65536 1\r\n"), ErrInvalid},
		{"v1 port leading zero", []byte("PROXY TCP4 1.1.1.1 1.1.1.1 080 1\r\n"), ErrInvalid},
		{"v1 port sign", []byte("PROXY TCP4 1.1.1.1 1.1.1.1 +80 1\r\n"), ErrInvalid},
		{"v1 ipv4 leading zero", []byte("PROXY TCP4 01.1.1.1 1.1.1.1 1 1\r\n"), ErrInvalid},
		{"v1 empty", []byte("PROXY \r\n"), ErrInvalid},
		{"v2 version 1", v2(0x11, 0x11, inet), ErrInvalid},
		{"v2 command 2", v2(0x22, 0x11, inet), ErrInvalid},
		{"v2 family 4", v2(0x21, 0x41, inet), ErrInvalid},
		{"v2 transport 3", v2(0x21, 0x13, inet), ErrInvalid},
		{"v2 inet short", v2(0x21, 0x11, inet[:11]), ErrInvalid},
		{"v2 inet6 short", v2(0x21, 0x21, inet), ErrInvalid},
		{"v2 unix short", v2(0x21, 0x31, inet6), ErrInvalid},
		{"v2 truncated tlv", v2(0x21, 0x11, inet, []byte{0x02, 0x00}), ErrInvalid},
		{"v2 tlv past the end", v2(0x21, 0x11, inet, []byte{0x02, 0x00, 0x09, 'a'}), ErrInvalid},
		{"v2 too long", big, ErrInvalid},
		{"v2 crc of 3 bytes", v2(0x21, 0x11, inet, tlv(TypeCRC32C, "abc")), ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := Parse(tt.in); !errors.Is(err, tt.want) {
				t.Errorf("Parse = %v, want %v", err, tt.want)
			}
			if _, err := Read(bytes.NewReader(tt.in)); !errors.Is(err, tt.want) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("Read = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestCRC32C(t *testing.T) {
	h := Header{Version: 2, Source: ap("192.0.2.1:1"), Destination: ap("192.0.2.2:2"),
		TLVs: []TLV{{TypeAuthority, []byte("a.example")}, {TypeCRC32C, make([]byte, 4)}}}
	b, err := h.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := Parse(b)
	if err != nil {
		t.Fatalf("Parse of a header with a correct CRC32C: %v", err)
	}
	if v, ok := got.TLV(TypeCRC32C); !ok || bytes.Equal(v, make([]byte, 4)) {
		t.Errorf("CRC32C TLV = %x, %v; want a computed checksum", v, ok)
	}
	if v, ok := got.TLV(TypeAuthority); !ok || string(v) != "a.example" {
		t.Errorf("authority TLV = %q, %v", v, ok)
	}
	if _, ok := got.TLV(TypeALPN); ok {
		t.Errorf("TLV found an absent type")
	}
	b[len(b)-5] ^= 1 // inside the authority TLV, covered by the checksum
	if _, _, err := Parse(b); !errors.Is(err, ErrInvalid) {
		t.Errorf("Parse of a corrupted header = %v, want ErrInvalid", err)
	}
}

func TestReadEOF(t *testing.T) {
	if _, err := Read(bytes.NewReader(nil)); err != io.EOF {
		t.Errorf("Read of nothing = %v, want io.EOF", err)
	}
	full := v2(0x21, 0x11, inet)
	for _, cut := range []int{3, 15, 16, 20} {
		if _, err := Read(bytes.NewReader(full[:cut])); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("Read of %d bytes of a v2 header = %v, want io.ErrUnexpectedEOF", cut, err)
		}
	}
	if _, err := Read(strings.NewReader("PROXY TCP4 1.1.1.1 1.1.1.1 1 1")); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("Read of a v1 header without CRLF = %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestAppend(t *testing.T) {
	tests := []struct {
		name string
		h    Header
		want string
	}{
		{"v1 tcp4", Header{Version: 1, Source: ap("192.0.2.1:54321"), Destination: ap("198.51.100.5:80")},
			"PROXY TCP4 192.0.2.1 198.51.100.5 54321 80\r\n"},
		{"v1 tcp6", Header{Version: 1, Source: ap("[2001:db8::1]:1"), Destination: ap("[::1]:2")},
			"PROXY TCP6 2001:db8::1 ::1 1 2\r\n"},
		{"v1 local", Header{Version: 1, Command: CommandLocal}, "PROXY UNKNOWN\r\n"},
		{"v2 inet", Header{Version: 2, Source: ap("192.0.2.1:54321"), Destination: ap("198.51.100.5:80")},
			string(v2(0x21, 0x11, inet))},
		{"v2 local", Header{Version: 2, Command: CommandLocal}, string(v2(0x20, 0x00))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.h.Append([]byte("x"))
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != "x"+tt.want {
				t.Errorf("Append = %q, want %q", b, "x"+tt.want)
			}
		})
	}
	for _, bad := range []Header{
		{Version: 3},
		{Version: 1},
		{Version: 1, Source: ap("1.1.1.1:1"), Destination: ap("[::1]:1")},
		{Version: 1, Source: ap("1.1.1.1:1"), Destination: ap("1.1.1.1:1"), Datagram: true},
		{Version: 2, Source: ap("1.1.1.1:1"), Destination: ap("[::1]:1")},
		{Version: 2, Command: 7},
		{Version: 2, TLVs: []TLV{{TypeCRC32C, []byte{1}}}},
		{Version: 2, TLVs: []TLV{{0xe0, make([]byte, 5000)}}},
	} {
		if b, err := bad.Append([]byte("x")); err == nil || string(b) != "x" {
			t.Errorf("Append(%+v) = %q, %v; want an error and b unchanged", bad, b, err)
		}
	}
}

// FuzzParse checks that Parse never panics, that Read agrees with it and
// stops at the header's end, and that a parsed header encodes back to
// bytes that parse to the same header.
func FuzzParse(f *testing.F) {
	f.Add([]byte("PROXY TCP4 192.0.2.1 198.51.100.5 54321 80\r\nGET / HTTP/1.1\r\n"))
	f.Add([]byte("PROXY UNKNOWN\r\n"))
	f.Add(v2(0x21, 0x21, inet6, tlv(TypeAuthority, "x")))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, n, err := Parse(data)
		if err != nil {
			if n != 0 || h != nil {
				t.Fatalf("Parse failed with %v but returned %v, %d", err, h, n)
			}
			return
		}
		if n <= 0 || n > len(data) {
			t.Fatalf("Parse consumed %d of %d bytes", n, len(data))
		}
		r := bytes.NewReader(data)
		h2, err := Read(r)
		if err != nil {
			t.Fatalf("Parse succeeded but Read failed: %v", err)
		}
		if r.Len() != len(data)-n {
			t.Fatalf("Read left %d bytes, Parse consumed %d of %d", r.Len(), n, len(data))
		}
		if diff := cmp.Diff(h, h2, cmpAddr, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("Parse and Read differ (-Parse +Read):\n%s", diff)
		}
		enc, err := h.Append(nil)
		if err != nil {
			t.Fatalf("Append of a parsed header %+v: %v", h, err)
		}
		h3, _, err := Parse(enc)
		if err != nil {
			t.Fatalf("Parse of the re-encoded %q: %v", enc, err)
		}
		withoutCRC := func(tlvs []TLV) []TLV {
			var out []TLV
			for _, t := range tlvs {
				if t.Type != TypeCRC32C {
					out = append(out, t)
				}
			}
			return out
		}
		h.TLVs, h3.TLVs = withoutCRC(h.TLVs), withoutCRC(h3.TLVs)
		if diff := cmp.Diff(h, h3, cmpAddr, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip changed the header (-parsed +re-parsed):\n%s", diff)
		}
	})
}

func BenchmarkParse(b *testing.B) {
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"v1", []byte("PROXY TCP4 192.0.2.1 198.51.100.5 54321 80\r\n")},
		{"v2", v2(0x21, 0x11, inet)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := Parse(tc.in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
