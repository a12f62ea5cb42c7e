package http1

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// scanResult is what a chunkedScanner made of an input fed to it in pieces.
type scanResult struct {
	consumed int   // bytes consumed, the refused byte included on error
	done     bool  // the end of the body was seen
	err      error // the framing error, if any
	runs     []byte
	payload  []byte // the data runs
}

// feedChunked feeds in to a fresh chunkedScanner in pieces split at cuts
// (ascending offsets into in), as reads from a connection would deliver
// it, and stops at the end of the body or the first error. It returns an
// error when the scanner breaks its contract: no progress on a non-empty
// input, a run longer than its input, a data run outside chunk data.
func feedChunked(in []byte, cuts []int) (scanResult, error) {
	var cs ChunkedScanner
	var r scanResult
	prev := 0
	for i := 0; i <= len(cuts); i++ {
		end := len(in)
		if i < len(cuts) {
			end = cuts[i]
		}
		if end < prev || end > len(in) {
			return r, fmt.Errorf("bad cuts %v", cuts)
		}
		p := in[prev:end]
		prev = end
		for len(p) > 0 && !cs.Done() {
			wasData := cs.state == csData
			n, data, err := cs.Step(p)
			if n < 0 || n > len(p) {
				return r, fmt.Errorf("step returned %d for %d bytes", n, len(p))
			}
			if data != wasData {
				return r, fmt.Errorf("step reported data=%v in state %d", data, cs.state)
			}
			r.runs = append(r.runs, p[:n]...)
			r.consumed += n
			if err != nil {
				r.err = err
				return r, nil
			}
			if n == 0 {
				return r, fmt.Errorf("step made no progress on %q", p)
			}
			if data {
				r.payload = append(r.payload, p[:n]...)
			}
			p = p[n:]
		}
		if cs.Done() {
			r.done = true
			if n, data, err := cs.Step(in[r.consumed:]); n != 0 || data || err != nil {
				return r, fmt.Errorf("step after the end = %d, %v, %v", n, data, err)
			}
			return r, nil
		}
	}
	return r, nil
}

// splitPlans returns cut sets for in: whole, byte by byte, every single
// cut point (for short inputs) and random cuts from a fixed seed.
func splitPlans(n int, rng *rand.Rand) map[string][]int {
	plans := map[string][]int{"whole": nil}
	every := make([]int, 0, n)
	for i := 1; i < n; i++ {
		every = append(every, i)
	}
	plans["byte by byte"] = every
	if n <= 400 {
		for i := 1; i < n; i++ {
			plans[fmt.Sprintf("cut at %d", i)] = []int{i}
		}
	}
	for k := range 20 {
		var cuts []int
		for range rng.IntN(8) + 1 {
			cuts = append(cuts, rng.IntN(n+1))
		}
		slices.Sort(cuts)
		plans[fmt.Sprintf("random %d", k)] = cuts
	}
	return plans
}

// chunkedBody frames the chunks as a chunked body with the given
// trailer section (field lines, each with its CRLF).
func chunkedBody(chunks []string, trailers string) string {
	var b strings.Builder
	for _, c := range chunks {
		fmt.Fprintf(&b, "%x\r\n%s\r\n", len(c), c)
	}
	b.WriteString("0\r\n" + trailers + "\r\n")
	return b.String()
}

func validChunkedBodies() []struct{ name, body, payload string } {
	rng := rand.New(rand.NewPCG(1, 2))
	var big []string
	for i := range 40 {
		c := make([]byte, rng.IntN(300)+1)
		const alphabet = "\r\n0;ab \x00\xff"
		for j := range c {
			c[j] = alphabet[rng.IntN(len(alphabet))]
		}
		big = append(big, string(c))
		if i%7 == 0 {
			big = append(big, strings.Repeat("x", 4096+i))
		}
	}
	return []struct{ name, body, payload string }{
		{"wikipedia", "4\r\nWiki\r\n5\r\npedia\r\n0\r\n\r\n", "Wikipedia"},
		{"empty", "0\r\n\r\n", ""},
		{"hex digits", "A\r\n0123456789\r\na\r\nabcdefghij\r\nF\r\n0123456789abcde\r\n0\r\n\r\n", "0123456789abcdefghij0123456789abcde"},
		{"leading zeros", "0004\r\nWiki\r\n000\r\n\r\n", "Wiki"},
		{"15 hex digits", "000000000000004\r\nWiki\r\n000000000000000\r\n\r\n", "Wiki"},
		{"extensions", "4;name=value\r\nWiki\r\n5;a;b=\"q s\";c\r\npedia\r\n0;last=1\r\n\r\n", "Wikipedia"},
		{"BWS before extension", "4 ;x\r\nWiki\r\n5\t \t;y=\"1\"\r\npedia\r\n0 ; z\r\n\r\n", "Wikipedia"},
		{"BWS before CR", "4 \r\nWiki\r\n0\t\r\n\r\n", "Wiki"},
		{"extension with obs-text", "4;n=\xc3\xa9\r\nWiki\r\n0\r\n\r\n", "Wiki"},
		{"framing in data", "9\r\n0\r\n\r\n\r\n\r\n\r\n0\r\n\r\n", "0\r\n\r\n\r\n\r\n"},
		{"trailers", "3\r\nabc\r\n0\r\nX-Sum: 1\r\nX-Other: a \t b\r\n\r\n", "abc"},
		{"trailer no value", "1\r\na\r\n0\r\nX-Empty:\r\n\r\n", "a"},
		{"long extension line", "1;" + strings.Repeat("e", maxChunkLine-4) + "\r\na\r\n0\r\n\r\n", "a"},
		{"many chunks", chunkedBody(big, "Checksum: abc\r\n"), strings.Join(big, "")},
		{"single byte chunks", chunkedBody(strings.Split("abcdefghijklmnop", ""), ""), "abcdefghijklmnop"},
	}
}

func TestChunkedValid(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const after = "GET http://next/ HTTP/1.1\r\n\r\n"
	for _, tt := range validChunkedBodies() {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte(tt.body + after)
			for plan, cuts := range splitPlans(len(in), rng) {
				r, err := feedChunked(in, cuts)
				if err != nil {
					t.Fatalf("%s: %v", plan, err)
				}
				if r.err != nil || !r.done {
					t.Fatalf("%s: err %v, done %v at %d of %d bytes", plan, r.err, r.done, r.consumed, len(tt.body))
				}
				if r.consumed != len(tt.body) {
					t.Fatalf("%s: consumed %d bytes, want %d (the bytes after the body are not its own)", plan, r.consumed, len(tt.body))
				}
				if !bytes.Equal(r.runs, []byte(tt.body)) {
					t.Fatalf("%s: runs concatenated differ from the body", plan)
				}
				if string(r.payload) != tt.payload {
					t.Fatalf("%s: payload %q, want %q", plan, r.payload, tt.payload)
				}
			}
		})
	}
}

// TestChunkedPrefixes checks that no proper prefix of a valid body is an
// error or an end: the scanner waits for more.
func TestChunkedPrefixes(t *testing.T) {
	for _, tt := range validChunkedBodies() {
		t.Run(tt.name, func(t *testing.T) {
			for i := range len(tt.body) {
				var cs ChunkedScanner
				n, _, err := ScanChunked(&cs, []byte(tt.body[:i]))
				if err != nil || n != i || cs.Done() {
					t.Fatalf("prefix of %d bytes: scanned %d, err %v, done %v", i, n, err, cs.Done())
				}
			}
		})
	}
}

func TestChunkedInvalid(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr error
		wantAt  int // bytes consumed, the refused one included; 0 to skip
	}{
		{"junk after size", "5x\r\nhello\r\n0\r\n\r\n", errChunkSize, 2},
		{"no size", "x\r\n", errChunkSize, 1},
		{"empty size line", "\r\nhello", errChunkSize, 1},
		{"minus", "-5\r\nhello", errChunkSize, 1},
		{"plus", "+5\r\nhello", errChunkSize, 1},
		{"0x prefix", "0x5\r\nhello", errChunkSize, 2},
		{"leading space", " 5\r\nhello", errChunkSize, 1},
		{"space inside size", "5 5\r\nhello", errChunkSize, 3},
		{"junk after BWS", "5 x\r\nhello", errChunkSize, 3},
		{"comma after size", "5,6\r\nhello", errChunkSize, 2},
		{"NUL after size", "5\x00\r\nhello", errChunkSize, 2},
		{"non-ASCII digit", "\xd9\xa5\r\n", errChunkSize, 1},
		{"16 hex digits", "1000000000000000\r\n", errChunkOverflow, 16},
		{"16 zeros", "0000000000000000\r\n\r\n", errChunkOverflow, 16},
		{"overflow int64", "ffffffffffffffffff\r\n", errChunkOverflow, 16},
		{"bare LF after size", "5\nhello\r\n", errChunkSize, 2},
		{"bare CR after size", "5\rhello\r\n", errChunkLine, 3},
		{"bare LF in extension", "5;a\nhello\r\n", errChunkLine, 4},
		{"bare LF after BWS", "5 \nhello\r\n", errChunkSize, 3},
		{"NUL in extension", "5;a\x00\r\nhello\r\n", errChunkLine, 4},
		{"DEL in extension", "5;\x7f\r\nhello\r\n", errChunkLine, 3},
		{"oversized extension", "5;" + strings.Repeat("a", 5000) + "\r\nhello", errChunkLine, maxChunkLine + 1},
		{"oversized BWS", "5" + strings.Repeat(" ", 5000) + "\r\nhello", errChunkLine, maxChunkLine + 1},
		{"data too long", "5\r\nhelloworld\r\n", errChunkCRLF, 9},
		{"data too short", "5\r\nhell\r\n0\r\n\r\n", errChunkCRLF, 9},
		{"bare LF after data", "5\r\nhello\n0\r\n\r\n", errChunkCRLF, 9},
		{"bare CR after data", "5\r\nhello\r0\r\n\r\n", errChunkCRLF, 10},
		{"missing CRLF between chunks", "5\r\nhello5\r\nworld\r\n0\r\n\r\n", errChunkCRLF, 9},
		{"bare LF ends last chunk", "0\n\r\n", errChunkSize, 2},
		{"bare LF final line", "0\r\n\n", errTrailer, 4},
		{"CR CR final line", "0\r\n\r\r", errTrailer, 5},
		{"bare LF ends trailer", "0\r\nX: y\n\r\n", errTrailer, 8},
		{"bare CR in trailer", "0\r\nX: y\rZ: 1\r\n\r\n", errTrailer, 9},
		{"trailer obs-fold", "0\r\nX: y\r\n z\r\n\r\n", errTrailer, 10},
		{"trailer tab fold", "0\r\nX: y\r\n\tz\r\n\r\n", errTrailer, 10},
		{"NUL in trailer", "0\r\nX: \x00\r\n\r\n", errTrailer, 7},
		{"NUL starts trailer", "0\r\n\x00: 1\r\n\r\n", errTrailer, 4},
		{"request line in trailer", "0\r\nGET /SMUGGLED HTTP/1.1\r\nHost: x\r\n\r\n", errTrailer, 7},
		{"trailer without colon", "0\r\nX-Sum\r\n\r\n", errTrailer, 9},
		{"space before trailer colon", "0\r\nX-Sum : 1\r\n\r\n", errTrailer, 9},
		{"empty trailer name", "0\r\n: 1\r\n\r\n", errTrailer, 4},
		{"oversized trailer name", "0\r\n" + strings.Repeat("x", maxTrailerBytes+1) + ": 1\r\n\r\n", errTrailer, 3 + maxTrailerBytes + 1},
		{"oversized trailer line", "0\r\nX: " + strings.Repeat("a", maxTrailerBytes) + "\r\n\r\n", errTrailer, 3 + maxTrailerBytes + 1},
		{"oversized trailer section", "0\r\n" + strings.Repeat("X-Pad: "+strings.Repeat("p", 991)+"\r\n", 70) + "\r\n", errTrailer, 0},
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte(tt.in)
			want, err := feedChunked(in, nil)
			if err != nil {
				t.Fatal(err)
			}
			if want.err != tt.wantErr {
				t.Fatalf("err = %v, want %v", want.err, tt.wantErr)
			}
			if tt.wantAt != 0 && want.consumed != tt.wantAt {
				t.Errorf("refused after %d bytes, want %d", want.consumed, tt.wantAt)
			}
			for plan, cuts := range splitPlans(len(in), rng) {
				r, err := feedChunked(in, cuts)
				if err != nil {
					t.Fatalf("%s: %v", plan, err)
				}
				if r.err != want.err || r.consumed != want.consumed || r.done {
					t.Fatalf("%s: err %v after %d bytes (done %v), want %v after %d",
						plan, r.err, r.consumed, r.done, want.err, want.consumed)
				}
			}
		})
	}
}

// TestChunkedStep checks the runs step returns: framing up to the first
// data byte, data up to the chunk's end and no further.
func TestChunkedStep(t *testing.T) {
	var cs ChunkedScanner
	in := []byte("3;x\r\nabc\r\n2\r\nde\r\n0\r\nT: 1\r\n\r\nNEXT")
	type run struct {
		text string
		data bool
	}
	var got []run
	for p := in; len(p) > 0 && !cs.Done(); {
		n, data, err := cs.Step(p)
		if err != nil {
			t.Fatalf("step: %v", err)
		}
		got = append(got, run{string(p[:n]), data})
		p = p[n:]
	}
	want := []run{
		{"3;x\r\n", false}, {"abc", true}, {"\r\n2\r\n", false}, {"de", true}, {"\r\n0\r\nT: 1\r\n\r\n", false},
	}
	if !slices.Equal(got, want) {
		t.Errorf("runs = %+v, want %+v", got, want)
	}
	if n, data, err := cs.Step([]byte("NEXT")); n != 0 || data || err != nil {
		t.Errorf("step after the end = %d, %v, %v; want 0, false, nil", n, data, err)
	}

	// Data arriving in pieces: each step takes what belongs to the chunk.
	cs = ChunkedScanner{}
	if n, _, err := cs.Step([]byte("a\r\n")); n != 3 || err != nil {
		t.Fatalf("size line: %d, %v", n, err)
	}
	for i, want := range []int{4, 4, 2} {
		n, data, err := cs.Step([]byte("0123\r\n0\r\n\r\n")[:4])
		if n != want || !data || err != nil {
			t.Fatalf("data step %d = %d, %v, %v; want %d, true, nil", i, n, data, err, want)
		}
	}
	if n, data, err := cs.Step([]byte("\r\n0\r\n\r\n")); n != 7 || data || err != nil || !cs.Done() {
		t.Fatalf("final framing = %d, %v, %v, done %v", n, data, err, cs.Done())
	}
}

func TestChunkedScanChunked(t *testing.T) {
	body := "4\r\nWiki\r\n0\r\n\r\n"
	for _, tt := range []struct {
		name     string
		in       string
		wantN    int
		wantData int
		wantDone bool
		wantErr  error
	}{
		{"whole body and more", body + "GET / HTTP/1.1\r\n", len(body), 4, true, nil},
		{"part", body[:6], 6, 3, false, nil},
		{"framing only", body[:3], 3, 0, false, nil},
		{"empty", "", 0, 0, false, nil},
		{"error", "4\r\nWikiX", 7, 4, false, errChunkCRLF},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var cs ChunkedScanner
			n, data, err := ScanChunked(&cs, []byte(tt.in))
			if n != tt.wantN || data != tt.wantData || cs.Done() != tt.wantDone || err != tt.wantErr {
				t.Errorf("scanChunked = %d, %d data, done %v, %v; want %d, %d, %v, %v", n, data, cs.Done(), err, tt.wantN, tt.wantData, tt.wantDone, tt.wantErr)
			}
		})
	}
}

// TestScanChunkedNoTrailers checks that a body forwarded without its
// trailers keeps its chunks, last chunk and final empty line, however it
// is split, and loses every trailer field line.
func TestScanChunkedNoTrailers(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"no trailers", "3\r\nabc\r\n0\r\n\r\n", "3\r\nabc\r\n0\r\n\r\n"},
		{"one", "3\r\nabc\r\n0\r\nX-Sum: 3\r\n\r\n", "3\r\nabc\r\n0\r\n\r\n"},
		{"two", "0\r\nContent-Length: 5\r\nHost: x\r\n\r\n", "0\r\n\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for cut := 0; cut <= len(tt.in); cut++ {
				for cut2 := cut; cut2 <= len(tt.in); cut2++ {
					var cs ChunkedScanner
					var got []byte
					for _, part := range []string{tt.in[:cut], tt.in[cut:cut2], tt.in[cut2:]} {
						n, out, _, err := ScanChunkedNoTrailers(&cs, []byte(part))
						if err != nil {
							t.Fatalf("cuts %d %d: %v", cut, cut2, err)
						}
						if n != len(part) {
							t.Fatalf("cuts %d %d: consumed %d of %d", cut, cut2, n, len(part))
						}
						got = append(got, out...)
					}
					if !cs.Done() || string(got) != tt.want {
						t.Fatalf("cuts %d %d: done %v, forwarded %q, want %q", cut, cut2, cs.Done(), got, tt.want)
					}
				}
			}
		})
	}
}
