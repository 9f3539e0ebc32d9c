package config

import (
	"fmt"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// Placeholder kinds of a key template. Header, json, form and query take an
// argument (the name or GJSON path); route and method take none.
const (
	PlaceholderHeader = "header"
	PlaceholderJSON   = "json"
	PlaceholderForm   = "form"
	PlaceholderQuery  = "query"
	PlaceholderRoute  = "route"
	PlaceholderMethod = "method"
)

// TemplatePart is one piece of a parsed key template: literal text when Kind
// is "", otherwise a placeholder {Kind:Arg} (or {Kind} for route and method).
type TemplatePart struct {
	Literal string
	Kind    string
	Arg     string
}

// ParseTemplate parses a key template such as
// "{json:order_id}-{json:event}-{json:seq}". Placeholders are {header:NAME},
// {json:PATH}, {form:NAME}, {query:NAME}, {route} and {method}; braces must
// balance and cannot be nested or escaped. A template needs at least one
// placeholder other than {route} and {method}: otherwise every delivery
// would share one key.
func ParseTemplate(s string) ([]TemplatePart, error) {
	if s == "" {
		return nil, fmt.Errorf("empty template")
	}
	var (
		parts   []TemplatePart
		dynamic bool
		rest    = s
	)
	for rest != "" {
		open := strings.IndexAny(rest, "{}")
		if open < 0 {
			parts = append(parts, TemplatePart{Literal: rest})
			break
		}
		if rest[open] == '}' {
			return nil, fmt.Errorf("template %q: unbalanced %q at offset %d", s, "}", len(s)-len(rest)+open)
		}
		if open > 0 {
			parts = append(parts, TemplatePart{Literal: rest[:open]})
		}
		body := rest[open+1:]
		end := strings.IndexAny(body, "{}")
		if end < 0 || body[end] == '{' {
			return nil, fmt.Errorf("template %q: unclosed %q at offset %d", s, "{", len(s)-len(rest)+open)
		}
		p, err := parsePlaceholder(body[:end])
		if err != nil {
			return nil, fmt.Errorf("template %q: %w", s, err)
		}
		if p.Kind != PlaceholderRoute && p.Kind != PlaceholderMethod {
			dynamic = true
		}
		parts = append(parts, p)
		rest = body[end+1:]
	}
	if !dynamic {
		return nil, fmt.Errorf("template %q has no {header:…}, {json:…}, {form:…} or {query:…} placeholder: every delivery would share one key", s)
	}
	return parts, nil
}

func parsePlaceholder(in string) (TemplatePart, error) {
	kind, arg, hasArg := strings.Cut(in, ":")
	switch kind {
	case PlaceholderRoute, PlaceholderMethod:
		if hasArg {
			return TemplatePart{}, fmt.Errorf("{%s} takes no argument, got {%s}", kind, in)
		}
		return TemplatePart{Kind: kind}, nil
	case PlaceholderHeader, PlaceholderJSON, PlaceholderForm, PlaceholderQuery:
		if strings.TrimSpace(arg) == "" {
			return TemplatePart{}, fmt.Errorf("{%s} needs an argument, e.g. {%s:%s}", in, kind, exampleArg(kind))
		}
		if kind == PlaceholderHeader && !httpguts.ValidHeaderFieldName(arg) {
			return TemplatePart{}, fmt.Errorf("{%s}: %q is not a valid header name", in, arg)
		}
		return TemplatePart{Kind: kind, Arg: arg}, nil
	default:
		return TemplatePart{}, fmt.Errorf("unknown placeholder {%s} (want {header:NAME}, {json:PATH}, {form:NAME}, {query:NAME}, {route} or {method})", in)
	}
}

func exampleArg(kind string) string {
	switch kind {
	case PlaceholderJSON:
		return "data.object.id"
	case PlaceholderHeader:
		return "X-Event-Id"
	default:
		return "event_id"
	}
}
