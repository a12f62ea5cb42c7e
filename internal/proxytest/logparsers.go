package proxytest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// GoAccessSquidArgs are the goaccess arguments that read Squid's native
// access.log lines: goaccess's own SQUID preset without the syslog
// prefix that goaccess 1.7 expects before each line. They ignore fields
// after the URL, so they read lines with fields appended too.
var GoAccessSquidArgs = []string{"--log-format=%x.%^ %~%L %h %^/%s %b %m %U", "--date-format=%s", "--time-format=%s"}

// GoAccessCounts is what goaccess's report says of a log.
type GoAccessCounts struct {
	// Total is the number of lines read; Valid those counted as
	// requests, Failed those refused.
	Total, Valid, Failed int
	// Bandwidth is the sum of the valid lines' byte counts.
	Bandwidth int64
}

// GoAccess runs goaccess (Debian's goaccess, skipped or failed as
// RequireTool says when missing) over the log at path with args, which
// name the log format, and returns the counts of its JSON report. It
// logs the lines goaccess refused.
func GoAccess(t testing.TB, path string, args ...string) GoAccessCounts {
	t.Helper()
	bin := RequireTool(t, "goaccess", "goaccess")
	dir := t.TempDir()
	report, invalid := filepath.Join(dir, "report.json"), filepath.Join(dir, "invalid.log")
	args = append([]string{path, "--no-global-config", "--no-progress", "-o", report, "--invalid-requests=" + invalid}, args...)
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("goaccess %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("goaccess wrote no report: %v\n%s", err, out)
	}
	var rep struct {
		General struct {
			Total     int   `json:"total_requests"`
			Valid     int   `json:"valid_requests"`
			Failed    int   `json:"failed_requests"`
			Bandwidth int64 `json:"bandwidth"`
		} `json:"general"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("goaccess report %s: %v", report, err)
	}
	if inv, _ := os.ReadFile(invalid); len(inv) > 0 {
		t.Logf("lines goaccess refused:\n%s", inv)
	}
	g := rep.General
	return GoAccessCounts{Total: g.Total, Valid: g.Valid, Failed: g.Failed, Bandwidth: g.Bandwidth}
}

// CalamarisReport is what calamaris's report says of a Squid log.
type CalamarisReport struct {
	// Parsed and Invalid count the lines it read and those it could not
	// parse; Requests the requests it counted, Bytes their bytes.
	Parsed, Invalid, Requests int
	Bytes                     int64
	// Codes counts the requests by Squid result code (TCP_MISS,
	// NONE_NONE_TIMEDOUT).
	Codes map[string]int
	// Text is the whole report.
	Text string
}

// calamarisCode matches a row of calamaris's "Incoming TCP-requests by
// status": a Squid result code and its count.
var calamarisCode = regexp.MustCompile(`(?m)^ ((?:TCP|NONE)_[A-Z_]+) +(\d+) `)

// Calamaris runs calamaris (Debian's calamaris, a Squid log analyser;
// skipped or failed as RequireTool says when missing) over the log at
// path read as input ("squid": exactly Squid's ten fields;
// "squid-extended": more may follow) and returns its report.
func Calamaris(t testing.TB, path, input string) CalamarisReport {
	t.Helper()
	bin := RequireTool(t, "calamaris", "calamaris")
	log, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(bin, "-a", "-f", input)
	cmd.Stdin = log
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("calamaris: %v\n%s", err, out)
	}
	rep := CalamarisReport{Codes: map[string]int{}, Text: string(out)}
	num := func(re string) int64 {
		t.Helper()
		m := regexp.MustCompile(re).FindStringSubmatch(rep.Text)
		if m == nil {
			t.Fatalf("calamaris report has no %q:\n%s", re, rep.Text)
		}
		n, _ := strconv.ParseInt(m[1], 10, 64)
		return n
	}
	rep.Parsed = int(num(`lines parsed: +lines +(\d+)`))
	rep.Invalid = int(num(`invalid lines: +lines +(\d+)`))
	rep.Requests = int(num(`Total amount: +requests +(\d+)`))
	rep.Bytes = num(`Total Bandwidth: +Byte +(\d+)`)
	for _, m := range calamarisCode.FindAllStringSubmatch(rep.Text, -1) {
		n, _ := strconv.Atoi(m[2])
		rep.Codes[m[1]] += n
	}
	return rep
}
