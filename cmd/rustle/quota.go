package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/rustle-proxy/rustle/internal/admin"
	"github.com/rustle-proxy/rustle/internal/config"
)

// quotaTimeout bounds `rustle quota`'s call to the admin listener.
const quotaTimeout = 5 * time.Second

// quotaCmd runs `rustle quota [-c FILE] [--admin ADDR] [--token-file
// FILE] USER`: it asks the running rustle's admin listener for the
// user's quotas, with the bearer token of the file's
// admin_access.token_file or of --token-file, and prints, per quota and
// kind, the use, the limit, what is left and the reset time.
func quotaCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rustle quota", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("c", "", "configuration `file` whose admin key names the admin listener")
	var adminAddr optionalString
	fs.Var(&adminAddr, "admin", "the running rustle's admin listener `host:port` (overrides the file's admin)")
	tokenFile := fs.String("token-file", "", "`file` holding the admin listener's bearer token (overrides the file's admin_access.token_file)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		fmt.Fprintln(stderr, "usage: rustle quota [-c FILE] [--admin HOST:PORT] [--token-file FILE] USER")
		return 2
	}
	user := fs.Arg(0)
	addr, access := adminAddr.v, config.AdminAccess{TokenFile: *tokenFile}
	if *file != "" {
		cfg, err := loadConfig(*file, nil, "", nil)
		if err != nil {
			fmt.Fprintln(stderr, "rustle quota:", err)
			return 1
		}
		if !adminAddr.set {
			addr = cfg.Admin
		}
		if *tokenFile == "" {
			access.TokenFile = cfg.AdminAccess.TokenFile
		}
	} else if !adminAddr.set {
		fmt.Fprintln(stderr, "rustle quota: --admin HOST:PORT or -c FILE (with an admin key) is required")
		return 2
	}
	if addr == "" {
		fmt.Fprintln(stderr, "rustle quota: no admin listener configured (admin key or --admin)")
		return 1
	}
	a, err := admin.LoadAccess(access)
	if err != nil {
		fmt.Fprintln(stderr, "rustle quota:", err)
		return 1
	}
	rep, err := fetchQuota(addr, user, a.Token)
	if err != nil {
		fmt.Fprintln(stderr, "rustle quota:", err)
		return 1
	}
	printQuota(stdout, rep)
	return 0
}

// fetchQuota asks the admin listener at addr for user's quotas, with
// the bearer token when there is one (nil: none).
func fetchQuota(addr, user string, token []byte) (*admin.QuotaReport, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("admin address %q: %w", addr, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	u := "http://" + net.JoinHostPort(host, port) + "/quota?user=" + url.QueryEscape(user)
	ctx, cancel := context.WithTimeout(context.Background(), quotaTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return nil, fmt.Errorf("ask %s: %w", u, err)
	}
	if token != nil {
		req.Header.Set("Authorization", "Bearer "+string(token))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ask %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		return nil, fmt.Errorf("ask %s: %s: the admin listener needs its token (admin_access.token_file of -c FILE, or --token-file)", u, resp.Status)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("ask %s: %s (is it a rustle with quotas?)", u, resp.Status)
	}
	var rep admin.QuotaReport
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&rep); err != nil {
		return nil, fmt.Errorf("read %s: %w", u, err)
	}
	return &rep, nil
}

// printQuota prints rep as a table: one line per quota and kind limited
// (or used).
func printQuota(w io.Writer, rep *admin.QuotaReport) {
	if len(rep.Quotas) == 0 {
		fmt.Fprintf(w, "no quota applies to %s\n", rep.User)
		return
	}
	switch {
	case rep.Cluster && rep.RedisUp:
		fmt.Fprintf(w, "%s (counted across the cluster)\n", rep.User)
	case rep.Cluster:
		fmt.Fprintf(w, "%s (Redis unreachable: this instance's count and the last totals)\n", rep.User)
	default:
		fmt.Fprintf(w, "%s\n", rep.User)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tSCOPE\tPERIOD\tKIND\tUSED\tLIMIT\tLEFT\tRESETS")
	for _, q := range rep.Quotas {
		for _, k := range []struct {
			kind        string
			used, limit int64
		}{{"bytes", q.BytesUsed, q.BytesLimit}, {"requests", q.RequestsUsed, q.RequestsLimit}} {
			if k.limit == 0 && k.used == 0 {
				continue
			}
			limit, left := "-", "-"
			if k.limit > 0 {
				limit, left = strconv.FormatInt(k.limit, 10), strconv.FormatInt(max(0, k.limit-k.used), 10)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", q.Rule, q.Scope, q.Period, k.kind, k.used, limit, left,
				q.Reset.Format("2006-01-02 15:04 MST"))
		}
	}
	tw.Flush()
}
