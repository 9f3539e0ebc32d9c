package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/net/http/httpguts"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/verify"
)

var routeNameRE = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)

// Validate reports every problem of the configuration, each as a FieldError
// with its key path, together in an Errors; nil when there is none. It never
// changes a value.
func (c *Config) Validate() error {
	var errs Errors
	c.validateServer(&errs)
	c.validateTLS(&errs)
	c.validateAdmin(&errs)
	c.validateListeners(&errs)
	c.validateStore(&errs)
	c.validateScreen(&errs)
	c.validateTelemetry(&errs)
	c.validateRoutes(&errs)
	return errs.err()
}

func (c *Config) validateServer(errs *Errors) {
	s := c.Server
	if s.Listen == "" {
		errs.add("server.listen", "required (host:port, e.g. \":8080\")")
	} else if err := checkHostPort(s.Listen); err != nil {
		errs.add("server.listen", "%v", err)
	}
	positiveSize(errs, "server.body_limit", s.BodyLimit)
	positive(errs, "server.read_timeout", s.ReadTimeout)
	positive(errs, "server.write_timeout", s.WriteTimeout)
	positive(errs, "server.shutdown_timeout", s.ShutdownTimeout)
	if s.MaxConns <= 0 {
		errs.add("server.max_conns", "must be at least 1, got %d", s.MaxConns)
	}
	for i, p := range s.TrustedProxies {
		if _, err := ParseTrustedProxy(p); err != nil {
			errs.add(index("server.trusted_proxies", i), "%v", err)
		}
	}
}

// ParseTrustedProxy reads one server.trusted_proxies entry: a CIDR, or a
// single IP address as the prefix holding only it (an IPv4-mapped IPv6
// address as its IPv4 one). The validator and the server share it, so
// that what `gateway check` accepts serves.
func ParseTrustedProxy(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is neither a CIDR (10.0.0.0/8) nor an IP address", s)
	}
	a = a.WithZone("").Unmap() // peers are compared unmapped, without zone
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func (c *Config) validateAdmin(errs *Errors) {
	a := c.Admin
	checkTraceURL(errs, a.TraceURL)
	for i, h := range a.ConsoleHosts {
		if !isHostName(h) {
			errs.add(index("admin.console_hosts", i), "%q is not a host name (e.g. console.example.com: no scheme, port, path or wildcard)", h)
		}
	}
	if a.Listen == "" {
		return
	}
	if err := checkHostPort(a.Listen); err != nil {
		errs.add("admin.listen", "%v (or \"\" to turn the admin listener off)", err)
	}
}

// validateListeners refuses two listeners that cannot both bind, which
// serve would find only when the second one fails.
func (c *Config) validateListeners(errs *Errors) {
	ls := []struct{ path, addr string }{
		{"server.listen", c.Server.Listen},
		{"admin.listen", c.Admin.Listen},
		{"server.redirect_listen", c.Server.RedirectListen},
	}
	for i, a := range ls {
		for _, b := range ls[:i] {
			if port, clash := listenersClash(a.addr, b.addr); clash {
				errs.add(a.path, "%q and %s %q both take port %d: the listeners need different ports, or different addresses neither of which is every interface",
					a.addr, b.path, b.addr, port)
			}
		}
	}
}

// listenersClash reports whether listeners on a and b cannot both bind:
// the same port, and the same host or one listening on every interface.
// Port 0 asks the kernel for a free port: two of them never clash. An
// address that is not host:port clashes with none (its own error says so).
func listenersClash(a, b string) (port int, clash bool) {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil {
		return 0, false
	}
	port, err := strconv.Atoi(pa)
	if n, errN := strconv.Atoi(pb); err != nil || errN != nil || n != port || port == 0 {
		return 0, false
	}
	ha, hb = listenHost(ha), listenHost(hb)
	return port, ha == "" || hb == "" || ha == hb
}

// listenHost spells the host a listener binds one way: "" for every
// interface, "localhost" for the loopback address under any of its names,
// an IP address in its canonical form, a name in lower case.
func listenHost(h string) string {
	if a, err := netip.ParseAddr(h); err == nil {
		a = a.Unmap()
		switch {
		case a.IsUnspecified():
			return ""
		case a == netip.IPv6Loopback() || a == netip.AddrFrom4([4]byte{127, 0, 0, 1}):
			return "localhost"
		}
		return a.String()
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// isHostName accepts a host name as a browser sends it in Host, without
// the port: dot-separated labels of letters, digits, "-" and "_" (a
// container's name may hold one), or an IP address.
func isHostName(s string) bool {
	if _, err := netip.ParseAddr(s); err == nil {
		return true
	}
	return dnsLabels(strings.TrimSuffix(s, "."), func(string) bool { return true })
}

// checkTraceURL wants an absolute http(s) URL naming {trace_id}, or "".
func checkTraceURL(errs *Errors, s string) {
	if s == "" {
		return
	}
	u, err := url.Parse(strings.ReplaceAll(s, "{trace_id}", "0"))
	switch {
	case err != nil:
		errs.add("admin.trace_url", "%s", urlProblem(s, err))
	case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		errs.add("admin.trace_url", "%q is not an absolute http:// or https:// URL", RedactURL(s))
	case !strings.Contains(s, "{trace_id}"):
		errs.add("admin.trace_url", "%q does not contain {trace_id}, which the console replaces with the event's trace id", RedactURL(s))
	}
}

// urlProblem is url.Parse's complaint about s, fit for an error message:
// url.Error quotes the whole URL, and its inner error may quote a part of
// it ("invalid port \":pa\" after host" for a password with an unescaped
// "/"), so with userinfo in sight only the kind of problem is kept.
func urlProblem(s string, err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if strings.Contains(s, "@") {
		return "it does not parse as a URL (is a reserved character unescaped in the user name or password?)"
	}
	return err.Error()
}

// checkPostgresDSN catches a malformed URL DSN at load time (gateway
// check), where the driver would only refuse it when serve first connects.
// Keyword/value DSNs ("host=db dbname=x") are left to the driver.
func checkPostgresDSN(errs *Errors, dsn string) {
	if !strings.Contains(dsn, "://") {
		// pgx reads anything else as keyword=value pairs and refuses a
		// text with none, such as the sqlite default "data/hookstamp.db".
		if !strings.Contains(dsn, "=") {
			errs.add("store.dsn", "not a PostgreSQL connection string (not shown: it may hold a password; "+
				"want a postgres:// URL or host=… dbname=… keywords)")
			return
		}
		driverRefusal(errs, dsn)
		return
	}
	u, err := url.Parse(dsn)
	if err != nil {
		errs.add("store.dsn", "bad URL %q: %s (percent-encode reserved characters such as / ? # @ : in the user name and password)", RedactDSN(dsn), urlProblem(dsn, err))
		return
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		errs.add("store.dsn", "bad URL %q: want a postgres:// or postgresql:// URL (or host=… dbname=… keywords)", RedactDSN(dsn))
		return
	}
	driverRefusal(errs, dsn)
}

// driverRefusal adds what the PostgreSQL driver refuses in dsn (a bad
// sslmode, a connect_timeout that is not a number), which serve and
// migrate would meet at start. The driver's words quote the DSN, its
// password masked; only what follows is kept.
func driverRefusal(errs *Errors, dsn string) {
	if _, err := pgconn.ParseConfig(dsn); err != nil {
		msg := err.Error()
		if _, after, ok := strings.Cut(msg, "`: "); ok {
			msg = after
		}
		errs.add("store.dsn", "the PostgreSQL driver refuses it: %s", msg)
	}
}

// isPostgresURL reports whether dsn is a postgres:// or postgresql:// URL.
func isPostgresURL(dsn string) bool {
	scheme, _, ok := strings.Cut(dsn, "://")
	return ok && (strings.EqualFold(scheme, "postgres") || strings.EqualFold(scheme, "postgresql"))
}

// postgresKeyword matches a libpq connection keyword that a PostgreSQL
// DSN in key=value form starts with or holds after a space.
var postgresKeyword = regexp.MustCompile(`(^|\s)(host|hostaddr|port|dbname|user|password|sslmode|connect_timeout)\s*=`)

// isPostgresKeywords reports a DSN in libpq's key=value form, which no
// SQLite file name or URI is.
func isPostgresKeywords(dsn string) bool {
	return !strings.HasPrefix(dsn, "file:") && postgresKeyword.MatchString(dsn)
}

func (c *Config) validateStore(errs *Errors) {
	s := c.Store
	oneOf(errs, "store.driver", s.Driver, StoreSQLite, StorePostgres)
	switch {
	case s.DSN == "":
		errs.add("store.dsn", "required (a file for sqlite, a URL for postgres)")
	case s.Driver == StorePostgres:
		checkPostgresDSN(errs, s.DSN)
	case s.Driver == StoreSQLite && (isPostgresURL(s.DSN) || isPostgresKeywords(s.DSN)):
		// SQLite would take the DSN for a file name and serve on a local
		// file: each replica with a ledger of its own, a password in a
		// file name.
		errs.add("store.dsn", "%q is a PostgreSQL DSN but store.driver is %q: set store.driver: postgres", RedactDSN(s.DSN), s.Driver)
	case s.Driver == StoreSQLite:
		if err := sqlledger.CheckSQLiteDSN(s.DSN); err != nil {
			errs.add("store.dsn", "%v", err)
		}
	}
	if s.MaxOpenConns <= 0 {
		errs.add("store.max_open_conns", "must be at least 1, got %d", s.MaxOpenConns)
	}
	positive(errs, "store.sweep_interval", s.SweepInterval)
	oneOf(errs, "store.on_unavailable", s.OnUnavailable, StoreUnavailableReject, StoreUnavailablePass)
}

func (c *Config) validateScreen(errs *Errors) {
	s := c.Screen
	oneOf(errs, "screen.driver", s.Driver, ScreenMemory, ScreenRedis, ScreenNone)
	if s.Driver == ScreenRedis {
		if len(s.Redis.Addrs) == 0 {
			errs.add("screen.redis.addrs", "at least one host:port is required with driver redis")
		}
		for i, a := range s.Redis.Addrs {
			switch err := checkHostPort(a); {
			case err != nil && strings.Contains(a, "@"):
				// A Redis URL (redis://user:password@host) pasted here:
				// its password must not reach the error list.
				errs.add(index("screen.redis.addrs", i), "not host:port (not shown: it has user info, which may hold a password; "+
					"write host:port here and the password in screen.redis.password)")
			case err != nil:
				errs.add(index("screen.redis.addrs", i), "%v", err)
			}
		}
	}
	if s.Redis.DB < 0 {
		errs.add("screen.redis.db", "must not be negative, got %d", s.Redis.DB)
	} else if s.Redis.DB != 0 && len(s.Redis.Addrs) > 1 {
		errs.add("screen.redis.db", "must be 0 with several addrs (Redis Cluster has only database 0), got %d", s.Redis.DB)
	}
	positive(errs, "screen.lease", s.Lease)
	positive(errs, "screen.ttl", s.TTL)
	nonNegativeSize(errs, "screen.max_cached_body", s.MaxCachedBody)
	nonNegativeSize(errs, "screen.local_cache", s.LocalCache)
	oneOf(errs, "screen.on_unavailable", s.OnUnavailable, ScreenUnavailableStore, ScreenUnavailableReject, ScreenUnavailablePass)
}

func (c *Config) validateTelemetry(errs *Errors) {
	t := c.Telemetry
	if t.ServiceName == "" {
		errs.add("telemetry.service_name", "required")
	}
	oneOf(errs, "telemetry.traces.exporter", t.Traces.Exporter, ExporterNone, ExporterStdout, ExporterOTLP)
	if r := t.Traces.SampleRatio; math.IsNaN(r) || r < 0 || r > 1 {
		errs.add("telemetry.traces.sample_ratio", "must be between 0 and 1, got %v", r)
	}
	oneOf(errs, "telemetry.log.level", t.Log.Level, "debug", "info", "warn", "error")
	oneOf(errs, "telemetry.log.format", t.Log.Format, "json", "text")
}

// OTLPProtocols are the OTLP trace protocols the exporter speaks, its
// default first: one list for what check accepts and what serve starts.
var OTLPProtocols = []string{OTLPHTTPProtobuf, OTLPGRPC}

// OTLPProtocol is the OTLP trace protocol that
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, or else OTEL_EXPORTER_OTLP_PROTOCOL,
// asks for, looked up by getenv; the default when neither is set. An error
// when it is none of OTLPProtocols.
func OTLPProtocol(getenv func(string) string) (string, error) {
	name := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	p := getenv(name)
	if p == "" {
		name = "OTEL_EXPORTER_OTLP_PROTOCOL"
		p = getenv(name)
	}
	switch {
	case p == "":
		return OTLPProtocols[0], nil
	case !contains(OTLPProtocols, p):
		return "", fmt.Errorf("OTLP protocol %q is not supported (want %s; from %s)", p, orList(OTLPProtocols), name)
	}
	return p, nil
}

// validateEnvironment checks the variables beyond HOOKSTAMP_* and ${NAME}
// that serve reads at start: the OTLP exporter's protocol.
func (c *Config) validateEnvironment(errs *Errors, lookup func(string) (string, bool)) {
	if c.Telemetry.Traces.Exporter != ExporterOTLP {
		return
	}
	if _, err := OTLPProtocol(func(name string) string { v, _ := lookup(name); return v }); err != nil {
		errs.add("telemetry.traces.exporter", "%v", err)
	}
}

func (c *Config) validateRoutes(errs *Errors) {
	if len(c.Routes) == 0 {
		errs.add("routes", "at least one route is required")
		return
	}
	names := map[string]int{}
	for i, r := range c.Routes {
		p := index("routes", i)
		if first, dup := names[r.Name]; dup && r.Name != "" {
			errs.add(join(p, "name"), "%q is already the name of routes[%d]", r.Name, first)
		} else {
			names[r.Name] = i
		}
		for j := 0; j < i; j++ {
			if m := overlap(c.Routes[j], r); m != "" {
				errs.add(join(p, "path"), "%s %s is already routed by routes[%d] (%q)", m, r.Path, j, c.Routes[j].Name)
				break
			}
		}
		c.validateRoute(errs, p, r)
	}
}

// overlap returns a method that two routes on the same path both claim.
func overlap(a, b Route) string {
	if a.Path == "" || a.IsPrefix() != b.IsPrefix() || a.MatchPath() != b.MatchPath() {
		return ""
	}
	for _, m := range b.Methods {
		if a.HasMethod(m) {
			return m
		}
	}
	return ""
}

func (c *Config) validateRoute(errs *Errors, p string, r Route) {
	switch {
	case r.Name == "":
		errs.add(join(p, "name"), "required")
	case !routeNameRE.MatchString(r.Name):
		errs.add(join(p, "name"), "%q is not a valid route name (want 1 to 64 of a-z, 0-9, _ and -)", r.Name)
	}
	if err := checkRoutePath(r.Path); err != nil {
		errs.add(join(p, "path"), "%v", err)
	}
	if len(r.Methods) == 0 {
		errs.add(join(p, "methods"), "at least one method is required (other methods pass through)")
	}
	seen := map[string]bool{}
	for i, m := range r.Methods {
		switch {
		case !httpguts.ValidHeaderFieldName(m): // a method is a token, as a header name is
			errs.add(index(join(p, "methods"), i), "%q is not a valid HTTP method", m)
		case strings.ToUpper(m) != m:
			errs.add(index(join(p, "methods"), i), "%q must be upper case (methods are case-sensitive; a %q request would never match)", m, strings.ToUpper(m))
		case seen[m]:
			errs.add(index(join(p, "methods"), i), "%q is listed twice", m)
		}
		seen[m] = true
	}
	oneOf(errs, join(p, "mode"), r.Mode, ModeEnforce, ModeShadow)
	if r.Preset != "" {
		if _, ok := LookupPreset(r.Preset); !ok {
			errs.add(join(p, "preset"), "unknown preset %q (want %s)", r.Preset, orList(PresetNames()))
		}
	}
	c.validateUpstream(errs, join(p, "upstream"), r.Upstream, r.Delivery == DeliveryAsync)
	validateKey(errs, join(p, "key"), r.Name, r.Key)
	validateFingerprint(errs, join(p, "fingerprint"), r.Fingerprint)
	validateVerify(errs, join(p, "verify"), r.Verify)
	oneOf(errs, join(p, "inflight"), r.Inflight, InflightWait, InflightReject)
	if r.WaitTimeout < 0 || (r.Inflight == InflightWait && r.WaitTimeout == 0) {
		errs.add(join(p, "wait_timeout"), "must be greater than 0 with inflight wait, got %s", r.WaitTimeout)
	}
	notTooLong(errs, join(p, "wait_timeout"), r.WaitTimeout)
	validateRecord(errs, join(p, "record"), r.Record)
	validateDelivery(errs, p, r)
	positive(errs, join(p, "retention"), r.Retention)
	if r.Retention > 0 && c.Screen.Lease > 0 && r.Retention <= c.Screen.Lease {
		// A ledger claim's row expires with the route's retention: the
		// sweeper would delete a claim still in flight, letting a retry
		// through beside it.
		errs.add(join(p, "retention"), "%s is not longer than screen.lease (%s): the sweeper would delete claims still in flight", r.Retention, c.Screen.Lease)
	}
	if r.Source != "ip" {
		name, ok := strings.CutPrefix(r.Source, "header:")
		if !ok || !httpguts.ValidHeaderFieldName(name) {
			errs.add(join(p, "source"), "bad source %q (want \"ip\" or \"header:NAME\")", r.Source)
		}
	}
}

func checkRoutePath(path string) error {
	switch {
	case path == "":
		return errors.New("required (e.g. /webhooks/stripe, or /hooks/* for a prefix)")
	case path[0] != '/':
		return fmt.Errorf("%q must start with \"/\"", path)
	case strings.ContainsAny(path, "?#"):
		return fmt.Errorf("%q: a route path has no query or fragment", path)
	case strings.Contains(path, "*") && (strings.Count(path, "*") > 1 || !strings.HasSuffix(path, "/*")):
		return fmt.Errorf("%q: \"*\" is only allowed as a final \"/*\" (prefix route)", path)
	}
	for _, c := range path {
		if c <= ' ' || c == 0x7f {
			return fmt.Errorf("%q contains a space or control character (percent-encode it: %%20)", path)
		}
	}
	// Requests are matched on their decoded path (Route.MatchPath): the
	// checks below are on the path as it will be matched.
	decoded, err := url.PathUnescape(path)
	if err != nil {
		return fmt.Errorf("%q has a malformed percent-escape (want %%XY, two hex digits)", path)
	}
	for _, c := range decoded {
		if c < ' ' || c == 0x7f {
			return fmt.Errorf("%q contains an escaped control character", path)
		}
	}
	for _, seg := range strings.Split(decoded[1:], "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("%q contains a %q segment (requests are matched on the cleaned path)", path, seg)
		}
	}
	if strings.Contains(decoded, "//") {
		return fmt.Errorf("%q contains an empty segment \"//\"", path)
	}
	return nil
}

// validateUpstream checks u; an async route's forwards hold no claim, so
// its timeout is not bounded by the lease.
func (c *Config) validateUpstream(errs *Errors, p string, u Upstream, async bool) {
	if err := checkHTTPURL(u.URL); err != nil {
		errs.add(join(p, "url"), "%v", err)
	}
	switch {
	case u.Timeout <= 0:
		errs.add(join(p, "timeout"), "must be greater than 0, got %s", u.Timeout)
	case !async && c.Screen.Lease > 0 && u.Timeout >= c.Screen.Lease:
		errs.add(join(p, "timeout"), "%s is not shorter than screen.lease (%s): a claim would expire while its delivery is still being forwarded, letting a retry through", u.Timeout, c.Screen.Lease)
	}
	notTooLong(errs, join(p, "timeout"), u.Timeout)
	if u.KeyHeader != "" && !httpguts.ValidHeaderFieldName(u.KeyHeader) {
		errs.add(join(p, "key_header"), "%q is not a valid header name (\"\" sends none)", u.KeyHeader)
	}
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func checkHTTPURL(s string) error {
	if s == "" {
		return errors.New("required (an absolute http:// or https:// URL)")
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("bad URL %q: %s", RedactURL(s), urlProblem(s, err))
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an absolute http:// or https:// URL", RedactURL(s))
	}
	if h := u.Hostname(); !isASCII(h) {
		// The forwarder dials, names (Host, SNI) the host as written: a
		// name outside ASCII is found by no resolver.
		return fmt.Errorf("host %q is not ASCII: write its A-label (xn--…) form", h)
	}
	if u.Fragment != "" {
		return fmt.Errorf("%q has a fragment, which is never sent", RedactURL(s))
	}
	return nil
}

// MaxKeyLength bounds key.max_length: PostgreSQL cannot index a
// (route, key) pair much over 2.7 KB, so a longer key could never be
// recorded. Provider ids are tens of bytes.
const MaxKeyLength = 2048

func validateKey(errs *Errors, p, route string, k Key) {
	before := len(*errs)
	if len(k.Sources) == 0 {
		errs.add(join(p, "sources"), "at least one source is required (or name a preset)")
	}
	for i, s := range k.Sources {
		sp := index(join(p, "sources"), i)
		switch s.Kind {
		case SourceHeader:
			if !httpguts.ValidHeaderFieldName(s.Arg) {
				errs.add(sp, "header %q is not a valid header name", s.Arg)
			}
		case SourceJSON, SourceForm, SourceQuery:
			if strings.TrimSpace(s.Arg) == "" {
				errs.add(sp, "%s source needs a %s", s.Kind, map[string]string{SourceJSON: "GJSON path", SourceForm: "field name", SourceQuery: "parameter name"}[s.Kind])
			}
		case SourceTemplate:
			if _, err := ParseTemplate(s.Arg); err != nil {
				errs.add(sp, "%v", err)
			}
		case SourceBodyHash:
			if s.Arg != "sha256" {
				errs.add(sp, "body_hash %q is not supported (want sha256)", s.Arg)
			}
		case SourceFieldsHash:
			// Its entries are checked by the extractor, which names them.
		default:
			errs.add(sp, "unknown source %q (want header, json, form, query, template, body_hash or fields_hash)", s.Kind)
		}
	}
	if k.MaxLength <= 0 || k.MaxLength > MaxKeyLength {
		errs.add(join(p, "max_length"), "must be between 1 and %d bytes (the longest key PostgreSQL can index), got %d", MaxKeyLength, k.MaxLength)
	}
	if len(*errs) == before {
		// The extractor has the last word, so that `gateway check` rejects
		// everything `gateway serve` would. Its errors start with the
		// source ("sources[1]: …").
		if _, err := k.extractor(route); err != nil {
			addBuildError(errs, p, "sources", err)
		}
	}
}

// addBuildError reports an error of a constructor that `gateway serve`
// calls, under the configuration key its message starts with (or under
// fallback).
func addBuildError(errs *Errors, p, fallback string, err error) {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			addBuildError(errs, p, fallback, e)
		}
		return
	}
	key, msg, ok := strings.Cut(err.Error(), ": ")
	if !ok {
		key, msg = fallback, err.Error()
	}
	errs.add(join(p, key), "%s", msg)
}

func validateFingerprint(errs *Errors, p string, f Fingerprint) {
	before := len(*errs)
	oneOf(errs, join(p, "mode"), f.Mode, FingerprintBody, FingerprintFields, FingerprintNone)
	switch {
	case f.Mode == FingerprintFields && len(f.Fields) == 0:
		errs.add(join(p, "fields"), "at least one field is required with mode fields")
	case f.Mode != FingerprintFields && len(f.Fields) > 0:
		errs.add(join(p, "fields"), "fields are only used with mode fields (mode is %q)", f.Mode)
	}
	for i, field := range f.Fields {
		kind, arg, _ := strings.Cut(field, ":")
		ok := strings.TrimSpace(arg) != ""
		switch kind {
		case "json", "form", "query":
		case "header":
			ok = ok && httpguts.ValidHeaderFieldName(arg)
		default:
			ok = false
		}
		if !ok {
			errs.add(index(join(p, "fields"), i), "bad field %q (want json:PATH, form:NAME, header:NAME or query:NAME)", field)
		}
	}
	oneOf(errs, join(p, "on_mismatch"), f.OnMismatch, OnMismatchReject, OnMismatchReplay)
	if len(*errs) == before {
		// The fingerprinter has the last word (duplicate fields, names
		// with spaces); its errors start with the field ("fields[1]: …").
		if _, err := f.fingerprinter(); err != nil {
			addBuildError(errs, p, "fields", err)
		}
	}
}

func validateVerify(errs *Errors, p string, v Verify) {
	before := len(*errs)
	validateScheme(errs, p, v)
	validateSchemeNeeds(errs, p, v)
	validateVerifyValues(errs, p, v)
	if len(*errs) == before && v.Scheme != "" {
		// What passed the checks above must also build: the verifier has
		// the last word (key formats, sizes), so `gateway check` rejects
		// everything `gateway serve` would. Its errors start with the key.
		if _, err := v.verifier(); err != nil {
			addBuildError(errs, p, "scheme", err)
		}
	}
}

// validateScheme checks that the scheme is known and has the keys it
// verifies with, or, when there is no scheme, that nothing else is set.
func validateScheme(errs *Errors, p string, v Verify) {
	hasSecret := slices.ContainsFunc(v.Secrets, func(s string) bool { return s != "" })
	switch {
	case v.Scheme == "":
		var set []string
		if hasSecret {
			set = append(set, "secrets")
		}
		for _, f := range []struct{ name, v string }{{"public_key", v.PublicKey}, {"url", v.URL}, {"header", v.Header}, {"prefix", v.Prefix},
			{"json", v.JSON}, {"template", v.Template}, {"timestamp", v.Timestamp.Header + v.Timestamp.JSON},
			{"separator", v.Separator}, {"secret_encoding", v.SecretEncoding}, {"single", strings.Join(v.Single, "")}, {"challenge", v.Challenge},
			{"challenge_token", v.ChallengeToken}} {
			if strings.TrimSpace(f.v) != "" {
				set = append(set, f.name)
			}
		}
		if len(set) > 0 {
			errs.add(join(p, "scheme"), "%s set but no scheme is: nothing would be verified", strings.Join(set, ", "))
		}
	case !contains(verify.Schemes(), v.Scheme):
		errs.add(join(p, "scheme"), "unknown scheme %q (want %s)", v.Scheme, orList(verify.Schemes()))
	case verify.UsesPublicKey(v.Scheme):
		if strings.TrimSpace(v.PublicKey) == "" {
			errs.add(join(p, "public_key"), "required with scheme %s (the provider's public key)", v.Scheme)
		}
	case v.Scheme == SchemeStandardWebhooks:
		if !hasSecret && strings.TrimSpace(v.PublicKey) == "" {
			errs.add(join(p, "secrets"), "scheme %s needs secrets (whsec_…), public_key (whpk_…) or both", v.Scheme)
		}
	default:
		if !hasSecret {
			errs.add(join(p, "secrets"), "scheme %s needs at least one non-empty secret", v.Scheme)
		}
	}
}

// validateSchemeNeeds checks what some schemes need beyond their keys: the
// secrets' format, the signed URL, the header carrying the signature.
func validateSchemeNeeds(errs *Errors, p string, v Verify) {
	if v.Scheme == SchemeStandardWebhooks {
		for i, s := range v.Secrets {
			if s == "" {
				continue
			}
			// Never echo the secret itself.
			if _, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_")); err != nil {
				errs.add(index(join(p, "secrets"), i), "not a Standard Webhooks secret (want whsec_ followed by base64)")
			}
		}
	}
	if v.Scheme == SchemeSquare {
		if err := checkHTTPURL(v.URL); err != nil {
			errs.add(join(p, "url"), "scheme square signs the notification URL: %v", err)
		}
	}
	if verify.TakesTemplate(v.Scheme) || v.Scheme == SchemeToken {
		switch {
		case v.Header == "" && v.JSON == "":
			// Schemes with a signature have a default header (Load sets
			// it); a token has none.
			errs.add(join(p, "header"), "required with scheme %s (the header carrying the token), unless json names where it is in the body", v.Scheme)
		case v.Header != "" && !httpguts.ValidHeaderFieldName(v.Header):
			errs.add(join(p, "header"), "%q is not a valid header name", v.Header)
		}
	}
}

// validateVerifyValues checks the keys that take one of a few values, and
// the tolerance.
func validateVerifyValues(errs *Errors, p string, v Verify) {
	for _, f := range []struct {
		path, v string
		allowed []string
	}{
		{join(p, "secret_encoding"), v.SecretEncoding, []string{"raw", "hex", "base64"}},
		{join(join(p, "timestamp"), "unit"), v.Timestamp.Unit, []string{"s", "ms"}},
		{join(p, "challenge"), v.Challenge, []string{verify.ChallengeZoom, verify.ChallengeLark, verify.ChallengeMeta}},
	} {
		if f.v != "" {
			oneOf(errs, f.path, f.v, f.allowed...)
		}
	}
	oneOf(errs, join(p, "algorithm"), v.Algorithm, "sha1", "sha256", "sha512")
	oneOf(errs, join(p, "encoding"), v.Encoding, "hex", "base64")
	positive(errs, join(p, "tolerance"), v.Tolerance)
}

func validateRecord(errs *Errors, p string, r Record) {
	if len(r.Statuses) == 0 {
		errs.add(join(p, "statuses"), "at least one final status is required: otherwise nothing is ever recorded")
	}
	for i, s := range r.Statuses {
		if _, err := ParseStatus(s); err != nil {
			errs.add(index(join(p, "statuses"), i), "%v", err)
		}
	}
	for i, h := range r.Headers {
		switch {
		case !httpguts.ValidHeaderFieldName(h):
			errs.add(index(join(p, "headers"), i), "%q is not a valid header name", h)
		case strings.EqualFold(h, "Set-Cookie"):
			errs.add(index(join(p, "headers"), i), "%s must not be recorded: a replay would hand one client's cookies to whoever repeats the key", h)
		case idempotency.SetByReplay(h):
			errs.add(index(join(p, "headers"), i), "%s cannot be recorded: the replay sets it itself", h)
		}
	}
	nonNegativeSize(errs, join(p, "max_body"), r.MaxBody)
	oneOf(errs, join(p, "ambiguous"), r.Ambiguous, AmbiguousRelease, AmbiguousHold)
}

func validateDelivery(errs *Errors, p string, r Route) {
	oneOf(errs, join(p, "delivery"), r.Delivery, DeliverySync, DeliveryAsync)
	a, ap := r.Async, join(p, "async")
	if r.StoresRequests() {
		// A synchronous route storing requests redelivers them through the
		// queue with these settings.
		validateQueueing(errs, ap, a)
	}
	if r.Delivery != DeliveryAsync {
		return
	}
	if r.Mode == ModeShadow {
		errs.add(join(p, "delivery"), "async cannot be combined with mode shadow: shadow forwards every delivery as it comes, async stores and delivers once")
	}
	if pr, ok := LookupPreset(r.Preset); ok && pr.SyncOnly {
		errs.add(join(p, "delivery"), "async cannot be used with preset %s: the provider reads its answer from the upstream's", r.Preset)
	}
	if a.Ack.Status < 200 || a.Ack.Status > 299 {
		errs.add(join(ap, "ack.status"), "must be a 2xx status, got %d: any other answer makes the provider send the stored delivery again", a.Ack.Status)
	}
	if a.Ack.Body != "" && a.Ack.ContentType == "" {
		errs.add(join(ap, "ack.content_type"), "required when ack.body is set")
	}
	if a.Ack.ContentType != "" && strings.ContainsAny(a.Ack.ContentType, "\r\n") {
		errs.add(join(ap, "ack.content_type"), "must not contain line breaks")
	}
}

// CheckQueueing reports what validation refuses in a's delivery settings
// (max_attempts, max_age, backoff, concurrency, poll_interval), which it
// checks only on a route storing requests.
func CheckQueueing(a Async) error {
	var errs Errors
	validateQueueing(&errs, "async", a)
	return errs.err()
}

// validateQueueing checks the async settings by which the queue delivers a
// route's stored requests.
func validateQueueing(errs *Errors, ap string, a Async) {
	if a.MaxAttempts < 1 {
		errs.add(join(ap, "max_attempts"), "must be at least 1, got %d", a.MaxAttempts)
	}
	positive(errs, join(ap, "max_age"), a.MaxAge)
	positive(errs, join(ap, "backoff.initial"), a.Backoff.Initial)
	if a.Backoff.Max < a.Backoff.Initial {
		errs.add(join(ap, "backoff.max"), "%s is shorter than backoff.initial (%s)", a.Backoff.Max, a.Backoff.Initial)
	}
	notTooLong(errs, join(ap, "backoff.max"), a.Backoff.Max)
	switch {
	case a.Concurrency < 1:
		errs.add(join(ap, "concurrency"), "must be at least 1, got %d", a.Concurrency)
	case a.Concurrency > MaxConcurrency:
		errs.add(join(ap, "concurrency"), "must be at most %d, got %d: the job queue runs no more workers for one route on one replica", MaxConcurrency, a.Concurrency)
	}
	if a.PollInterval < MinPollInterval {
		errs.add(join(ap, "poll_interval"), "must be at least %s, got %s: each replica would query the ledger's database without pause", MinPollInterval, a.PollInterval)
	}
	notTooLong(errs, join(ap, "poll_interval"), a.PollInterval)
}

func checkHostPort(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not host:port", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: port %q is not a number from 0 to 65535", s, port)
	}
	return nil
}

func oneOf(errs *Errors, path, v string, allowed ...string) {
	if contains(allowed, v) {
		return
	}
	if v == "" {
		errs.add(path, "required (want %s)", orList(allowed))
		return
	}
	errs.add(path, "unknown value %q (want %s)", v, orList(allowed))
}

func positive(errs *Errors, path string, d time.Duration) {
	if d <= 0 {
		errs.add(path, "must be greater than 0, got %s", d)
	}
	notTooLong(errs, path, d)
}

func notTooLong(errs *Errors, path string, d time.Duration) {
	if d > MaxDuration {
		errs.add(path, "must be at most %s (ten years), got %s", FormatDuration(MaxDuration), FormatDuration(d))
	}
}

func positiveSize(errs *Errors, path string, s Size) {
	if s <= 0 {
		errs.add(path, "must be greater than 0, got %s", s)
	}
}

func nonNegativeSize(errs *Errors, path string, s Size) {
	if s < 0 {
		errs.add(path, "must not be negative, got %s", s)
	}
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// orList writes "a, b or c".
func orList(items []string) string {
	if len(items) <= 1 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}
