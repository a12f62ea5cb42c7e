package admin

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
)

// ui holds the page: index.html, filled in with the state at the time of
// the request (readable without JavaScript, see [renderPage]), and the script
// and style sheet it loads, which poll the API and draw the charts. No
// build step makes them and nothing is fetched from elsewhere.
//
//go:embed ui/index.html ui/app.js ui/style.css ui/favicon.svg
var ui embed.FS

// asset is a file of ui served under /ui/.
type asset struct {
	body  []byte
	ctype string
	etag  string
}

// assets are the files served under /ui/, by name.
var assets = func() map[string]asset {
	out := make(map[string]asset)
	for _, name := range []string{"app.js", "style.css", "favicon.svg"} {
		b, err := ui.ReadFile("ui/" + name)
		if err != nil {
			panic(err) // embedded above
		}
		sum := sha256.Sum256(b)
		out[name] = asset{body: b, ctype: mime.TypeByExtension(path.Ext(name)), etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	out["app.js"] = asset{body: out["app.js"].body, ctype: "text/javascript; charset=utf-8", etag: out["app.js"].etag}
	return out
}()

// securityHeaders are set on the page and its assets: nothing but this
// listener may be loaded, framed, or sent to.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
		"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
}

// serveAsset serves a file of ui under /ui/.
func serveAsset(w http.ResponseWriter, r *http.Request) {
	a, ok := assets[r.PathValue("file")]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	securityHeaders(h)
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", a.etag)
	if r.Header.Get("If-None-Match") == a.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", a.ctype)
	h.Set("Content-Length", strconv.Itoa(len(a.body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(a.body)
	}
}

// pageData is what ui/index.html shows.
type pageData struct {
	Summary *Summary
	Totals  Totals
	Users   *Users
	Quotas  *Quotas
	Parents *Parents
	Log     *Log
	Filter  LogFilter
}

// servePage serves / : the page with the state now.
func (c *Console) servePage(w http.ResponseWriter, r *http.Request) {
	d := pageData{Summary: c.summary(r), Totals: c.totals(), Users: c.users(defaultListLimit),
		Quotas: c.quotas(100), Parents: c.parents(), Log: c.logTail(r), Filter: logFilter(r)}
	body := renderPage(&d)
	h := w.Header()
	securityHeaders(h)
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(body)
	}
}

// formatBytes writes a count of bytes (an integer of any type) with a
// binary unit: "512 B", "1.5 KiB".
func formatBytes(v any) string {
	var n uint64
	switch x := v.(type) {
	case uint64:
		n = x
	case int64:
		n = uint64(max(x, 0))
	case int:
		n = uint64(max(x, 0))
	}
	const unit = 1024
	if n < unit {
		return strconv.FormatUint(n, 10) + " B"
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// formatCount writes an integer in decimal, grouped by thousands with
// commas, as the script does ("12,345").
func formatCount(v any) string {
	var s string
	switch n := v.(type) {
	case uint64:
		s = strconv.FormatUint(n, 10)
	case int64:
		s = strconv.FormatInt(n, 10)
	case int:
		s = strconv.Itoa(n)
	default:
		return fmt.Sprint(v)
	}
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// formatTime writes t as the page shows times: local, to the second.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05 MST")
}
