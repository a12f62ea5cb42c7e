package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// ErrUnknownKey is the Err of an [*Error] for a key rustle does not know.
var ErrUnknownKey = errors.New("unknown key")

// Error is one problem with a configuration, located as precisely as
// possible. Decoding errors name the file and line; [Config.Validate]
// errors name only the key.
type Error struct {
	// File is the name given to [Parse] or the path given to [Load]; ""
	// for an error from [Config.Validate].
	File string
	// Line is the 1-based line of the key in File; 0 when unknown.
	Line int
	// Key is the dotted key, such as "timeouts.connect", with the index
	// of each array element on its path, as in "listen[1].address". ""
	// for a TOML syntax error.
	Key string
	// Err is what is wrong: ErrUnknownKey, a [toml.ParseError] for a
	// syntax error, or a description of the bad value.
	Err error
}

// Error formats the error as "file:line: key: problem", or
// "file:line: unknown key key" for an unknown key; a Validate error starts
// with "config: " instead of a position.
func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.File == "":
		b.WriteString("config: ")
	case e.Line > 0:
		b.WriteString(e.File + ":" + strconv.Itoa(e.Line) + ": ")
	default:
		b.WriteString(e.File + ": ")
	}
	var pe toml.ParseError
	switch {
	case errors.Is(e.Err, ErrUnknownKey):
		b.WriteString("unknown key " + e.Key)
		return b.String()
	case e.Key != "":
		b.WriteString(e.Key + ": ")
	}
	if errors.As(e.Err, &pe) {
		b.WriteString(pe.Message)
	} else {
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns e.Err.
func (e *Error) Unwrap() error { return e.Err }

// Load reads and decodes the configuration file at path, as [Parse] does,
// then resolves relative htpasswd, certificate, list and access log paths
// against the file's directory. It fills defaults but does not validate.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config: read %s: %w", path, err)
	}
	c, err := Parse(data, path)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	resolve := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	for i := range c.Auth.Htpasswd {
		resolve(&c.Auth.Htpasswd[i])
	}
	for i := range c.Listen {
		t := &c.Listen[i].TLS
		resolve(&t.Cert)
		resolve(&t.Key)
		resolve(&t.ClientCA)
	}
	resolve(&c.AccessLog.Path)
	resolve(&c.PAC.File)
	for i := range c.ACL.Rules {
		resolve(&c.ACL.Rules[i].HostsFile)
		resolve(&c.ACL.Rules[i].ClientsFile)
	}
	for i := range c.Routes {
		resolve(&c.Routes[i].HostsFile)
		resolve(&c.Routes[i].ClientsFile)
	}
	resolve(&c.DNS.CA)
	for i := range c.Parents {
		resolve(&c.Parents[i].CAFile)
	}
	c.resolveProviderPaths(resolve)
	c.resolveHeaderFiles(resolve)
	resolve(&c.Quota.StateFile)
	resolve(&c.Cluster.PasswordFile)
	resolve(&c.Cluster.SentinelPasswordFile)
	resolve(&c.AdminAccess.TokenFile)
	resolve(&c.AdminAccess.Htpasswd)
	c.resolveInterceptPaths(resolve)
	resolve(&c.Authz.TLSCA)
	resolve(&c.Authz.TokenFile)
	return c, nil
}

// maxFileBytes bounds a configuration file, so that a mistaken path such
// as /dev/zero fails rather than exhausting memory.
const maxFileBytes = 1 << 20

// Parse decodes a configuration from data, strictly: a TOML syntax error,
// an unknown key, a value of the wrong type or an unparsable duration is an
// error, and every such problem is reported (joined with [errors.Join], in
// line order), each an [*Error] naming name, the line and the key. Parse
// fills defaults ([Config.SetDefaults]) but does not validate. Data over
// 1 MiB is refused.
func Parse(data []byte, name string) (*Config, error) {
	if len(data) > maxFileBytes {
		return nil, &Error{File: name, Err: fmt.Errorf("larger than the %d-byte limit for a configuration", maxFileBytes)}
	}
	var raw map[string]any
	if err := toml.Unmarshal(data, &raw); err != nil {
		line := 0
		var pe toml.ParseError
		if errors.As(err, &pe) {
			line = syntaxErrorLine(data, pe.Position)
		}
		return nil, &Error{File: name, Line: line, Err: err}
	}
	d := decoder{name: name, lines: locateKeys(data)}
	c := new(Config)
	d.value(raw, reflect.ValueOf(c).Elem(), nil)
	if len(d.errs) > 0 {
		slices.SortFunc(d.errs, func(a, b *Error) int {
			return cmp.Or(cmp.Compare(a.Line, b.Line), strings.Compare(a.Key, b.Key))
		})
		errs := make([]error, len(d.errs))
		for i, e := range d.errs {
			errs[i] = e
		}
		return nil, errors.Join(errs...)
	}
	c.src, c.lines = name, d.lines
	c.SetDefaults()
	return c, nil
}

// syntaxErrorLine returns the line of a TOML syntax error at pos: the
// line of the byte it points at. The decoder's own line count is one
// ahead when that byte is the newline ending a line ("[log" without its
// "]"), which it has counted already.
func syntaxErrorLine(data []byte, pos toml.Position) int {
	if pos.Start < 0 || pos.Start > len(data) || pos.Len == 0 {
		return pos.Line
	}
	return bytes.Count(data[:pos.Start], []byte{'\n'}) + 1
}

// decoder copies a decoded TOML document into a Go value, following the
// fields' toml tags, and records every unknown key and mistyped value.
type decoder struct {
	name  string
	lines map[string]int // from locateKeys
	errs  []*Error
}

var (
	durationType = reflect.TypeFor[Duration]()
	stringsType  = reflect.TypeFor[Strings]()
)

// value stores v, found at path, in rv. path holds keys and array indices
// (see indexElem).
func (d *decoder) value(v any, rv reflect.Value, path []string) {
	if s, ok := v.(string); ok && rv.Type() == stringsType {
		rv.Set(reflect.ValueOf(Strings{s})) // one string for a list of one
		return
	}
	if rv.Type() == durationType {
		s, ok := v.(string)
		if !ok {
			d.typeError(path, v, `a duration string such as "10s"`)
			return
		}
		dur, err := parseDuration(s)
		if err != nil {
			d.fail(path, err)
			return
		}
		rv.Set(reflect.ValueOf(Duration{dur}))
		return
	}
	switch rv.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			d.typeError(path, v, "a table")
			return
		}
		d.table(m, rv, path)
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			d.typeError(path, v, "a table")
			return
		}
		mv := reflect.MakeMapWithSize(rv.Type(), len(m))
		for key, e := range m {
			ev := reflect.New(rv.Type().Elem()).Elem()
			d.value(e, ev, append(path[:len(path):len(path)], key))
			mv.SetMapIndex(reflect.ValueOf(key).Convert(rv.Type().Key()), ev)
		}
		rv.Set(mv)
	case reflect.Slice:
		elems, ok := arrayElems(v)
		if !ok {
			d.typeError(path, v, "an array")
			return
		}
		s := reflect.MakeSlice(rv.Type(), len(elems), len(elems))
		for i, e := range elems {
			d.value(e, s.Index(i), append(path[:len(path):len(path)], indexElem(i)))
		}
		rv.Set(s)
	case reflect.String:
		s, ok := v.(string)
		if !ok {
			d.typeError(path, v, "a string")
			return
		}
		rv.SetString(s)
	case reflect.Bool:
		b, ok := v.(bool)
		if !ok {
			d.typeError(path, v, "a boolean")
			return
		}
		rv.SetBool(b)
	case reflect.Int:
		n, ok := v.(int64)
		if !ok {
			d.typeError(path, v, "an integer")
			return
		}
		if n < math.MinInt || n > math.MaxInt {
			d.fail(path, fmt.Errorf("%d is out of range", n))
			return
		}
		rv.SetInt(n)
	case reflect.Int64: // a byte count (Duration is decoded above)
		n, ok := v.(int64)
		if !ok {
			d.typeError(path, v, "an integer")
			return
		}
		rv.SetInt(n)
	default:
		panic("config: no decoding for field type " + rv.Type().String())
	}
}

// table stores the keys of m in the fields of the struct rv.
func (d *decoder) table(m map[string]any, rv reflect.Value, path []string) {
	t := rv.Type()
	for key, v := range m {
		sub := append(path[:len(path):len(path)], key)
		f, ok := fieldByTag(t, key)
		if !ok {
			d.errs = append(d.errs, &Error{File: d.name, Line: d.line(sub), Key: displayKey(sub), Err: ErrUnknownKey})
			continue
		}
		d.value(v, rv.FieldByIndex(f.Index), sub)
	}
}

// fieldByTag returns the field of struct type t whose toml tag is key,
// looking into embedded structs without a tag (whose keys are the
// embedding table's, as BurntSushi/toml reads them); a field tagged "-"
// is not decoded. The field's Index leads from t to it.
func fieldByTag(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			if sub, ok := fieldByTag(f.Type, key); ok {
				sub.Index = append([]int{i}, sub.Index...)
				return sub, true
			}
			continue
		}
		if name == key && name != "-" && f.IsExported() {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// arrayElems returns the elements of a decoded TOML array: an array of
// tables decodes as []map[string]any, any other array as []any.
func arrayElems(v any) ([]any, bool) {
	switch a := v.(type) {
	case []any:
		return a, true
	case []map[string]any:
		elems := make([]any, len(a))
		for i, m := range a {
			elems[i] = m
		}
		return elems, true
	}
	return nil, false
}

func (d *decoder) typeError(path []string, v any, want string) {
	d.fail(path, fmt.Errorf("want %s, not %s", want, tomlTypeName(v)))
}

func (d *decoder) fail(path []string, err error) {
	d.errs = append(d.errs, &Error{File: d.name, Line: d.line(path), Key: displayKey(path), Err: err})
}

// line returns the line where path is first written, or 0.
func (d *decoder) line(path []string) int {
	return d.lines[pathString(path)]
}

// tomlTypeName names the TOML type of a decoded value, with an article.
func tomlTypeName(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case time.Time:
		return "a datetime"
	case []any:
		return "an array"
	case []map[string]any:
		return "an array of tables"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("a %T", v)
}

// indexPrefix starts a path element that is an array index rather than a
// key. Keys cannot hold it unless escaped, which only a hostile file does,
// and then the worst outcome is a wrong line number.
const indexPrefix = "\x00"

func indexElem(i int) string { return indexPrefix + strconv.Itoa(i) }

// pathString is the map key of path in the locator's table.
func pathString(path []string) string { return strings.Join(path, "\x01") }

// displayKey formats path as a dotted TOML key with its array indices,
// as Validate names keys: "listen[2].protocol", so that a key of one
// [[listen]] among several says which.
func displayKey(path []string) string {
	var b strings.Builder
	for i, p := range path {
		if idx, ok := strings.CutPrefix(p, indexPrefix); ok {
			b.WriteString("[" + idx + "]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(toml.Key{p}.String())
	}
	return b.String()
}
