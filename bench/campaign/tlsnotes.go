//go:build linux

package main

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/rustle-proxy/rustle/bench/report"
)

// keyExchangeNotes says, for every proxy the load tool made TLS
// handshakes with, which key exchanges those used (Go's client offers
// X25519MLKEM768 first, with a key share for it and one for X25519) and
// the key of the certificate it presented: what each side really
// negotiated, whatever its TLS library. The tests whose client offers
// other key exchanges (testDef.curves) get notes of their own.
func keyExchangeNotes(c report.Campaign) []string {
	offers := map[string]string{} // test ID → its -curves, where set
	for _, t := range tests {
		if t.curves != "" {
			offers[t.id] = t.curves
		}
	}
	out := keyExchangeNotesFor(c, func(r report.Run) bool { return offers[r.Test] == "" }, "the load tool offers X25519MLKEM768 first, then X25519")
	var ids []string
	for _, t := range tests {
		if offers[t.id] != "" {
			ids = append(ids, t.id)
		}
	}
	for _, id := range ids {
		out = append(out, keyExchangeNotesFor(c, func(r report.Run) bool { return r.Test == id }, "in "+id+", where the load tool offers "+offers[id]+" alone")...)
	}
	return out
}

// keyExchangeNotesFor returns the notes of keyExchangeNotes over the runs
// for which take is true, saying what the client offered in them.
func keyExchangeNotesFor(c report.Campaign, take func(report.Run) bool, offered string) []string {
	curves := map[string]map[string]int64{}
	certs := map[string][]string{}
	for _, r := range c.Runs {
		if len(r.TLSCurves) == 0 || !take(r) {
			continue
		}
		if curves[r.Proxy] == nil {
			curves[r.Proxy] = map[string]int64{}
		}
		for k, n := range r.TLSCurves {
			curves[r.Proxy][k] += n
		}
		if r.TLSCert != "" && !slices.Contains(certs[r.Proxy], r.TLSCert) {
			certs[r.Proxy] = append(certs[r.Proxy], r.TLSCert)
		}
	}
	var out []string
	for _, p := range c.Proxies {
		seen := curves[p.Name]
		if len(seen) == 0 {
			continue
		}
		var total int64
		for _, n := range seen {
			total += n
		}
		// Most used first, then by name.
		names := slices.SortedFunc(maps.Keys(seen), func(a, b string) int {
			return cmp.Or(cmp.Compare(seen[b], seen[a]), cmp.Compare(a, b))
		})
		parts := make([]string, len(names))
		for i, k := range names {
			parts[i] = fmt.Sprintf("%s in %s", k, report.FormatValue(float64(seen[k]), 0))
		}
		cert := "not seen"
		if len(certs[p.Name]) > 0 {
			cert = strings.Join(certs[p.Name], ", ")
		}
		out = append(out, fmt.Sprintf("%s's TLS handshakes (%s): key exchange %s of %s; certificate %s.",
			p.Label, offered, strings.Join(parts, ", "), report.FormatValue(float64(total), 0), cert))
	}
	return out
}
