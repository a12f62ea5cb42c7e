// Package report turns the raw runs of a benchmark campaign into figures and
// documents: it parses what the measuring tools print (wrk, /proc/PID/stat,
// /proc/PID/status, /proc/stat), reduces repeated runs to medians, picks the
// best clean concurrency level of every test and proxy, formats ratios such
// as "3.6× more" and "11× less", and renders the markdown report and its SVG
// charts.
//
// The package does no I/O of its own apart from writing to the io.Writer it
// is handed, so everything in it is tested without processes or sockets. The
// orchestrator that produces the runs is bench/campaign.
package report
