package proxytest

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SlapdSuffix is the naming context of the directory [StartSlapd] runs,
// SlapdRootDN its administrator, whose password is SlapdRootPassword.
const (
	SlapdSuffix       = "dc=example,dc=org"
	SlapdRootDN       = "cn=admin," + SlapdSuffix
	SlapdRootPassword = "root-secret"
)

// Slapd is an OpenLDAP server (Debian's slapd) run by a test on loopback
// ports it chose, with a directory of its own under t.TempDir(): the
// core, cosine, inetorgperson and nis schemas, the memberof overlay
// (groupOfNames members get memberOf) and an access control (by default
// [SlapdAccess]).
type Slapd struct {
	// URL is the plain listener, ldap://127.0.0.1:PORT (StartTLS
	// offered), TLSURL the ldaps:// one.
	URL, TLSURL string
	// CAFile is a PEM file of the certificate the server presents (for
	// 127.0.0.1), Roots a pool that trusts it.
	CAFile string
	Roots  *x509.CertPool

	t    testing.TB
	dir  string
	bin  string
	cmd  *exec.Cmd
	done chan struct{}
}

// SlapdAccess is the access control of the directory [StartSlapd] runs:
// passwords readable by nobody and usable to bind, every entry readable
// by a bound user.
const SlapdAccess = `access to attrs=userPassword by anonymous auth by * none
access to * by users read by anonymous auth
`

// StartSlapd starts slapd with the access control SlapdAccess and loads
// ldif (entries under SlapdSuffix, the suffix entry itself included)
// with ldapadd as SlapdRootDN, so that the memberof overlay sees them. It
// skips the test where slapd or ldapadd is missing, and fails it under CI
// (see [RequireTool]). t.Cleanup stops the server.
func StartSlapd(t testing.TB, ldif string) *Slapd {
	t.Helper()
	return StartSlapdAccess(t, ldif, SlapdAccess)
}

// StartSlapdAccess is [StartSlapd] with access, slapd.conf "access to"
// lines (the rootdn reads and writes everything whatever they say), in
// place of SlapdAccess.
func StartSlapdAccess(t testing.TB, ldif, access string) *Slapd {
	t.Helper()
	bin := "/usr/sbin/slapd" // Debian's, which a PATH without sbin misses
	if _, err := os.Stat(bin); err != nil {
		bin = RequireTool(t, "slapd", "slapd")
	}
	ldapadd := RequireTool(t, "ldapadd", "ldap-utils")
	dir := t.TempDir()
	cert, roots := selfSigned(t)
	s := &Slapd{t: t, dir: dir, bin: bin, Roots: roots, CAFile: filepath.Join(dir, "cert.pem")}
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatalf("proxytest: slapd key: %v", err)
	}
	writeFile(t, s.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600)
	writeFile(t, filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
	if err := os.Mkdir(filepath.Join(dir, "db"), 0o700); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
include /etc/ldap/schema/nis.schema
modulepath /usr/lib/ldap
moduleload back_mdb
moduleload memberof
pidfile %[1]s/slapd.pid
argsfile %[1]s/slapd.args
TLSCertificateFile %[1]s/cert.pem
TLSCertificateKeyFile %[1]s/key.pem
database mdb
maxsize 16777216
suffix "%[2]s"
rootdn "%[3]s"
rootpw %[4]s
directory %[1]s/db
overlay memberof
%[5]s`, dir, SlapdSuffix, SlapdRootDN, SlapdRootPassword, access)
	writeFile(t, filepath.Join(dir, "slapd.conf"), []byte(conf), 0o600)
	plain, tlsPort := freePort(t), freePort(t)
	s.URL = fmt.Sprintf("ldap://127.0.0.1:%d", plain)
	s.TLSURL = fmt.Sprintf("ldaps://127.0.0.1:%d", tlsPort)
	t.Cleanup(s.Stop)
	s.Start()
	writeFile(t, filepath.Join(dir, "data.ldif"), []byte(ldif), 0o600)
	out, err := exec.Command(ldapadd, "-x", "-H", s.URL, "-D", SlapdRootDN, "-w", SlapdRootPassword,
		"-f", filepath.Join(dir, "data.ldif")).CombinedOutput()
	if err != nil {
		t.Fatalf("proxytest: ldapadd: %v\n%s", err, out)
	}
	return s
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxytest: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Start (re)starts the server on its ports, with the directory as it
// was, and waits until it accepts connections. It fails the test when
// the server exits first or does not come up within 20 seconds.
func (s *Slapd) Start() {
	s.t.Helper()
	if s.cmd != nil {
		s.t.Fatal("proxytest: slapd is already running")
	}
	var out bytes.Buffer
	// -d 0: stay in the foreground, log nothing.
	cmd := exec.Command(s.bin, "-d", "0", "-f", filepath.Join(s.dir, "slapd.conf"),
		"-h", s.URL+"/ "+s.TLSURL+"/")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("proxytest: start slapd: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	addr := strings.TrimPrefix(s.URL, "ldap://")
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-done:
			s.cmd = nil
			s.t.Fatalf("proxytest: slapd exited: %v\n%s", cmd.ProcessState, out.String())
		case <-time.After(20 * time.Millisecond): // polling a port that is not open yet
		}
		if time.Now().After(deadline) {
			s.Stop()
			s.t.Fatalf("proxytest: slapd did not listen on %s within 20s\n%s", addr, out.String())
		}
	}
}

// Stop stops the server (SIGTERM, then SIGKILL after 10 seconds) and
// waits for it to exit; it does nothing when the server is not running.
func (s *Slapd) Stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

// DirectoryLDIF is a small directory for [StartSlapd]: under
// ou=people, alice (password "alice-pw", in the groups developers and
// staff), bob ("bob-pw", in ops and staff) and carol ("carol-pw", in
// developers, but employeeType "disabled"); the service account
// cn=svc (password "svc-pw"); the groups (groupOfNames) under
// ou=groups.
const DirectoryLDIF = `dn: dc=example,dc=org
objectClass: dcObject
objectClass: organization
o: Example
dc: example

dn: ou=people,dc=example,dc=org
objectClass: organizationalUnit
ou: people

dn: ou=groups,dc=example,dc=org
objectClass: organizationalUnit
ou: groups

dn: cn=svc,dc=example,dc=org
objectClass: organizationalRole
objectClass: simpleSecurityObject
cn: svc
userPassword: svc-pw

dn: uid=alice,ou=people,dc=example,dc=org
objectClass: inetOrgPerson
uid: alice
cn: Alice
sn: Liddell
userPassword: alice-pw

dn: uid=bob,ou=people,dc=example,dc=org
objectClass: inetOrgPerson
uid: bob
cn: Bob
sn: Builder
userPassword: bob-pw

dn: uid=carol,ou=people,dc=example,dc=org
objectClass: inetOrgPerson
uid: carol
cn: Carol
sn: Disabled
employeeType: disabled
userPassword: carol-pw

dn: cn=developers,ou=groups,dc=example,dc=org
objectClass: groupOfNames
cn: developers
member: uid=alice,ou=people,dc=example,dc=org
member: uid=carol,ou=people,dc=example,dc=org

dn: cn=ops,ou=groups,dc=example,dc=org
objectClass: groupOfNames
cn: ops
member: uid=bob,ou=people,dc=example,dc=org

dn: cn=staff,ou=groups,dc=example,dc=org
objectClass: groupOfNames
cn: staff
member: uid=alice,ou=people,dc=example,dc=org
member: uid=bob,ou=people,dc=example,dc=org
`
