package auth

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ErrUnsupportedHash is wrapped by errors for password hashes in a format
// other than bcrypt, such as {SHA}, $apr1$ or DES crypt.
var ErrUnsupportedHash = errors.New("only bcrypt hashes ($2a$, $2b$, $2y$) are accepted; create lines with `rustle passwd USER`")

// ParseError reports a bad line in an htpasswd file.
type ParseError struct {
	File string // file name as given to ParseHtpasswd or Config.Files
	Line int    // 1-based line number
	Err  error  // what is wrong with the line
}

// Error returns the message, naming file and line: "auth: htpasswd FILE:LINE: ...".
func (e *ParseError) Error() string {
	return fmt.Sprintf("auth: htpasswd %s:%d: %v", e.File, e.Line, e.Err)
}

// Unwrap returns e.Err.
func (e *ParseError) Unwrap() error { return e.Err }

// fileUser is one user read from an htpasswd file, with where it was found.
type fileUser struct {
	User
	file string
	line int
}

// ParseHtpasswd reads an htpasswd file of "user:hash" lines from r. Only
// bcrypt hashes ($2a$, $2b$, $2y$) are accepted; blank lines and lines whose
// first non-blank character is '#' are skipped. name is used in errors, which
// are *ParseError values naming name and the line. A user listed twice is an
// error. The returned users have Bcrypt set and Password empty.
func ParseHtpasswd(r io.Reader, name string) ([]User, error) {
	fus, err := parseHtpasswd(r, name)
	if err != nil || len(fus) == 0 {
		return nil, err
	}
	users := make([]User, len(fus))
	for i := range fus {
		users[i] = fus[i].User
	}
	return users, nil
}

func parseHtpasswd(r io.Reader, name string) ([]fileUser, error) {
	var users []fileUser
	seen := make(map[string]int) // user name -> line
	sc := bufio.NewScanner(r)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		u, err := parseLine(line)
		if err != nil {
			return nil, &ParseError{File: name, Line: lineNo, Err: err}
		}
		if prev, dup := seen[u.Name]; dup {
			return nil, &ParseError{File: name, Line: lineNo,
				Err: fmt.Errorf("user %q already defined on line %d", u.Name, prev)}
		}
		seen[u.Name] = lineNo
		users = append(users, fileUser{User: u, file: name, line: lineNo})
	}
	if err := sc.Err(); err != nil {
		return nil, &ParseError{File: name, Line: lineNo + 1, Err: fmt.Errorf("read: %w", err)}
	}
	return users, nil
}

// parseLine parses one non-blank, non-comment "user:hash" line.
func parseLine(line []byte) (User, error) {
	nameB, hashB, found := bytes.Cut(line, []byte{':'})
	if !found {
		return User{}, errors.New("missing ':' between user name and hash")
	}
	name := string(nameB)
	if err := checkName(name); err != nil {
		return User{}, err
	}
	hash := string(hashB)
	if err := checkBcrypt(hash); err != nil {
		return User{}, fmt.Errorf("user %q: %w", name, err)
	}
	return User{Name: name, Bcrypt: hash}, nil
}

// checkName reports whether name can be a Basic user-id: not empty, no
// colon (RFC 7617 section 2) and no control characters.
func checkName(name string) error {
	if name == "" {
		return errors.New("empty user name")
	}
	if strings.IndexByte(name, ':') >= 0 {
		return fmt.Errorf("user name %q contains ':'", name)
	}
	if hasControl(name) {
		return fmt.Errorf("user name %q contains a control character", name)
	}
	return nil
}

func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return true
		}
	}
	return false
}

// bcryptLen is the length of a bcrypt hash: "$2b$" + 2-digit cost + "$" +
// 22 characters of salt + 31 characters of hash.
const bcryptLen = 60

// minCost and maxCost bound the cost field of a bcrypt hash (the same bounds
// as bcrypt.MinCost and bcrypt.MaxCost).
const (
	minCost = 4
	maxCost = 31
)

// checkBcrypt reports whether hash is a well-formed bcrypt hash of a version
// we accept, and otherwise names the format it looks like.
func checkBcrypt(hash string) error {
	if hash == "" {
		return errors.New("empty hash")
	}
	if strings.HasPrefix(hash, "$2a$") || strings.HasPrefix(hash, "$2b$") || strings.HasPrefix(hash, "$2y$") {
		if len(hash) != bcryptLen {
			return fmt.Errorf("malformed bcrypt hash: %d characters, want %d", len(hash), bcryptLen)
		}
		cost, err := strconv.Atoi(hash[4:6])
		if err != nil || hash[4] < '0' || hash[4] > '9' || cost < minCost || cost > maxCost {
			return fmt.Errorf("malformed bcrypt hash: cost %q not a number from %02d to %d", hash[4:6], minCost, maxCost)
		}
		if hash[6] != '$' {
			return errors.New("malformed bcrypt hash: no '$' after the cost")
		}
		for i := 7; i < len(hash); i++ {
			if !isBcryptBase64(hash[i]) {
				return fmt.Errorf("malformed bcrypt hash: bad character at offset %d", i)
			}
		}
		return nil
	}
	return fmt.Errorf("%s hash not supported: %w", hashFormat(hash), ErrUnsupportedHash)
}

// isBcryptBase64 reports whether c is in bcrypt's base64 alphabet.
func isBcryptBase64(c byte) bool {
	return c == '.' || c == '/' || ('0' <= c && c <= '9') || ('A' <= c && c <= 'Z') || ('a' <= c && c <= 'z')
}

// hashFormat names the format a non-bcrypt htpasswd hash appears to be in.
func hashFormat(hash string) string {
	switch {
	case strings.HasPrefix(hash, "{SHA}"):
		return "SHA-1 ({SHA})"
	case strings.HasPrefix(hash, "{SSHA}"):
		return "salted SHA-1 ({SSHA})"
	case strings.HasPrefix(hash, "$apr1$"):
		return "Apache MD5 ($apr1$)"
	case strings.HasPrefix(hash, "$1$"):
		return "MD5-crypt ($1$)"
	case strings.HasPrefix(hash, "$5$"):
		return "SHA-256-crypt ($5$)"
	case strings.HasPrefix(hash, "$6$"):
		return "SHA-512-crypt ($6$)"
	case strings.HasPrefix(hash, "$"):
		id := cryptID(hash)
		switch {
		case id == "":
			return "unrecognised crypt"
		case id[0] == '2':
			return "bcrypt variant $" + id + "$"
		default:
			return "crypt $" + id + "$"
		}
	case len(hash) == 13 && allBcryptBase64(hash):
		return "DES crypt"
	default:
		return "unrecognised (plain text?)"
	}
}

// cryptID returns the identifier of a "$id$..." crypt hash, or "" when it
// is not 1 to 16 characters of [a-z0-9-].
func cryptID(hash string) string {
	i := strings.IndexByte(hash[1:], '$')
	if i < 1 || i > 16 {
		return ""
	}
	id := hash[1 : i+1]
	for j := 0; j < len(id); j++ {
		if c := id[j]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return ""
		}
	}
	return id
}

func allBcryptBase64(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isBcryptBase64(s[i]) {
			return false
		}
	}
	return true
}
