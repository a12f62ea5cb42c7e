package proxytest

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/rustle-proxy/rustle/internal/accesslog"
)

// TestLogBuffer: a LogBuffer takes concurrent writers' lines whole; a
// JSON access log written to it is read back by JSONRecords, and
// WaitJSONRecordSince finds a record written after its mark while one
// before it, matched the same way, is not taken for it.
func TestLogBuffer(t *testing.T) {
	var b LogBuffer
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 50 {
				fmt.Fprintf(&b, "{\"writer\":%d,\"n\":%d}\n", i, j)
			}
		})
	}
	wg.Wait()
	recs := JSONRecords[map[string]any](t, &b, 200)
	if len(recs) != 200 || b.Len() != len(b.String()) {
		t.Fatalf("%d records, Len %d of %d bytes", len(recs), b.Len(), len(b.String()))
	}
	text, off := b.LinesFrom(0)
	if off != b.Len() || text != b.String() {
		t.Errorf("LinesFrom(0) = %d bytes up to %d, want all %d", len(text), off, b.Len())
	}

	var access LogBuffer
	client := netip.MustParseAddrPort("127.0.0.1:40000")
	al := JSONAccessLog(t, &access)
	al.Log(&accesslog.Record{Client: client, Status: 403})
	JSONRecords[map[string]any](t, &access, 1)
	mark := access.Len()
	sameClient := func(r map[string]any) bool { return r["client"] == "127.0.0.1:40000" }
	al.Log(&accesslog.Record{Client: client, Status: 200})
	if r := WaitJSONRecordSince(t, &access, mark, sameClient); r["status"] != float64(200) {
		t.Errorf("the record past the mark is %v, want the 200", r)
	}
	if r := WaitJSONRecord(t, &access, sameClient); r["status"] != float64(403) {
		t.Errorf("the first record is %v, want the 403", r)
	}
}
