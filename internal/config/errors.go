package config

import (
	"fmt"
	"strings"
)

// FieldError is one configuration problem, located by its key path
// ("routes[2].key.sources[0]").
type FieldError struct {
	Path string
	Msg  string
	// ofKey marks a problem with the key itself (an unknown one): a
	// problem with its value does not cover it.
	ofKey bool
}

func (e *FieldError) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

// Errors is every problem found in one configuration: unset ${NAME}s first,
// then type problems (unknown keys, bad durations, in key order), then
// Validate's findings (in struct order). Its Error is one problem per line.
type Errors []*FieldError

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap exposes each problem to errors.Is and errors.As.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// add records a problem at path.
func (es *Errors) add(path, format string, args ...any) {
	*es = append(*es, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// err returns nil for no problems, so callers can `return errs.err()`.
func (es Errors) err() error {
	if len(es) == 0 {
		return nil
	}
	return es
}

// join joins path segments: join("routes[0]", "key") = "routes[0].key".
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }
