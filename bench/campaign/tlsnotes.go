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
// negotiated, whatever its TLS library.
func keyExchangeNotes(c report.Campaign) []string {
	curves := map[string]map[string]int64{}
	certs := map[string][]string{}
	for _, r := range c.Runs {
		if len(r.TLSCurves) == 0 {
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
		out = append(out, fmt.Sprintf("%s's TLS handshakes (the load tool offers X25519MLKEM768 first, then X25519): key exchange %s of %s; certificate %s.",
			p.Label, strings.Join(parts, ", "), report.FormatValue(float64(total), 0), cert))
	}
	return out
}
