package http1

// ValidFieldName reports whether name is a field name: a non-empty
// token (RFC 9110 §5.6.2).
func ValidFieldName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !tchar[name[i]] {
			return false
		}
	}
	return true
}

// ValidFieldValue reports whether v may be a field's value as rustle
// writes it: visible characters, obs-text, spaces and tabs within it,
// none at either end, and no CR, LF, NUL or other control (RFC 9110
// §5.5).
func ValidFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if !fieldVChar[v[i]] {
			return false
		}
	}
	return v == "" || v[0] != ' ' && v[0] != '\t' && v[len(v)-1] != ' ' && v[len(v)-1] != '\t'
}
