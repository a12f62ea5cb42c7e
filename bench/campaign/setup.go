//go:build linux

package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/sys/unix"
)

// env is what every step of the campaign needs. It is owned by the main
// goroutine.
type env struct {
	root     string // repository root
	benchDir string // root/bench: templates and the wrk script
	tmp      string // temporary directory, removed at the end
	bin      string // tmp/bin: origin, load and rustle binaries
	out      io.Writer

	rustleBin string // rustle binary (built, or -rustle)
	gostBin   string // gost binary (-gost or $GOST_BIN); "" = none (gost.go)
	lookPath  map[string]string

	user, pass string
	bcryptHash string
	passwdFile string // user:bcrypt, for Squid
	authHeader string // "Basic ..." for wrk
	// ldapURL is the directory of the rustle-ldap column, jwksURL the key
	// set of the rustle-jwt column and token its client's bearer token;
	// "" until their prepare functions start them.
	ldapURL, jwksURL, token string
	// redisURL is the Redis of the rustle-redis column; "" until
	// prepareRustleRedis starts it.
	redisURL string
	// authzURL is the decision service of the rustle-authz column; ""
	// until prepareRustleAuthz starts it.
	authzURL  string
	asRoot    bool
	dropUser  string // Squid's and Tinyproxy's user when run as root
	dropGroup string
	maxFD     int

	// proxyCore and loadCore are the base split of every test but the
	// "More cores" ones: the first two CPUs of the affinity mask. cpus are
	// all the CPUs of the mask, corePlan the splits of the "More cores"
	// tests that fit on them.
	proxyCore, loadCore int
	cpus                []cpuTopo
	corePlan            []coreSplit
	clkTck              float64

	origin    originAddrs
	originPID int
	// fastestLoop is the fastest memory loop (report.Run.MemoryLoopMS)
	// of the campaign so far, in milliseconds; zero before the first.
	// Only the campaign's one goroutine that runs the tests uses it.
	fastestLoop float64
	// memWait bounds each wait for a slow memory loop to be fast again
	// before a fixed-rate run, memBudget all of them together (what is
	// left of it); zero: no wait. Used by the same goroutine.
	memWait, memBudget time.Duration
	starts             int // proxy starts so far, names their directories
	// silentClosers holds the labels of proxies seen closing client
	// connections after every response without "Connection: close".
	silentClosers map[string]bool

	// caFile, certFile and keyFile are the campaign's TLS files (PEM): a
	// CA and a server certificate for 127.0.0.1 it signed, used by every
	// https port and by the origin's TLS listeners; caPool trusts the CA.
	caFile, certFile, keyFile string
	caPool                    *x509.CertPool
	// icCAFile, icKeyFile and icBundleFile are the interception CA's
	// certificate, key and both in one file; rootsFile the campaign's CA
	// and the interception CA, which the load tool trusts for https://
	// requests (intercept.go).
	icCAFile, icKeyFile, icBundleFile, rootsFile string

	// socksMethod is Dante's socksmethod ("username" or "none"), decided
	// by prepareDante; sysUserCreated is true while the system user for
	// it exists.
	socksMethod    string
	sysUserCreated bool
	// lacking maps a proxy to the features it lacks on this machine and
	// why (Squid built without TLS); extraTuning holds tuning lines
	// decided while preparing a proxy.
	lacking     map[string]map[string]string
	extraTuning map[string][]string

	// resolver is rustle's [dns] and upstream keep-alive for the test
	// being run (useResolver); hostsName the /etc/hosts name of the
	// system-resolver row (prepareDNSRows). See dns.go.
	resolver  resolverConf
	hostsName string
	// parentURL and parentVia are the [[parents]] url and the route's via
	// that the next rustle configuration written gets, while a parent
	// test runs (see startParent); "" = none.
	parentURL, parentVia string
	// test is the test runTest is running, for a proxy whose service
	// depends on it (gost's http2 service for the HTTP/2 rows).
	test testDef
}

// originAddrs is the address line the origin prints.
type originAddrs struct {
	HTTP    string `json:"http"`
	Sink    string `json:"sink"`
	Hold    string `json:"hold"`
	WS      string `json:"ws"`
	HTTPS   string `json:"https"`
	WSS     string `json:"wss"`
	SinkTLS string `json:"sinktls"`
	H2      string `json:"h2"`
	H3      string `json:"h3"`  // UDP: HTTP/3
	DNS     string `json:"dns"` // UDP: the DNS responder of the DNS rows
	UDP     string `json:"udp"` // UDP: the echo of the datagram rows
}

// lack records that proxy lacks feature on this machine, and why.
func (e *env) lack(proxy, feature, why string) {
	if e.lacking[proxy] == nil {
		e.lacking[proxy] = map[string]string{}
	}
	e.lacking[proxy][feature] = why
}

// lacks returns why proxy cannot run t on this machine, or "".
func (e *env) lacks(proxy string, t testDef) string {
	for _, n := range t.needs {
		if why := e.lacking[proxy][n]; why != "" {
			return why
		}
	}
	return ""
}

// findRoot returns the directory holding go.mod, from the working directory
// up.
func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for range 64 {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "bench", "squid.conf")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", errors.New("campaign: run from inside the rustle repository (no go.mod with bench/ above the working directory)")
}

// pickCores reads the CPUs this process may run on: the first two are the
// base split (the proxy's and the load generator's), and the "More cores"
// tests are planned on all of them.
func (e *env) pickCores() error {
	cpus, err := allowedCPUs()
	if err != nil {
		return err
	}
	e.cpus, e.proxyCore, e.loadCore = cpus, cpus[0].cpu, cpus[1].cpu
	e.corePlan = planCores(cpus)
	return nil
}

// split returns where t runs: the base split, or for a "More cores" test
// its split of the plan (false when it does not fit on this machine).
func (e *env) split(t testDef) coreSplit {
	s, _ := e.coreSplitFor(t)
	return s
}

// coreSplitFor is split, with false for a "More cores" test that does
// not fit on this machine.
func (e *env) coreSplitFor(t testDef) (coreSplit, bool) {
	if t.proxyCores == 0 {
		return coreSplit{proxy: []int{e.proxyCore}, load: []int{e.loadCore}}, true
	}
	for _, s := range e.corePlan {
		if s.n() == t.proxyCores {
			return s, true
		}
	}
	return coreSplit{}, false
}

// ensureTools finds the programs the campaign runs and installs the Debian
// packages of those missing, with apt-get, as root. Proxies that stay
// missing are reported by their prepare step. wrk and taskset are required.
func (e *env) ensureTools(ctx context.Context, want []*proxyDef, install bool) error {
	e.lookPath = map[string]string{}
	find := func(name string) {
		if p, err := exec.LookPath(name); err == nil {
			e.lookPath[name] = p
			return
		}
		for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/local/sbin"} {
			p := filepath.Join(dir, name)
			if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
				e.lookPath[name] = p
				return
			}
		}
	}
	need := map[string]string{"wrk": "wrk", "taskset": "util-linux"}
	for _, p := range want {
		if p.binary != "" {
			need[p.binary] = p.pkg
		}
	}
	var missing []string
	for bin, pkg := range need {
		find(bin)
		if _, ok := e.lookPath[bin]; !ok {
			missing = append(missing, pkg)
		}
	}
	if len(missing) > 0 && install {
		if !e.asRoot {
			fmt.Fprintf(e.out, "missing packages %v, and not root: not installing them\n", missing)
		} else if err := aptInstall(ctx, e.out, missing); err != nil {
			fmt.Fprintf(e.out, "installing %v failed: %v\n", missing, err)
		}
		for bin := range need {
			find(bin)
		}
	}
	for _, bin := range []string{"wrk", "taskset"} {
		if _, ok := e.lookPath[bin]; !ok {
			return fmt.Errorf("campaign: %s is required (Debian package %s)", bin, need[bin])
		}
	}
	return nil
}

// policyRC is the path of Debian's service start policy; a script there
// that exits 101 keeps packages from starting their services on install.
const policyRC = "/usr/sbin/policy-rc.d"

// aptInstall installs pkgs with apt-get, with service starts forbidden for
// the duration, and stops any peer process the installation left running.
func aptInstall(ctx context.Context, out io.Writer, pkgs []string) error {
	fmt.Fprintf(out, "installing %s with apt-get (services kept from starting)\n", strings.Join(pkgs, " "))
	if _, err := os.Stat(policyRC); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(policyRC, []byte("#!/bin/sh\n# written by rustle bench/campaign for the time of an apt-get install\nexit 101\n"), 0o755); err != nil {
			return fmt.Errorf("write %s: %w", policyRC, err)
		}
		defer os.Remove(policyRC)
	}
	before := peerPIDs()
	run := func(args ...string) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("apt-get %s: %w", strings.Join(args, " "), err)
		}
		return nil
	}
	if err := run("update"); err != nil {
		return err
	}
	err := run(append([]string{"install", "-y", "--no-install-recommends"}, pkgs...)...)
	for pid, comm := range peerPIDs() {
		if _, ok := before[pid]; !ok {
			fmt.Fprintf(out, "stopping %s (pid %d), started by the package installation\n", comm, pid)
			syscall.Kill(pid, syscall.SIGTERM)
		}
	}
	return err
}

// peerPIDs returns the PIDs of running squid, tinyproxy and danted
// processes.
func peerPIDs() map[int]string {
	out := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, en := range entries {
		pid, err := strconv.Atoi(en.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", en.Name(), "comm"))
		if err != nil {
			continue
		}
		comm := strings.TrimSpace(string(b))
		if comm == "squid" || comm == "tinyproxy" || comm == "danted" {
			out[pid] = comm
		}
	}
	return out
}

// buildTools builds the origin and the load tool into e.bin.
func (e *env) buildTools(ctx context.Context) error {
	for _, pkg := range []string{"origin", "load"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", filepath.Join(e.bin, pkg), "./bench/"+pkg)
		cmd.Dir = e.root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("campaign: go build ./bench/%s: %w\n%s", pkg, err, out)
		}
	}
	return nil
}

// makeCredentials creates the benchmark user with a random password, its
// bcrypt hash (rustle, Squid's htpasswd file) and the Basic header (wrk).
func (e *env) makeCredentials() error {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	e.user, e.pass = "bench", hex.EncodeToString(b[:])
	h, err := bcrypt.GenerateFromPassword([]byte(e.pass), bcrypt.DefaultCost)
	if err != nil {
		return fmt.Errorf("campaign: bcrypt: %w", err)
	}
	e.bcryptHash = string(h)
	e.passwdFile = filepath.Join(e.tmp, "htpasswd")
	if err := os.WriteFile(e.passwdFile, []byte(e.user+":"+e.bcryptHash+"\n"), 0o644); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	e.authHeader = "Basic " + base64.StdEncoding.EncodeToString([]byte(e.user+":"+e.pass))
	return nil
}

// setIdentity decides which user Squid and Tinyproxy switch to when the
// campaign runs as root, and the descriptor limit given to Squid.
func (e *env) setIdentity() {
	e.asRoot = os.Geteuid() == 0
	e.dropUser, e.dropGroup = "nobody", "nogroup"
	if _, err := user.Lookup("proxy"); err == nil {
		e.dropUser = "proxy"
		e.dropGroup = "proxy"
	}
	if _, err := user.LookupGroup(e.dropGroup); err != nil {
		e.dropGroup = e.dropUser
	}
	var rl syscall.Rlimit
	e.maxFD = 16384
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Max > 0 && rl.Max < 1<<20 {
		e.maxFD = int(rl.Max)
	}
}

// startOrigin starts an origin pinned to cpus (Go sizes GOMAXPROCS to
// them) and reads its addresses; name names its log.
func (e *env) startOrigin(ctx context.Context, name string, cpus []int) (*proc, originAddrs, error) {
	var addrs originAddrs
	r, w, err := os.Pipe()
	if err != nil {
		return nil, addrs, err
	}
	defer r.Close()
	argv := []string{filepath.Join(e.bin, "origin"), "-lifetime", "12h", "-cert", e.certFile, "-key", e.keyFile}
	p, err := startProc(name, cpus, argv, nil, filepath.Join(e.tmp, name+".log"), w)
	w.Close()
	if err != nil {
		return nil, addrs, err
	}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(r).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if err := json.Unmarshal([]byte(s), &addrs); err != nil || addrs.HTTP == "" {
			p.stop(time.Second)
			return nil, addrs, fmt.Errorf("campaign: %s address line %q: %v", name, s, err)
		}
	case <-time.After(10 * time.Second):
		p.stop(time.Second)
		return nil, addrs, fmt.Errorf("campaign: %s printed no addresses within 10s", name)
	case <-ctx.Done():
		p.stop(time.Second)
		return nil, addrs, ctx.Err()
	}
	return p, addrs, nil
}

// useOrigin starts an origin of test's own on cpus and makes it the
// campaign's (addresses and the PID whose CPU time is not "other load")
// until restore is called, which stops it and puts the campaign's origin
// back.
func (e *env) useOrigin(ctx context.Context, test string, cpus []int) (restore func(), err error) {
	p, addrs, err := e.startOrigin(ctx, "origin-"+test, cpus)
	if err != nil {
		return nil, err
	}
	saved, savedPID := e.origin, e.originPID
	e.origin, e.originPID = addrs, p.pid()
	return func() {
		p.stop(2 * time.Second)
		e.origin, e.originPID = saved, savedPID
	}, nil
}

// machine describes the host in one line.
func machine() string {
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	var uts unix.Utsname
	kernel := ""
	if unix.Uname(&uts) == nil {
		kernel = "Linux " + unix.ByteSliceToString(uts.Release[:])
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		f := strings.Fields(string(b))
		if len(f) > 1 {
			if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
				mem = fmt.Sprintf("%.0f GiB RAM", kb/(1<<20))
			}
		}
	}
	return strings.Join(nonEmpty(model, fmt.Sprintf("%d cores", runtime.NumCPU()), mem, kernel), ", ")
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// toolVersions describes wrk, the Go load tool and the origin.
func (e *env) toolVersions(ctx context.Context) []string {
	wrkv := "wrk"
	out, _ := exec.CommandContext(ctx, e.lookPath["wrk"], "-v").CombinedOutput()
	// "wrk debian/4.1.0-3+b2 [epoll] Copyright (C) 2012 Will Glozer"
	if line, _, _ := strings.Cut(string(out), "\n"); line != "" {
		line, _, _ = strings.Cut(line, " [")
		wrkv = strings.TrimSpace(line)
	}
	return []string{
		wrkv + ", 1 thread (n threads in the More cores tests), --timeout 10s, bench/wrk/proxy.lua (absolute-form requests with Proxy-Authorization; origin form for no proxy)",
		"bench/load (" + runtime.Version() + "): CONNECT and SOCKS5 bulk and held tunnels; HTTPS-proxy requests (load http, counted like wrk; Go's TLS client, TLS 1.3, a session cache for resumption or none for full handshakes); WebSocket messages (load ws, closed loop, client frames with the all-zero mask key)",
		"bench/load h2: a minimal HTTP/2 client on golang.org/x/net/http2's Framer and HPACK over Go's TLS (ALPN h2 only), one request at a time per connection, 4 MiB stream and 1 GiB connection receive windows; bulk/hold -h2: x/net/http2's ClientConn, one connection per CONNECT stream",
		"bench/origin (" + runtime.Version() + "): hand-written HTTP/1.1 origin with fixed bodies and Content-Length, TCP sink, TCP hold port, hand-written WebSocket echo; TLS variants (https, wss, TLS sink) for the no-proxy column of the TLS tests; an HTTP/2 listener (x/net/http2's server: the same bodies, a POST sink) for the no-proxy column of the HTTP/2 tests",
		"TLS: a campaign CA and an ECDSA P-256 server certificate for 127.0.0.1, made at start, used by every https port",
		fmt.Sprintf("proxy on CPU %d; load tool and origin on CPU %d (the More cores tests: see their table)", e.proxyCore, e.loadCore),
	}
}

// clockTicks returns the kernel's clock ticks per second (getconf CLK_TCK),
// 100 if it cannot be read.
func clockTicks(ctx context.Context) float64 {
	out, err := exec.CommandContext(ctx, "getconf", "CLK_TCK").Output()
	if err != nil {
		return 100
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil || v <= 0 {
		return 100
	}
	return v
}

// danteUser is the system user Dante's socksmethod username checks, and
// danteComment marks it as the campaign's (the GECOS field), so that a
// user left by an interrupted campaign is recognised and removed.
const (
	danteUser    = "rustlebench"
	danteComment = "rustle bench/campaign, removed after the campaign"
)

// makeSystemUser creates danteUser (as root) unless it exists, and sets
// its password to the campaign's. The password is hashed with SHA-512
// crypt at its minimum of 1,000 rounds, not Debian's default yescrypt:
// Dante runs crypt() on every new connection (it keeps no cache), and
// yescrypt's ~25 ms would make opening 9,000 tunnels take minutes.
func (e *env) makeSystemUser(ctx context.Context) error {
	if !e.asRoot {
		return errors.New("not root: no system user can be made for Dante's username method")
	}
	u, err := user.Lookup(danteUser)
	switch {
	case err != nil:
		out, err := exec.CommandContext(ctx, "useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "--comment", danteComment, danteUser).CombinedOutput()
		if err != nil {
			return fmt.Errorf("useradd %s: %v: %s", danteUser, err, firstLines(string(out), 2))
		}
	case u.Name != danteComment:
		return fmt.Errorf("a system user %s exists that the campaign did not make", danteUser)
	}
	e.sysUserCreated = true
	cmd := exec.CommandContext(ctx, "chpasswd", "-c", "SHA512", "-s", "1000")
	cmd.Stdin = strings.NewReader(danteUser + ":" + e.pass + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		e.removeSystemUser()
		return fmt.Errorf("chpasswd for %s: %v: %s", danteUser, err, firstLines(string(out), 2))
	}
	return nil
}

// removeSystemUser removes danteUser if the campaign made it. It is safe
// to call more than once.
func (e *env) removeSystemUser() {
	if !e.sysUserCreated {
		return
	}
	e.sysUserCreated = false
	if out, err := exec.Command("userdel", danteUser).CombinedOutput(); err != nil {
		fmt.Fprintf(e.out, "userdel %s: %v: %s\n", danteUser, err, firstLines(string(out), 2))
	}
}

// makeCerts writes the campaign's TLS files into e.tmp/tls: a CA
// (ca.pem) and a server certificate for 127.0.0.1 it signed (server.pem,
// server.key), ECDSA P-256 like rustle cert's. The key is readable by all:
// Squid reads it after switching to its unprivileged user, and the
// directory is the campaign's own, removed at its end.
func (e *env) makeCerts() error {
	dir := filepath.Join(e.tmp, "tls")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("campaign: CA key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rustle bench CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("campaign: CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return fmt.Errorf("campaign: CA certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("campaign: server key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("campaign: server certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("campaign: server key: %w", err)
	}
	e.caFile, e.certFile, e.keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{
		{e.caFile, "CERTIFICATE", caDER},
		{e.certFile, "CERTIFICATE", der},
		{e.keyFile, "PRIVATE KEY", keyDER},
	} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o644); err != nil {
			return fmt.Errorf("campaign: %w", err)
		}
	}
	e.caPool = x509.NewCertPool()
	e.caPool.AddCert(ca)
	return e.makeInterceptCA(dir)
}
