package config

import (
	"regexp"
	"strings"
)

// Redacted returns a deep copy of c with every secret replaced by
// RedactedValue: verify.secrets, verify.challenge_token, admin.token, screen.redis.password, the
// passwords inside store.dsn and screen.redis.addrs, and the userinfo and query values of
// upstream URLs and admin.trace_url. An empty secret stays empty, so an unset one is visible as such.
func (c *Config) Redacted() *Config {
	r := c.clone()
	r.Admin.Token = redact(r.Admin.Token)
	r.Admin.TraceURL = RedactURL(r.Admin.TraceURL)
	r.Screen.Redis.Password = redact(r.Screen.Redis.Password)
	r.Store.DSN = RedactDSN(r.Store.DSN)
	for i, a := range r.Screen.Redis.Addrs {
		r.Screen.Redis.Addrs[i] = RedactDSN(a) // a redis:// URL's userinfo
	}
	for i := range r.Routes {
		rt := &r.Routes[i]
		for j := range rt.Verify.Secrets {
			rt.Verify.Secrets[j] = redact(rt.Verify.Secrets[j])
		}
		rt.Verify.ChallengeToken = redact(rt.Verify.ChallengeToken)
		rt.Upstream.URL = RedactURL(rt.Upstream.URL)
	}
	return r
}

func redact(s string) string {
	if s == "" {
		return ""
	}
	return RedactedValue
}

// dsnPassword finds password values in keyword/value DSNs
// ("host=db password='p w' dbname=x") and URL query strings (&password=…).
var dsnPassword = regexp.MustCompile(`(?i)(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|(?:[^\s&\\]|\\.)*)`)

// RedactDSN replaces the password of a connection string (URL userinfo,
// password= keyword or query parameter) with RedactedValue; other text is
// kept so the operator still sees where it points. It edits the text rather
// than going through url.URL, which would percent-encode the marker.
func RedactDSN(dsn string) string {
	out := dsn
	if i := strings.Index(out, "://"); i >= 0 {
		rest := out[i+3:]
		if at := userinfoEnd(rest); at >= 0 {
			if colon := strings.IndexByte(rest[:at], ':'); colon >= 0 && colon+1 < at {
				rest = rest[:colon+1] + RedactedValue + rest[at:]
			}
		}
		out = out[:i+3] + rest
	}
	return dsnPassword.ReplaceAllStringFunc(out, func(m string) string {
		sub := dsnPassword.FindStringSubmatch(m)
		if sub[2] == "" || sub[2] == "''" {
			return m
		}
		return sub[1] + RedactedValue
	})
}

// RedactURL hides what an upstream URL may carry as a credential: its
// userinfo whole (a token is often the user name alone) and the value of
// every query parameter, whose names are kept. Like RedactDSN it edits the
// text.
func RedactURL(s string) string {
	// Without "://" (a scheme forgotten: an error quotes it) the text is
	// read as if it followed one.
	head, rest := "", s
	if i := strings.Index(s, "://"); i >= 0 {
		head, rest = s[:i+3], s[i+3:]
	}
	if at := userinfoEnd(rest); at >= 0 {
		head += RedactedValue + "@"
		rest = rest[at+1:]
	}
	q := strings.IndexByte(rest, '?')
	if q < 0 {
		return head + rest
	}
	// A "#" is taken as part of a value: a secret pasted unescaped may
	// hold one.
	params := strings.Split(rest[q+1:], "&")
	for j, p := range params {
		if name, value, ok := strings.Cut(p, "="); ok && value != "" {
			params[j] = name + "=" + RedactedValue
		}
	}
	return head + rest[:q+1] + strings.Join(params, "&")
}

// userinfoEnd is the index of the "@" that ends the userinfo of rest, a
// URL's text after "://"; -1 when it has none.
func userinfoEnd(rest string) int {
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	// A password pasted unescaped may hold "/", "?" or "#": with a
	// user:… but no "@" before the first of them, the userinfo ends at
	// the last "@" of all. That may take a path's "@" for it and hide
	// too much, never too little.
	if strings.Contains(rest[:end], ":") && !strings.Contains(rest[:end], "@") {
		end = len(rest)
	}
	return strings.LastIndex(rest[:end], "@")
}

// clone deep-copies the configuration (every slice).
func (c *Config) clone() *Config {
	r := *c
	r.Server.TrustedProxies = cloneStrings(c.Server.TrustedProxies)
	r.Screen.Redis.Addrs = cloneStrings(c.Screen.Redis.Addrs)
	if c.Routes != nil {
		r.Routes = make([]Route, len(c.Routes))
		for i, rt := range c.Routes {
			rt.Methods = cloneStrings(rt.Methods)
			if rt.Key.Sources != nil {
				rt.Key.Sources = append([]KeySource(nil), rt.Key.Sources...)
			}
			rt.Fingerprint.Fields = cloneStrings(rt.Fingerprint.Fields)
			rt.Verify.Secrets = cloneStrings(rt.Verify.Secrets)
			rt.Record.Statuses = cloneStrings(rt.Record.Statuses)
			rt.Record.Headers = cloneStrings(rt.Record.Headers)
			r.Routes[i] = rt
		}
	}
	return &r
}

func cloneStrings(s []string) []string {
	if s == nil {
		return nil
	}
	return append([]string(nil), s...)
}
