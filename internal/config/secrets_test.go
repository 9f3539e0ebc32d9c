package config

import (
	"strings"
	"testing"
)

// The error list `gateway check` and `gateway serve` print for a bad file
// goes to a terminal or a log: it must not quote a secret (SPEC §9, §7),
// even one written in the wrong shape.
func TestErrorsNeverQuoteSecrets(t *testing.T) {
	const secret = "whsec_TOPSECRETVALUE"
	tests := []struct{ name, doc, want string }{
		{"secrets written as one value (a common slip)", `
routes:
  - name: a
    path: /a
    preset: stripe
    upstream: {url: "http://127.0.0.1:9000/a"}
    verify: {secrets: "${STRIPE_WEBHOOK_SECRET}"}
`, "routes[0].verify.secrets: want a list, got a text value (not shown"},
		{"upstream url with credentials and a bad port", `
routes:
  - name: a
    path: /a
    upstream: {url: "http://app:` + secret + `@127.0.0.1:90x0/a"}
    key: {sources: [{header: X-Event-Id}]}
`, `bad URL "http://[redacted]@127.0.0.1:90x0/a"`},
		{"upstream url with a password holding an unescaped slash", `
routes:
  - name: a
    path: /a
    upstream: {url: "http://app:TOPSECRET/VALUE@127.0.0.1:9000/a"}
    key: {sources: [{header: X-Event-Id}]}
`, `routes[0].upstream.url: bad URL`},
		{"upstream url with credentials and a scheme that is not http", `
routes:
  - name: a
    path: /a
    upstream: {url: "ftp://app:` + secret + `@127.0.0.1:9000/a"}
    key: {sources: [{header: X-Event-Id}]}
`, `routes[0].upstream.url: "ftp://[redacted]@127.0.0.1:9000/a" is not an absolute http`},
		{"upstream url with a password in its query and a fragment", `
routes:
  - name: a
    path: /a
    upstream: {url: "http://u:9000/x?password=` + secret + `#frag"}
    key: {sources: [{header: X-Event-Id}]}
`, `routes[0].upstream.url: "http://u:9000/x?password=[redacted]" has a fragment`},
		{"trace url with credentials and a scheme that is not http", `
admin: {trace_url: "ftp://viewer:` + secret + `@grafana/explore?traceId={trace_id}"}
` + minimal, `admin.trace_url: "ftp://[redacted]@grafana/explore?traceId=[redacted]" is not an absolute http`},
		{"trace url with credentials and no placeholder", `
admin: {trace_url: "https://viewer:` + secret + `@grafana/explore"}
` + minimal, `admin.trace_url: "https://[redacted]@grafana/explore" does not contain {trace_id}`},
		{"admin token written as a list", `
admin: {token: ["` + secret + `"]}
` + minimal, "admin.token: want a text value, got a list"},
		{"store dsn written as a mapping", `
store: {driver: postgres, dsn: {password: "` + secret + `"}}
` + minimal, "store.dsn: want a text value, got a mapping"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := mustFail(t, tt.doc, "STRIPE_WEBHOOK_SECRET="+secret).Error()
			if strings.Contains(msg, "TOPSECRET") {
				t.Errorf("the configuration error quotes (part of) the secret:\n%s", msg)
			}
			if !strings.Contains(msg, tt.want) {
				t.Errorf("the error does not say what is wrong (want %q):\n%s", tt.want, msg)
			}
		})
	}
}

// SPEC §3: an environment override sets the value it names; ${NAME}
// substitution is for the file's values. A password holding "${" must be
// settable through the environment, and taken literally.
func TestEnvOverrideIsLiteral(t *testing.T) {
	for _, pw := range []string{"Zq${x9", "a${HOME}b"} {
		c, err := LoadFromBytes([]byte(minimal), []string{"HOOKSTAMP_SCREEN__REDIS__PASSWORD=" + pw, "HOME=/root"})
		if err != nil {
			t.Fatalf("HOOKSTAMP_SCREEN__REDIS__PASSWORD=%s refused: %v", pw, err)
		}
		if c.Screen.Redis.Password != pw {
			t.Fatalf("screen.redis.password = %q, want %q", c.Screen.Redis.Password, pw)
		}
	}
	// The file's own references are still substituted.
	c, err := LoadFromBytes([]byte(minimal+"screen: {redis: {password: \"${PW}\"}}\n"), []string{"PW=from-env"})
	if err != nil || c.Screen.Redis.Password != "from-env" {
		t.Fatalf("${PW} in the file: %q, %v", c.Screen.Redis.Password, err)
	}
}

// A malformed PostgreSQL URL is a load-time error naming store.dsn, not
// a failure of serve's first connection; its password stays hidden.
func TestPostgresDSNIsChecked(t *testing.T) {
	for _, tc := range []struct{ dsn, want string }{
		{"postgres://app:TOPSECRET/VALUE@db:5432/hooks", "percent-encode reserved characters"},
		{"mysql://app@db/hooks", "want a postgres:// or postgresql:// URL"},
		{"mysql://app:TOPSECRET@db/hooks", "want a postgres:// or postgresql:// URL"},
	} {
		msg := mustFail(t, minimal+"store: {driver: postgres, dsn: \""+tc.dsn+"\"}\n").Error()
		if !strings.Contains(msg, "store.dsn: bad URL") || !strings.Contains(msg, tc.want) || strings.Contains(msg, "TOPSECRET") {
			t.Errorf("store.dsn %q: %s", tc.dsn, msg)
		}
	}
	// What the driver refuses at serve's start is refused by check too.
	for _, dsn := range []string{
		"postgres://app:TOPSECRET@db:5432/hooks?sslmode=bogus",
		"postgres://app:TOPSECRET@db:5432/hooks?connect_timeout=abc",
		"host=db dbname=hooks password=TOPSECRET sslmode=bogus",
	} {
		msg := mustFail(t, minimal+"store: {driver: postgres, dsn: \""+dsn+"\"}\n").Error()
		if !strings.Contains(msg, "store.dsn: the PostgreSQL driver refuses it") || strings.Contains(msg, "TOPSECRET") {
			t.Errorf("store.dsn %q: %s", dsn, msg)
		}
	}
	for _, dsn := range []string{"postgres://app:p%2Fss@db:5432/hooks?sslmode=disable", "postgresql://db/hooks", "host=db dbname=hooks user=app"} {
		if _, err := LoadFromBytes([]byte(minimal+"store: {driver: postgres, dsn: \""+dsn+"\"}\n"), nil); err != nil {
			t.Errorf("store.dsn %q refused: %v", dsn, err)
		}
	}
}

// A Redis URL pasted into screen.redis.addrs (redis://user:password@host,
// as many tools take it) is not host:port: the error says so without
// quoting the password it holds.
func TestRedisAddrErrorHidesCredentials(t *testing.T) {
	for _, addr := range []string{
		"redis://:TOPSECRET@cache.internal:6379",
		"rediss://default:TOPSECRET@cache.internal:6380/0",
		"default:TOPSECRET@cache.internal:6379",
	} {
		doc := minimal + "screen: {driver: redis, redis: {addrs: [\"" + addr + "\"]}}\n"
		msg := mustFail(t, doc).Error()
		if strings.Contains(msg, "TOPSECRET") {
			t.Errorf("screen.redis.addrs %q: the error quotes the password:\n%s", addr, msg)
		}
		if !strings.Contains(msg, "screen.redis.addrs[0]") {
			t.Errorf("screen.redis.addrs %q: the error does not name the key:\n%s", addr, msg)
		}
		// The same through the environment override.
		msg = mustFail(t, minimal+"screen: {driver: redis}\n", "HOOKSTAMP_SCREEN__REDIS__ADDRS="+addr).Error()
		if strings.Contains(msg, "TOPSECRET") {
			t.Errorf("HOOKSTAMP_SCREEN__REDIS__ADDRS=%s: the error quotes the password:\n%s", addr, msg)
		}
	}
}

// store.driver and store.dsn must agree. The default driver is sqlite: a
// PostgreSQL URL set as the DSN without driver postgres (say through
// HOOKSTAMP_STORE__DSN alone) would otherwise serve on a local SQLite
// file named after the URL — its password in the file name, and each
// replica with a ledger of its own, so nothing deduplicated across them.
func TestStoreDriverAndDSNAgree(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		environ   []string
	}{
		{"postgres URL, driver left sqlite", minimal + "store: {dsn: \"postgres://app:TOPSECRET@db:5432/hooks?sslmode=disable\"}\n", nil},
		{"postgresql URL through the environment", minimal, []string{"HOOKSTAMP_STORE__DSN=postgresql://app:TOPSECRET@db/hooks"}},
		{"keyword=value DSN through the environment", minimal, []string{"HOOKSTAMP_STORE__DSN=host=db.internal user=app password=TOPSECRET dbname=hooks sslmode=require"}},
		{"keyword=value DSN, password first", minimal + "store: {dsn: \"password=TOPSECRET host=db\"}\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := mustFail(t, tc.doc, tc.environ...)
			assertProblem(t, errs, "store.dsn", "store.driver")
			if strings.Contains(errs.Error(), "TOPSECRET") {
				t.Errorf("the error quotes the password:\n%v", errs)
			}
		})
	}
	// driver postgres with the sqlite default DSN (store.dsn left unset):
	// neither a URL nor keyword=value, so `gateway check` must refuse what
	// serve's first step (pgx.ParseConfig) refuses.
	for _, dsn := range []string{"", "data/hookstamp.db", "db.internal:5432"} {
		doc := minimal + "store: {driver: postgres}\n"
		if dsn != "" {
			doc = minimal + "store: {driver: postgres, dsn: \"" + dsn + "\"}\n"
		}
		assertProblem(t, mustFail(t, doc), "store.dsn", "postgres")
	}
	// `gateway check` refuses what opening the SQLite ledger refuses.
	for _, dsn := range []string{"file:hooks.db?_time_format=sqlite", "hooks.db?_pragma=foreign_keys(1)&_timezone=UTC"} {
		assertProblem(t, mustFail(t, minimal+"store: {dsn: \""+dsn+"\"}\n"), "store.dsn", "is not supported")
	}
	// What is right still loads.
	for _, doc := range []string{
		minimal + "store: {driver: sqlite, dsn: \"file:data/hooks.db?_pragma=foreign_keys(1)\"}\n",
		minimal + "store: {driver: sqlite, dsn: \":memory:\"}\n",
		minimal + "store: {driver: sqlite, dsn: \"data/host=a.db\"}\n",
		minimal + "store: {driver: postgres, dsn: \"host=db dbname=hooks\"}\n",
	} {
		mustLoad(t, doc)
	}
}

// A text value written without quotes that YAML reads as a number must keep
// the text the user wrote: token 0123 read as the octal number 83, or a
// long numeric secret read as 1.2345678901234568e+22, silently made
// /admin/* refuse the token and every signature fail to verify.
func TestNumberLikeTextKeptAsWritten(t *testing.T) {
	doc := `
admin: {token: 0123}
store: {max_open_conns: 8}
screen: {prefix: 0x10, redis: {password: 1e3}}
telemetry: {traces: {sample_ratio: 0.25}}
routes:
  - name: 007
    path: /r
    upstream: {url: "http://127.0.0.1:9000/r"}
    key: {sources: [{header: X-Event-Id}], max_length: 64}
    verify: {scheme: github, secrets: [0123, 12345678901234567890123]}
    record: {statuses: [200, 404], max_body: 1024}
`
	c, err := LoadFromBytes([]byte(doc), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := c.Routes[0]
	for _, tc := range []struct{ key, got, want string }{
		{"admin.token", c.Admin.Token, "0123"},
		{"screen.prefix", c.Screen.Prefix, "0x10"},
		{"screen.redis.password", c.Screen.Redis.Password, "1e3"},
		{"routes[0].name", r.Name, "007"},
		{"routes[0].verify.secrets[0]", r.Verify.Secrets[0], "0123"},
		{"routes[0].verify.secrets[1]", r.Verify.Secrets[1], "12345678901234567890123"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %q, want %q as written", tc.key, tc.got, tc.want)
		}
	}
	// Numbers where numbers belong still read as numbers.
	if c.Store.MaxOpenConns != 8 || c.Telemetry.Traces.SampleRatio != 0.25 || r.Key.MaxLength != 64 ||
		r.Record.MaxBody != 1024 || strings.Join(r.Record.Statuses, ",") != "200,404" {
		t.Errorf("numeric values: max_open_conns %d, sample_ratio %v, max_length %d, max_body %s, statuses %v",
			c.Store.MaxOpenConns, c.Telemetry.Traces.SampleRatio, r.Key.MaxLength, r.Record.MaxBody, r.Record.Statuses)
	}
}
