package tunnel

import (
	"bytes"
	"io"
	"testing"
)

// TestRecordConnSplitsHello checks that RecordConn hands a connection's
// first record, when it is a handshake record, to crypto/tls in records
// of at most helloFragment bytes whose bodies are the real body, and any
// other first record, and every record after the first, as they are.
func TestRecordConnSplitsHello(t *testing.T) {
	record := func(typ byte, body []byte) []byte {
		return append([]byte{typ, 3, 1, byte(len(body) >> 8), byte(len(body))}, body...)
	}
	body := bytes.Repeat([]byte("0123456789abcdef"), 100) // 1,600 bytes, a ClientHello's size
	next := record(23, bytes.Repeat([]byte("x"), 300))
	tests := []struct {
		name  string
		first []byte
		split bool
	}{
		{"handshake record", record(recordTypeHandshake, body), true},
		{"small handshake record", record(recordTypeHandshake, body[:40]), true},
		{"empty handshake record", record(recordTypeHandshake, nil), true},
		{"other record", record(21, body), false},
	}
	ln := newListener(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, a := tcpPair(t, ln)
			t.Cleanup(func() { d.Close(); a.Close() })
			sent := append(append([]byte(nil), tt.first...), next...)
			if _, err := d.Write(sent); err != nil {
				t.Fatal(err)
			}
			d.CloseWrite()
			rc := RecordConn(a)
			var records [][]byte // as read, header and body
			for {
				var hdr [recordHeaderLen]byte
				if _, err := io.ReadFull(rc, hdr[:]); err == io.EOF {
					break
				} else if err != nil {
					t.Fatalf("read header: %v", err)
				}
				// A large buffer: the bounds, not the caller, stop each read.
				b := make([]byte, 32<<10)
				n := int(hdr[3])<<8 | int(hdr[4])
				got := 0
				for got < n {
					m, err := rc.Read(b[got:])
					if err != nil {
						t.Fatalf("read body: %v", err)
					}
					got += m
				}
				if got != n {
					t.Fatalf("read %d body bytes, want %d", got, n)
				}
				records = append(records, append(hdr[:], b[:n]...))
			}
			last := records[len(records)-1]
			if !bytes.Equal(last, next) {
				t.Errorf("second record handed out as %q, want it as it came", last)
			}
			records = records[:len(records)-1]
			var joined []byte
			for _, r := range records {
				if !bytes.Equal(r[:3], tt.first[:3]) {
					t.Errorf("fragment header %x, want type and version %x", r[:3], tt.first[:3])
				}
				if tt.split && len(r)-recordHeaderLen > helloFragment {
					t.Errorf("fragment of %d bytes, want at most %d", len(r)-recordHeaderLen, helloFragment)
				}
				joined = append(joined, r[recordHeaderLen:]...)
			}
			if !bytes.Equal(joined, tt.first[recordHeaderLen:]) {
				t.Errorf("fragments carry %d bytes, not the first record's %d", len(joined), len(tt.first)-recordHeaderLen)
			}
			if !tt.split && len(records) != 1 {
				t.Errorf("%d records, want the first one as it came", len(records))
			}
		})
	}
}
