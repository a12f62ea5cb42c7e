package acl

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
)

// List is a list of entries a rule matches beside its own (its hosts or
// its clients): loaded from a file or a URL by package lists, and
// replaced whole when it is loaded again, while rules match against it.
// A List that never loaded has no entries to match: a rule that allows
// matches nothing by it, one that denies (or reports) matches every
// request by it, so that a list not yet fetched never opens the policy
// (see [Rule.HostLists]). It is safe for concurrent use.
type List struct {
	name string
	kind ListKind
	cur  atomic.Pointer[ListSet]
}

// ListKind is what a list holds.
type ListKind uint8

// The kinds of list.
const (
	// HostList holds destinations, as a rule's hosts: names, "*.name",
	// ".name", IP addresses and CIDR prefixes, one a line, and the names
	// of hosts-file lines ("0.0.0.0 ads.example").
	HostList ListKind = iota
	// ClientList holds client addresses, as a rule's clients: IP
	// addresses and CIDR prefixes, one a line.
	ClientList
)

// String names k as the configuration does: "hosts" or "clients".
func (k ListKind) String() string {
	if k == ClientList {
		return "clients"
	}
	return "hosts"
}

// NewList returns a list named name (its source, for logs and metrics)
// that holds entries of kind, not loaded yet.
func NewList(name string, kind ListKind) *List {
	return &List{name: name, kind: kind}
}

// Name returns the list's name.
func (l *List) Name() string { return l.name }

// Kind returns what the list holds.
func (l *List) Kind() ListKind { return l.kind }

// Set returns the entries in use; nil while the list never loaded.
func (l *List) Set() *ListSet { return l.cur.Load() }

// Store makes s the list's entries, at once for every rule that matches
// against the list. s must be of the list's kind.
func (l *List) Store(s *ListSet) { l.cur.Store(s) }

// ListSet is one loaded version of a list: its names in a hashed table
// (a name and each of its parent domains is one lookup) and its address
// ranges merged and sorted (a binary search). It is immutable.
type ListSet struct {
	names   nameTable
	v4      []range4
	v6      []range6
	entries int
}

// Len returns the number of entries the set was built from, duplicates
// included.
func (s *ListSet) Len() int { return s.entries }

// Bytes returns about how much memory the set holds.
func (s *ListSet) Bytes() int {
	return cap(s.names.arena) + 8*len(s.names.slots) + 8*len(s.names.filter) + 8*len(s.v4) + 32*len(s.v6)
}

// matchName reports whether the normalized name host matches a name
// entry of s: an exact one or a ".name" one for host itself, a
// "*.name" or ".name" one for a domain it is under.
func (s *ListSet) matchName(host []byte) bool {
	if s.names.n == 0 {
		return false
	}
	if s.names.lookup(host)&(flagExact|flagApex) != 0 {
		return true
	}
	for i, c := range host {
		if c == '.' && s.names.lookup(host[i+1:])&(flagUnder|flagApex) != 0 {
			return true
		}
	}
	return false
}

// hasAddrs reports whether s has address entries.
func (s *ListSet) hasAddrs() bool { return len(s.v4) > 0 || len(s.v6) > 0 }

// containsAddr reports whether an address entry of s contains a, an
// unmapped address.
func (s *ListSet) containsAddr(a netip.Addr) bool {
	switch {
	case !a.IsValid():
		return false
	case a.Is4():
		b := a.As4()
		v := binary.BigEndian.Uint32(b[:])
		i, _ := slices.BinarySearchFunc(s.v4, v, func(r range4, v uint32) int { return cmp.Compare(r.hi, v) })
		return i < len(s.v4) && s.v4[i].lo <= v
	default:
		v := u128From(a.As16())
		i, _ := slices.BinarySearchFunc(s.v6, v, func(r range6, v u128) int { return r.hi.cmp(v) })
		return i < len(s.v6) && s.v6[i].lo.cmp(v) <= 0
	}
}

// The flags of a name entry.
const (
	flagExact = 1 << iota // "example.com"
	flagUnder             // "*.example.com"
	flagApex              // ".example.com"
)

// nameTable is a set of names with their flags, built for a million
// entries: the names lie one after the other in one array (a flags
// byte, a length byte, the name), and an open-addressing table of
// 64-bit slots (the arena offset plus one, under 32 bits of the name's
// hash) finds them, at most half full. A filter of a byte per name (two
// bits of one 64-bit word per name, about 4% false positives) answers
// most names that are not there without a look at the table, which is
// too large for the CPU's caches: a name has one lookup per domain it
// is under, and most of them miss. A million names of 20 bytes take
// about 38 MB and no pointer the garbage collector scans.
type nameTable struct {
	seed   maphash.Seed
	arena  []byte
	slots  []uint64
	filter []uint64 // made by seal; nil = none
	n      int
}

// lookup returns the flags of name; 0 when it is not in t.
func (t *nameTable) lookup(name []byte) byte {
	if t.n == 0 {
		return 0
	}
	h := maphash.Bytes(t.seed, name)
	if t.filter != nil {
		w, bits := t.filterBits(h)
		if t.filter[w]&bits != bits {
			return 0
		}
	}
	_, off := t.find(name, h)
	if off == 0 {
		return 0
	}
	return t.arena[off-1]
}

// filterBits returns the filter word of the hash h and its two bits.
func (t *nameTable) filterBits(h uint64) (int, uint64) {
	return int(h & uint64(len(t.filter)-1)), 1<<(h>>58) | 1<<(h>>52&63)
}

// seal makes the filter, once every name is in: a word per 8 names.
func (t *nameTable) seal() {
	if t.n == 0 {
		return
	}
	words := 1
	for words*8 < t.n {
		words *= 2
	}
	t.filter = make([]uint64, words)
	for _, s := range t.slots {
		if s == 0 {
			continue
		}
		off := uint32(s)
		n := uint32(t.arena[off])
		w, bits := t.filterBits(maphash.Bytes(t.seed, t.arena[off+1:off+1+n]))
		t.filter[w] |= bits
	}
}

// find returns the slot index of name, whose hash is h, and its arena
// offset plus one, or the empty slot it would take and 0.
func (t *nameTable) find(name []byte, h uint64) (int, uint32) {
	mask := uint64(len(t.slots) - 1)
	tag := h >> 32
	for i := h & mask; ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			return int(i), 0
		}
		if s>>32 != tag {
			continue
		}
		off := uint32(s)
		e := t.arena[off-1:]
		if n := int(e[1]); n == len(name) && bytes.Equal(e[2:2+n], name) {
			return int(i), off
		}
	}
}

// add adds name (lower case, at most 255 bytes) with flags, or the
// flags to a name already there.
func (t *nameTable) add(name []byte, flags byte) {
	if t.slots == nil {
		t.seed = maphash.MakeSeed()
		t.slots = make([]uint64, 1024)
	}
	h := maphash.Bytes(t.seed, name)
	i, off := t.find(name, h)
	if off != 0 {
		t.arena[off-1] |= flags
		return
	}
	off = uint32(len(t.arena)) + 1
	t.arena = append(t.arena, flags, byte(len(name)))
	t.arena = append(t.arena, name...)
	t.slots[i] = h>>32<<32 | uint64(off)
	t.n++
	if 2*t.n > len(t.slots) {
		t.grow()
	}
}

// grow doubles the slots and places every name again.
func (t *nameTable) grow() {
	old := t.slots
	t.slots = make([]uint64, 2*len(old))
	mask := uint64(len(t.slots) - 1)
	for _, s := range old {
		if s == 0 {
			continue
		}
		off := uint32(s)
		n := int(t.arena[off])
		h := maphash.Bytes(t.seed, t.arena[off+1:off+1+uint32(n)])
		i := h & mask
		for t.slots[i] != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

// range4 and range6 are inclusive address ranges.
type range4 struct{ lo, hi uint32 }
type range6 struct{ lo, hi u128 }

// u128 is an IPv6 address as a number.
type u128 struct{ hi, lo uint64 }

func u128From(b [16]byte) u128 {
	return u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

func (a u128) cmp(b u128) int {
	if c := cmp.Compare(a.hi, b.hi); c != 0 {
		return c
	}
	return cmp.Compare(a.lo, b.lo)
}

// next returns a+1, and whether it did not wrap.
func (a u128) next() (u128, bool) {
	lo := a.lo + 1
	hi := a.hi
	if lo == 0 {
		hi++
	}
	return u128{hi, lo}, lo != 0 || hi != 0
}

// lastOf returns the last address of p, a masked prefix, as a number.
func lastOf6(p netip.Prefix) u128 {
	v := u128From(p.Addr().As16())
	host := 128 - p.Bits()
	switch {
	case host >= 128:
		return u128{^uint64(0), ^uint64(0)}
	case host >= 64:
		return u128{v.hi | (1<<(host-64) - 1), ^uint64(0)}
	case host > 0:
		return u128{v.hi, v.lo | (1<<host - 1)}
	}
	return v
}

// ListStats says what loading a list found.
type ListStats struct {
	// Lines is the number of lines read.
	Lines int
	// Entries is the number of entries taken (a hosts-file line's names
	// counting one each).
	Entries int
	// Bad is the number of lines that were neither an entry, a comment
	// nor blank, and were skipped.
	Bad int
	// FirstBad says what was wrong with the first bad lines (at most
	// three), each "line N: problem".
	FirstBad []string
}

// MaxBadShare is the share of bad lines, in percent of the lines that
// are not comments or blank, past which a list is refused whole as
// malformed: a few odd lines in a list someone else maintains are
// skipped, a list that is mostly not a list (an error page, a file of
// the wrong format) is not loaded.
const MaxBadShare = 1

// Err returns why a list with these stats is refused, or nil: more bad
// lines than MaxBadShare percent of those with content, or bad lines and
// no entry.
func (st ListStats) Err() error {
	if st.Bad == 0 {
		return nil
	}
	if st.Entries > 0 && st.Bad*100 <= MaxBadShare*(st.Entries+st.Bad) {
		return nil
	}
	return fmt.Errorf("%d of %d lines are not entries (%s)", st.Bad, st.Bad+st.Entries, strings.Join(st.FirstBad, "; "))
}

// maxLine bounds a list's line; a longer one is a bad line.
const maxLine = 4096

// ParseList reads a list of kind from r, to its end, and returns its
// entries and what it found. A line holds one entry, and '#' begins a
// comment (as does '!' at the start of a line, and a line in brackets,
// as in Adblock lists). A host list's entry is what a rule's hosts
// entry is (see [Rule.Hosts]), or "||name^" (an Adblock domain rule,
// read as ".name"), or a hosts-file line, an IP address followed by
// names ("0.0.0.0 ads.example tracker.example"), each name an exact
// entry (a name that is an IP address, "0.0.0.0 0.0.0.0", is skipped).
// A client list's entry is an IP address or a CIDR prefix. Lines that
// are none of these are skipped and counted; whether the list is then
// usable is [ListStats.Err]'s to say. The error is r's, which leaves
// the list unloaded.
func ParseList(r io.Reader, kind ListKind) (*ListSet, ListStats, error) {
	b := listBuilder{kind: kind}
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		long := false
		for errors.Is(err, bufio.ErrBufferFull) {
			long = true
			_, err = br.ReadSlice('\n')
		}
		if len(line) > 0 || long {
			b.stats.Lines++
			if long || len(line) > maxLine {
				b.bad("longer than %d bytes", maxLine)
			} else {
				b.line(line)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, b.stats, err
		}
	}
	return b.finish(), b.stats, nil
}

// listBuilder builds a ListSet line by line.
type listBuilder struct {
	kind   ListKind
	stats  ListStats
	set    ListSet
	p4, p6 []netip.Prefix
	fields [][]byte // the fields of the line, reused line after line
	buf    [maxName]byte
}

// appendFields appends the fields of line, split on spaces and tabs
// (what bytes.Fields does for ASCII, without a new slice a line).
func appendFields(dst [][]byte, line []byte) [][]byte {
	start := -1
	for i, c := range line {
		if c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r' || c == '\n' {
			if start >= 0 {
				dst = append(dst, line[start:i])
				start = -1
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		dst = append(dst, line[start:])
	}
	return dst
}

// bad counts the line read last as bad, and says why (format and args)
// when it is one of the first three: the rest are only counted, as a
// million bad lines may come.
func (b *listBuilder) bad(format string, args ...any) {
	b.stats.Bad++
	if len(b.stats.FirstBad) < 3 {
		b.stats.FirstBad = append(b.stats.FirstBad, fmt.Sprintf("line %d: ", b.stats.Lines)+fmt.Sprintf(format, args...))
	}
}

// line takes one line.
func (b *listBuilder) line(line []byte) {
	if i := bytes.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] == '!' || line[0] == '[' && line[len(line)-1] == ']' {
		return
	}
	b.fields = appendFields(b.fields[:0], line)
	fields := b.fields
	if len(fields) == 1 {
		if b.entry(fields[0]) {
			b.stats.Entries++
		}
		return
	}
	if b.kind == HostList && isAddr(fields[0]) {
		b.hostsLine(fields[1:])
		return
	}
	b.bad("%.40q is not one entry", line)
}

// hostsLine takes the names of a hosts-file line, each an exact entry.
// One bad name makes the whole line bad, and none of it is taken.
func (b *listBuilder) hostsLine(names [][]byte) {
	n := 0
	for _, f := range names {
		if isAddr(f) {
			continue
		}
		name, ok := b.lower(f)
		if !ok || !validName(name) {
			b.bad("%.40q is not a host name", f)
			return
		}
		n++
	}
	for _, f := range names {
		if isAddr(f) {
			continue
		}
		name, _ := b.lower(f)
		b.set.names.add(name, flagExact)
	}
	b.stats.Entries += n
}

// lower returns s lower-cased without a trailing dot, in b.buf; false
// when it is too long to be a name.
func (b *listBuilder) lower(s []byte) ([]byte, bool) {
	s = bytes.TrimSuffix(s, []byte{'.'})
	if len(s) > 253 {
		return nil, false
	}
	n := copy(b.buf[:], s)
	lowerASCIIBytes(b.buf[:n])
	return b.buf[:n], true
}

// entry takes one entry, or counts it bad: true when it was taken.
func (b *listBuilder) entry(s []byte) bool {
	entry := s
	if mayBeAddr(s) {
		if p, err := ParsePrefix(string(s)); err == nil {
			if p.Addr().Is4() {
				b.p4 = append(b.p4, p)
			} else {
				b.p6 = append(b.p6, p)
			}
			return true
		}
	}
	if b.kind == ClientList {
		b.bad("%.40q is not an IP address or CIDR prefix", s)
		return false
	}
	flags := byte(flagExact)
	switch {
	case bytes.HasPrefix(s, []byte("||")) && bytes.HasSuffix(s, []byte("^")):
		s, flags = s[2:len(s)-1], flagApex
	case bytes.HasPrefix(s, []byte("*.")):
		s, flags = s[2:], flagUnder
	case bytes.HasPrefix(s, []byte(".")):
		s, flags = s[1:], flagApex
	}
	name, ok := b.lower(s)
	if !ok || !validName(name) {
		b.bad("%.40q is not a host name, *.suffix, .suffix, IP address or CIDR prefix", entry)
		return false
	}
	b.set.names.add(name, flags)
	return true
}

// isAddr reports whether s is an IP address in the standard form.
func isAddr(s []byte) bool {
	if !mayBeAddr(s) {
		return false
	}
	_, err := netip.ParseAddr(string(s))
	return err == nil
}

// mayBeAddr reports whether s may be what ParsePrefix takes: it has a
// ':' or a '/', or its last label begins with a digit (every spelling
// of an IPv4 address does; no host name's top-level domain does).
// Lines that are names skip the parse.
func mayBeAddr(s []byte) bool {
	if bytes.ContainsAny(s, ":/") {
		return true
	}
	s = bytes.TrimRight(s, ".")
	last := s[bytes.LastIndexByte(s, '.')+1:]
	return len(last) == 0 || '0' <= last[0] && last[0] <= '9'
}

// finish returns the set built, its ranges merged.
func (b *listBuilder) finish() *ListSet {
	s := &b.set
	s.entries = b.stats.Entries
	if c := cap(s.names.arena); c > len(s.names.arena)+len(s.names.arena)/8 {
		s.names.arena = slices.Clone(s.names.arena) // what growth left unused
	}
	s.names.seal()
	s.v4 = merge4(b.p4)
	s.v6 = merge6(b.p6)
	return s
}

func merge4(ps []netip.Prefix) []range4 {
	rs := make([]range4, 0, len(ps))
	for _, p := range ps {
		b := p.Addr().As4()
		lo := binary.BigEndian.Uint32(b[:])
		hi := lo | uint32(uint64(1)<<(32-p.Bits())-1)
		rs = append(rs, range4{lo, hi})
	}
	slices.SortFunc(rs, func(a, b range4) int { return cmp.Compare(a.lo, b.lo) })
	out := rs[:0]
	for _, r := range rs {
		if n := len(out); n > 0 && (out[n-1].hi == ^uint32(0) || r.lo <= out[n-1].hi+1) {
			out[n-1].hi = max(out[n-1].hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	return slices.Clip(out)
}

func merge6(ps []netip.Prefix) []range6 {
	rs := make([]range6, 0, len(ps))
	for _, p := range ps {
		rs = append(rs, range6{u128From(p.Addr().As16()), lastOf6(p)})
	}
	slices.SortFunc(rs, func(a, b range6) int { return a.lo.cmp(b.lo) })
	out := rs[:0]
	for _, r := range rs {
		if n := len(out); n > 0 {
			next, ok := out[n-1].hi.next()
			if !ok || r.lo.cmp(next) <= 0 {
				if r.hi.cmp(out[n-1].hi) > 0 {
					out[n-1].hi = r.hi
				}
				continue
			}
		}
		out = append(out, r)
	}
	return slices.Clip(out)
}
