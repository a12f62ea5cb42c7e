package admin

import (
	"fmt"
	"html"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// The page is ui/index.html with its slots, {{name}}, filled in by Go
// code rather than by html/template: a program that links text/template
// keeps every exported method of every type it links (the template may
// call any of them by name), which made the binary 8 MB larger. Every
// value from the proxy's state is escaped here by [pageWriter.text].

// pageParts are ui/index.html's static pieces and, between them, its
// slots: parts[i] comes before slots[i].
var pageParts, pageSlots = func() ([]string, []pageSlot) {
	b, err := ui.ReadFile("ui/index.html")
	if err != nil {
		panic(err) // embedded
	}
	var parts []string
	var slots []pageSlot
	s := string(b)
	for {
		i := strings.Index(s, "{{")
		if i < 0 {
			return append(parts, s), slots
		}
		j := strings.Index(s[i:], "}}")
		if j < 0 {
			panic("admin: ui/index.html: an unclosed {{")
		}
		name := s[i+2 : i+j]
		fill, ok := slotFills[name]
		if !ok {
			panic("admin: ui/index.html: unknown slot {{" + name + "}}")
		}
		parts = append(parts, s[:i])
		slots = append(slots, fill)
		s = s[i+j+2:]
	}
}()

// pageSlot writes one slot of the page.
type pageSlot func(w *pageWriter, d *pageData)

// pageWriter builds the page.
type pageWriter struct{ strings.Builder }

// text writes s escaped for HTML text and attribute values.
func (w *pageWriter) text(s string) { w.WriteString(html.EscapeString(s)) }

// raw writes markup.
func (w *pageWriter) raw(s string) { w.WriteString(s) }

// renderPage fills ui/index.html with d.
func renderPage(d *pageData) []byte {
	var w pageWriter
	w.Grow(16 << 10)
	for i, fill := range pageSlots {
		w.raw(pageParts[i])
		fill(&w, d)
	}
	w.raw(pageParts[len(pageParts)-1])
	return []byte(w.String())
}

// text returns a slot writing the escaped string f(d).
func text(f func(d *pageData) string) pageSlot {
	return func(w *pageWriter, d *pageData) { w.text(f(d)) }
}

// slotFills are the slots of ui/index.html by name.
var slotFills = map[string]pageSlot{
	"instance": text(func(d *pageData) string { return d.Summary.Instance }),
	"version":  text(func(d *pageData) string { return d.Summary.Version }),
	"started":  text(func(d *pageData) string { return formatTime(d.Summary.Started) }),
	"workers":  text(func(d *pageData) string { return strconv.Itoa(d.Summary.Workers) }),
	"cluster": text(func(d *pageData) string {
		switch {
		case !d.Summary.Cluster:
			return "none"
		case d.Summary.RedisUp:
			return "quotas shared through Redis, in sync"
		}
		return "quotas shared through Redis, Redis unreachable: counting locally"
	}),
	"access_log": text(func(d *pageData) string { return d.Summary.AccessLog }),
	"last_reload": text(func(d *pageData) string {
		r := d.Summary.LastReload
		if r == nil {
			return "none since start"
		}
		state := "ok"
		if !r.OK {
			state = "refused: " + r.Error
		}
		return state + " · " + formatTime(r.At) + " · " + r.By
	}),
	"you": text(func(d *pageData) string {
		if d.Summary.You == "" {
			return "loopback, no admin_access"
		}
		return d.Summary.You
	}),
	"reload_button": func(w *pageWriter, d *pageData) {
		if d.Summary.CanReload {
			w.raw(`<button id="reload" type="button" class="js-only">Reload configuration</button>`)
		}
	},
	"listeners": func(w *pageWriter, d *pageData) {
		for _, l := range d.Summary.Listeners {
			w.raw("<tr>")
			for _, v := range []string{l.Name, l.Protocol, l.Address, l.Auth, yesNo(l.HTTP3)} {
				w.raw("<td>")
				w.text(v)
				w.raw("</td>")
			}
			w.raw("</tr>\n    ")
		}
		if len(d.Summary.Listeners) == 0 {
			w.raw(`<tr><td colspan="5" class="empty">no listener</td></tr>`)
		}
	},
	"total_requests":   text(func(d *pageData) string { return formatCount(d.Totals.Requests) }),
	"total_tunnels":    text(func(d *pageData) string { return formatCount(d.Totals.Tunnels) }),
	"bytes_up_exact":   text(func(d *pageData) string { return strconv.FormatUint(d.Totals.BytesUp, 10) }),
	"bytes_up":         text(func(d *pageData) string { return formatBytes(d.Totals.BytesUp) }),
	"bytes_down_exact": text(func(d *pageData) string { return strconv.FormatUint(d.Totals.BytesDown, 10) }),
	"bytes_down":       text(func(d *pageData) string { return formatBytes(d.Totals.BytesDown) }),
	"open_connections": text(func(d *pageData) string { return formatCount(d.Totals.ConnectionsOpen) }),
	"open_tunnels":     text(func(d *pageData) string { return formatCount(d.Totals.TunnelsOpen) }),
	"total_refusals":   text(func(d *pageData) string { return formatCount(d.Totals.RefusalsTotal) }),
	"refusals_from": text(func(d *pageData) string {
		if d.Totals.RefusalsFrom == "metrics" {
			return "(from the metrics: the access log is off)"
		}
		return "(from the access log)"
	}),
	"refusals": func(w *pageWriter, d *pageData) {
		for _, reason := range slices.Sorted(maps.Keys(d.Totals.Refusals)) {
			w.raw(`<tr data-reason="`)
			w.text(reason)
			w.raw(`"><td>`)
			w.text(reason)
			w.raw(`</td><td class="n">`)
			w.text(formatCount(d.Totals.Refusals[reason]))
			w.raw("</td></tr>\n      ")
		}
		if len(d.Totals.Refusals) == 0 {
			w.raw(`<tr><td colspan="2" class="empty">none</td></tr>`)
		}
	},
	"statuses": func(w *pageWriter, d *pageData) {
		for _, class := range slices.Sorted(maps.Keys(d.Totals.Status)) {
			n := d.Totals.Status[class]
			if n == 0 {
				continue
			}
			w.raw(`<tr data-status="`)
			w.text(class)
			w.raw(`"><td>`)
			w.text(class)
			w.raw(`</td><td class="n">`)
			w.text(formatCount(n))
			w.raw("</td></tr>\n      ")
		}
	},
	"protocols": func(w *pageWriter, d *pageData) {
		for _, p := range slices.Sorted(maps.Keys(d.Totals.Protocols)) {
			t := d.Totals.Protocols[p]
			w.raw(`<tr data-protocol="`)
			w.text(p)
			w.raw(`"><td>`)
			w.text(p)
			w.raw("</td>")
			for _, v := range []string{formatCount(t.Requests), formatCount(t.Tunnels), formatBytes(t.BytesUp), formatBytes(t.BytesDown), formatCount(t.Open)} {
				w.raw(`<td class="n">`)
				w.text(v)
				w.raw("</td>")
			}
			w.raw("</tr>\n      ")
		}
	},
	"per_user_hidden": func(w *pageWriter, d *pageData) {
		if d.Users.PerUser {
			w.raw(" hidden")
		}
	},
	"users_by_bytes": func(w *pageWriter, d *pageData) {
		writeUsers(w, "users-by-bytes", "By bytes", d.Users.ByBytes)
	},
	"users_by_requests": func(w *pageWriter, d *pageData) {
		writeUsers(w, "users-by-requests", "By requests", d.Users.ByRequests)
	},
	"quota_count": text(func(d *pageData) string {
		s := strconv.Itoa(d.Quotas.Count) + " counters"
		if d.Quotas.Cluster {
			s += ", totals of every instance"
		}
		return s
	}),
	"quotas": func(w *pageWriter, d *pageData) {
		for _, q := range d.Quotas.Counters {
			w.raw(`<tr data-rule="`)
			w.text(q.Rule)
			w.raw(`" data-scope="`)
			w.text(q.Scope)
			w.raw(`"`)
			if q.Used >= 1 {
				w.raw(` class="spent"`)
			}
			w.raw("><td>")
			w.text(q.Rule)
			w.raw("</td><td>")
			w.text(q.Scope)
			w.raw(`</td><td><meter min="0" max="1" low="0.75" high="0.95" optimum="0" value="`)
			w.text(strconv.FormatFloat(q.Used, 'g', -1, 64))
			w.raw(`"></meter></td><td class="n">`)
			w.text(formatCount(q.RequestsUsed))
			if q.RequestsLimit != 0 {
				w.text(" / " + formatCount(q.RequestsLimit))
			}
			w.raw(`</td><td class="n">`)
			w.text(formatBytes(q.BytesUsed))
			if q.BytesLimit != 0 {
				w.text(" / " + formatBytes(q.BytesLimit))
			}
			w.raw("</td><td>")
			w.text(formatTime(q.Reset))
			w.raw("</td><td></td></tr>\n    ")
		}
		if len(d.Quotas.Counters) == 0 {
			w.raw(`<tr><td colspan="7" class="empty">no quota counted yet</td></tr>`)
		}
	},
	"parents": func(w *pageWriter, d *pageData) {
		for _, p := range d.Parents.Parents {
			state := "down"
			if p.Up {
				state = "up"
			}
			w.raw(`<tr data-parent="`)
			w.text(p.Name)
			w.raw(`" class="` + state + `"><td>`)
			w.text(p.Name)
			w.raw(`</td><td class="state">` + state + `</td><td class="n">`)
			w.text(formatCount(p.Requests))
			w.raw(`</td><td class="n">`)
			w.text(formatCount(p.Failures))
			w.raw(`</td><td class="n">`)
			w.text(strconv.FormatFloat(p.DialMS, 'f', 1, 64))
			w.raw(" ms</td></tr>\n    ")
		}
		if len(d.Parents.Parents) == 0 {
			w.raw(`<tr><td colspan="5" class="empty">no parent proxy</td></tr>`)
		}
	},
	"filter_user":   text(func(d *pageData) string { return d.Filter.User }),
	"filter_host":   text(func(d *pageData) string { return d.Filter.Host }),
	"filter_status": text(func(d *pageData) string { return d.Filter.Status }),
	"filter_reason": text(func(d *pageData) string { return d.Filter.Reason }),
	"log_hidden": func(w *pageWriter, d *pageData) {
		if d.Log.Enabled {
			w.raw(" hidden")
		}
	},
	"log_lines": func(w *pageWriter, d *pageData) {
		for _, r := range d.Log.Records {
			w.raw("<li")
			if r.Reason != "" {
				w.raw(` class="refused"`)
			}
			w.raw("><code>")
			w.text(r.Line)
			w.raw("</code></li>\n  ")
		}
	},
}

// writeUsers writes a table of users.
func writeUsers(w *pageWriter, id, caption string, rows []UserRow) {
	w.raw(`<table id="` + id + `" class="users">
  <caption>` + caption + `</caption>
  <thead><tr><th>user</th><th class="n">requests</th><th class="n">up</th><th class="n">down</th><th>quota</th><th></th></tr></thead>
  <tbody>
  `)
	for _, u := range rows {
		w.raw(`<tr data-user="`)
		w.text(u.Name)
		w.raw(`"><td>`)
		w.text(u.Name)
		w.raw(`</td><td class="n req">`)
		w.text(formatCount(u.Requests))
		w.raw(`</td><td class="n">`)
		w.text(formatBytes(u.BytesUp))
		w.raw(`</td><td class="n">`)
		w.text(formatBytes(u.BytesDown))
		w.raw(`</td><td class="quota">`)
		for _, q := range u.Quotas {
			w.raw("<span>")
			w.text(q.Rule + ":")
			if q.RequestsLimit != 0 {
				w.text(fmt.Sprintf(" %s/%s req", formatCount(q.RequestsUsed), formatCount(q.RequestsLimit)))
			}
			if q.BytesLimit != 0 {
				w.text(fmt.Sprintf(" %s/%s", formatBytes(q.BytesUsed), formatBytes(q.BytesLimit)))
			}
			w.raw("</span>")
		}
		w.raw("</td><td></td></tr>\n  ")
	}
	if len(rows) == 0 {
		w.raw(`<tr><td colspan="6" class="empty">nobody yet</td></tr>`)
	}
	w.raw("\n  </tbody>\n</table>")
}

// yesNo is "yes" or "no".
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
