package h2

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// byteSource is a payloadReader over b, and the io.Reader of its frame
// headers.
type byteSource struct{ b []byte }

func (s *byteSource) next(n int) ([]byte, error) {
	if len(s.b) == 0 {
		return nil, io.EOF
	}
	n = min(n, len(s.b))
	p := s.b[:n:n]
	s.b = s.b[n:]
	return p, nil
}

func (s *byteSource) Read(p []byte) (int, error) {
	if len(s.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.b)
	s.b = s.b[n:]
	return n, nil
}

// blockResult is how reading one header block ended.
type blockResult struct {
	class     string // "ok", "stream", "conn", "too large", "read"
	code      http2.ErrCode
	id        uint32
	end       bool
	priority  http2.PriorityParam
	fields    []hpack.HeaderField
	truncated bool
}

func (r blockResult) String() string {
	return fmt.Sprintf("%s %v id=%d end=%v prio=%+v truncated=%v fields=%q", r.class, r.code, r.id, r.end, r.priority, r.truncated, r.fields)
}

// classify sorts the error of a header block's read.
func classify(err error) blockResult {
	var se http2.StreamError
	var ce http2.ConnectionError
	switch {
	case err == nil:
		return blockResult{class: "ok"}
	case errors.As(err, &se):
		return blockResult{class: "stream", code: se.Code, id: se.StreamID}
	case errors.As(err, &ce):
		return blockResult{class: "conn", code: http2.ErrCode(ce)}
	case errors.Is(err, http2.ErrFrameTooLarge):
		return blockResult{class: "too large"}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return blockResult{class: "read"}
	}
	return blockResult{class: "other " + err.Error()}
}

// blocksOurs reads the header blocks in b with blockDecoder, as a
// connection does, until an error other than a stream error.
func blocksOurs(max uint32, b []byte) []blockResult {
	src := &byteSource{b: b}
	fr := http2.NewFramer(nil, src)
	fr.SetMaxReadFrameSize(1 << 14)
	d := newBlockDecoder(max)
	var out []blockResult
	for {
		fh, err := fr.ReadFrameHeader()
		if err == io.EOF { // the input ends between frames
			return out
		}
		if err != nil {
			return append(out, classify(err))
		}
		if fh.Type != http2.FrameHeaders {
			if skip(src, int(fh.Length)) != nil {
				return append(out, blockResult{class: "read"})
			}
			continue
		}
		err = d.read(fh, fr, src)
		r := classify(err)
		if err == nil {
			r.id, r.end, r.priority = d.id, d.endStream(), d.priority
			r.fields, r.truncated = slices.Clone(d.fields()), d.truncated
		}
		out = append(out, r)
		if r.class != "ok" && r.class != "stream" {
			return out
		}
	}
}

// blocksXNet reads the header blocks in b as x/net/http2's Framer does
// with ReadMetaHeaders set, until an error other than a stream error.
func blocksXNet(max uint32, b []byte) []blockResult {
	rd := bytes.NewReader(b)
	fr := http2.NewFramer(nil, rd)
	fr.SetMaxReadFrameSize(1 << 14)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = max
	var out []blockResult
	for {
		fh, err := fr.ReadFrameHeader()
		if err == io.EOF { // the input ends between frames
			return out
		}
		if err != nil {
			return append(out, classify(err))
		}
		if fh.Type != http2.FrameHeaders {
			if _, err := io.CopyN(io.Discard, rd, int64(fh.Length)); err != nil {
				return append(out, blockResult{class: "read"})
			}
			continue
		}
		f, err := fr.ReadFrameForHeader(fh)
		r := classify(err)
		if err == nil {
			mh := f.(*http2.MetaHeadersFrame)
			r.id, r.end, r.priority = mh.StreamID, mh.StreamEnded(), mh.Priority
			r.fields, r.truncated = slices.Clone(mh.Fields), mh.Truncated
		}
		out = append(out, r)
		if r.class != "ok" && r.class != "stream" {
			return out
		}
	}
}

// sameBlocks reports whether ours, blockDecoder's results, are those of
// x/net's Framer, except where the input ends within a frame: the Framer
// reads a frame's whole payload before it decodes any of it, blockDecoder
// decodes as the bytes come, so it may find a connection error in them
// first.
func sameBlocks(ours, xnet []blockResult) bool {
	if len(ours) != len(xnet) {
		return false
	}
	for i := range ours {
		a, b := ours[i], xnet[i]
		if b.class == "read" && a.class == "conn" {
			continue
		}
		if a.class != b.class || a.code != b.code || a.id != b.id || a.end != b.end ||
			a.priority != b.priority || a.truncated != b.truncated || !slices.Equal(a.fields, b.fields) {
			return false
		}
	}
	return true
}

// FuzzHeaderBlock checks blockDecoder against x/net/http2's Framer with
// ReadMetaHeaders set: on any frames, with any header list budget, both
// must decode the same fields and refuse the same blocks, with the same
// errors.
func FuzzHeaderBlock(f *testing.F) {
	for _, s := range headerBlockSeeds() {
		f.Add(s.max, s.b)
	}
	f.Fuzz(func(t *testing.T, max uint16, b []byte) {
		ours, xnet := blocksOurs(uint32(max), b), blocksXNet(uint32(max), b)
		if !sameBlocks(ours, xnet) {
			t.Fatalf("frames %q, budget %d:\nblockDecoder %v\nx/net Framer %v", b, max, ours, xnet)
		}
	})
}

// headerBlockSeed is an input of FuzzHeaderBlock.
type headerBlockSeed struct {
	name string
	max  uint16
	b    []byte
}

// headerBlockSeeds returns the seeds of FuzzHeaderBlock, which are also
// the cases of TestHeaderBlockMatchesFramer.
func headerBlockSeeds() []headerBlockSeed {
	// Each seed's blocks are encoded with an HPACK encoder of its own.
	frames := func(write func(fr *http2.Framer, enc func(...string) []byte)) []byte {
		var out, hb bytes.Buffer
		fr := http2.NewFramer(&out, nil)
		fr.AllowIllegalWrites = true
		he := hpack.NewEncoder(&hb)
		enc := func(kv ...string) []byte {
			hb.Reset()
			for i := 0; i+1 < len(kv); i += 2 {
				he.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
			}
			return append([]byte(nil), hb.Bytes()...)
		}
		write(fr, enc)
		return out.Bytes()
	}
	get := []string{":method", "GET", ":scheme", "http", ":authority", "example.com", ":path", "/", "accept", "*/*"}
	return []headerBlockSeed{
		{"get", 4096, frames(func(fr *http2.Framer, enc func(...string) []byte) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, EndStream: true, BlockFragment: enc(get...)})
		})},
		{"get_twice_indexed", 4096, frames(func(fr *http2.Framer, enc func(...string) []byte) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, EndStream: true, BlockFragment: enc(get...)})
			fr.WritePing(false, [8]byte{})
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, EndHeaders: true, EndStream: true, BlockFragment: enc(get...)})
		})},
		{"padded_priority_continuations", 4096, frames(func(fr *http2.Framer, enc func(...string) []byte) {
			b := enc(append(get, "user-agent", "fuzz", "cookie", "a=b", "cookie", "c=d")...)
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: b[:3], PadLength: 7,
				Priority: http2.PriorityParam{StreamDep: 1, Exclusive: true, Weight: 9}})
			fr.WriteContinuation(5, false, b[3:10])
			fr.WriteContinuation(5, false, nil)
			fr.WriteContinuation(5, true, b[10:])
		})},
		{"truncated_with_trailer_field", 100, frames(func(fr *http2.Framer, enc func(...string) []byte) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true,
				BlockFragment: enc(":method", "POST", ":scheme", "http", ":authority", "x", ":path", "/", "trailer", "a, b, c", "x-long", "0123456789abcdef0123456789abcdef")})
		})},
		{"over_budget_continuation", 64, frames(func(fr *http2.Framer, enc func(...string) []byte) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(":method", "GET", "x-a", "0123456789abcdef0123456789abcdef0123456789abcdef")})
			fr.WriteContinuation(1, true, enc("x-b", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"))
		})},
		{"uppercase_name", 4096, frames(func(fr *http2.Framer, enc func(...string) []byte) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, BlockFragment: enc(":method", "GET", "X-Upper", "v")})
		})},
		{"pseudo_after_regular_then_continuation", 4096, frames(func(fr *http2.Framer, enc func(...string) []byte) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc("accept", "*/*", ":method", "GET")})
			fr.WriteContinuation(1, true, enc("x-a", "b"))
		})},
		{"invalid_value_repeated_pseudo_status", 4096, frames(func(fr *http2.Framer, enc func(...string) []byte) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, BlockFragment: enc(":method", "GET", "x-a", "a\r\nb")})
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, EndHeaders: true, BlockFragment: enc(":method", "GET", ":method", "PUT")})
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, EndHeaders: true, BlockFragment: enc(":method", "GET", ":status", "200")})
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 7, EndHeaders: true, BlockFragment: enc(":foo", "x")})
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 9, EndHeaders: true, BlockFragment: enc(":status", "200")})
		})},
		{"bad_padding_short_priority", 4096, frames(func(fr *http2.Framer, enc func(...string) []byte) {
			fr.WriteRawFrame(http2.FrameHeaders, http2.FlagHeadersEndHeaders|http2.FlagHeadersPadded, 1, []byte{9, 0x82})
			fr.WriteRawFrame(http2.FrameHeaders, http2.FlagHeadersEndHeaders|http2.FlagHeadersPriority, 3, []byte{0, 0})
		})},
		{"stream_zero", 4096, frames(func(fr *http2.Framer, enc func(...string) []byte) {
			fr.WriteRawFrame(http2.FrameHeaders, http2.FlagHeadersEndHeaders, 0, []byte{0x82})
		})},
		{"bad_hpack_index", 4096, frames(func(fr *http2.Framer, enc func(...string) []byte) {
			fr.WriteRawFrame(http2.FrameHeaders, http2.FlagHeadersEndHeaders, 1, []byte{0xff, 0x7f})
		})},
		{"continuation_other_stream", 4096, frames(func(fr *http2.Framer, enc func(...string) []byte) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(":method", "GET")})
			fr.WriteContinuation(3, true, enc("x-a", "b"))
		})},
		{"data_within_block", 4096, frames(func(fr *http2.Framer, enc func(...string) []byte) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(":method", "GET")})
			fr.WriteData(1, true, []byte("x"))
		})},
		{"cut_in_fragment", 4096, frames(func(fr *http2.Framer, enc func(...string) []byte) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, BlockFragment: enc(get...)})
		})[:15]},
	}
}

// TestHeaderBlockMatchesFramer runs FuzzHeaderBlock's seeds, and checks
// that each ended as it was made to.
func TestHeaderBlockMatchesFramer(t *testing.T) {
	want := map[string]string{
		"get":                                    "[ok]",
		"get_twice_indexed":                      "[ok ok]",
		"padded_priority_continuations":          "[ok]",
		"truncated_with_trailer_field":           "[ok]",
		"over_budget_continuation":               "[conn]",
		"uppercase_name":                         "[stream]",
		"pseudo_after_regular_then_continuation": "[conn]",
		"invalid_value_repeated_pseudo_status":   "[stream stream stream stream ok]",
		"bad_padding_short_priority":             "[stream read]",
		"stream_zero":                            "[conn]",
		"bad_hpack_index":                        "[conn]",
		"continuation_other_stream":              "[conn]",
		"data_within_block":                      "[conn]",
		"cut_in_fragment":                        "[read]",
	}
	for _, s := range headerBlockSeeds() {
		t.Run(s.name, func(t *testing.T) {
			ours, xnet := blocksOurs(uint32(s.max), s.b), blocksXNet(uint32(s.max), s.b)
			if !sameBlocks(ours, xnet) {
				t.Fatalf("blockDecoder %v\nx/net Framer %v", ours, xnet)
			}
			var classes []string
			for _, r := range ours {
				classes = append(classes, r.class)
			}
			if got := fmt.Sprint(classes); got != want[s.name] {
				t.Errorf("ended %s, want %s: %v", got, want[s.name], ours)
			}
		})
	}
}

// resettable is an io.Reader that reads b again after each reset.
type resettable struct {
	b []byte
	r bytes.Reader
}

func (r *resettable) Read(p []byte) (int, error) { return r.r.Read(p) }
func (r *resettable) reset()                     { r.r.Reset(r.b) }

// BenchmarkHeaderBlock measures the decoding of a request's header block
// as a connection decodes it from its second request on (every field in
// the HPACK tables), by blockDecoder and by x/net/http2's Framer with
// ReadMetaHeaders set.
func BenchmarkHeaderBlock(b *testing.B) {
	var hb, out bytes.Buffer
	he := hpack.NewEncoder(&hb)
	fields := []string{":method", "GET", ":scheme", "http", ":authority", "127.0.0.1:8080", ":path", "/1k",
		"proxy-authorization", "Basic dXNlcjpwYXNzd29yZA==", "user-agent", "load/1.0", "accept", "*/*"}
	enc := func() []byte {
		hb.Reset()
		for i := 0; i < len(fields); i += 2 {
			he.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
		return append([]byte(nil), hb.Bytes()...)
	}
	frame := func(block []byte) []byte {
		out.Reset()
		http2.NewFramer(&out, nil).WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, EndStream: true, BlockFragment: block})
		return append([]byte(nil), out.Bytes()...)
	}
	first, indexed := frame(enc()), frame(enc())
	b.Run("blockDecoder", func(b *testing.B) {
		src := &byteSource{}
		fr := http2.NewFramer(nil, src)
		d := newBlockDecoder(1 << 20)
		b.ReportAllocs()
		for i := 0; i < b.N+1; i++ {
			if i == 0 {
				src.b = first
			} else {
				src.b = indexed
			}
			fh, err := fr.ReadFrameHeader()
			if err == nil {
				err = d.read(fh, fr, src)
			}
			if err != nil || len(d.fields()) != len(fields)/2 {
				b.Fatalf("%v, %d fields", err, len(d.fields()))
			}
			putFieldBuf(d.take()) // as the request's stream does
			if i == 0 {
				b.ResetTimer()
			}
		}
	})
	b.Run("Framer", func(b *testing.B) {
		src := &resettable{b: first}
		src.reset()
		fr := http2.NewFramer(nil, src)
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		fr.MaxHeaderListSize = 1 << 20
		b.ReportAllocs()
		for i := 0; i < b.N+1; i++ {
			f, err := fr.ReadFrame()
			if err != nil || len(f.(*http2.MetaHeadersFrame).Fields) != len(fields)/2 {
				b.Fatalf("%v", err)
			}
			if i == 0 {
				src.b = indexed
				b.ResetTimer()
			}
			src.reset()
		}
	})
}
