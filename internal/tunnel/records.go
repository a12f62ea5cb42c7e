package tunnel

// recordHeaderLen is the length of a TLS record header: type (1),
// legacy version (2), length (2).
const recordHeaderLen = 5

// RecordBounds follows TLS record boundaries in a byte stream by
// parsing the record headers that pass: a reader that reads at most
// Limit bytes at a time, and tells Advance what it read, never reads
// past the end of a record's header or body, so that crypto/tls above
// it holds none of the bytes of a record it has not asked for. Its zero
// value is at the start of a record. It is owned by the goroutine that
// reads the stream.
type RecordBounds struct {
	hdr  [recordHeaderLen]byte // the next record's header, hdrN bytes of it so far
	hdrN int
	body int // bytes of the current record's body still to come
}

// Limit returns how many bytes may be read now without going past the
// end of the current record's header or body.
func (b *RecordBounds) Limit() int {
	if b.body > 0 {
		return b.body
	}
	return recordHeaderLen - b.hdrN
}

// Advance accounts for bytes p that were read from the stream.
func (b *RecordBounds) Advance(p []byte) {
	for len(p) > 0 {
		if b.body > 0 {
			k := min(b.body, len(p))
			b.body -= k
			p = p[k:]
			continue
		}
		k := copy(b.hdr[b.hdrN:], p)
		b.hdrN += k
		p = p[k:]
		if b.hdrN == recordHeaderLen {
			b.body = int(b.hdr[3])<<8 | int(b.hdr[4])
			b.hdrN = 0
		}
	}
}
