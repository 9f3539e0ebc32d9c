// Package config is hookstamp's configuration: one Config struct whose every
// field documents its default, a loader (Load, LoadFromBytes) built on koanf
// that layers defaults, the YAML file, HOOKSTAMP_* environment overrides,
// ${NAME} interpolation and provider presets, and a validator that reports
// every problem with its key path (SPEC §3).
//
// The loader works on the raw key/value tree before decoding it, so it knows
// what the user actually wrote: a preset fills only what a route leaves unset,
// and an explicit empty string (key_header: "") is not confused with an absent
// key.
package config

import (
	"net/url"
	"strings"
	"time"

	"github.com/hookstamp/hookstamp/internal/verify"
)

// Config is the whole configuration of one gateway process.
type Config struct {
	Server    Server    `koanf:"server" yaml:"server"`
	Admin     Admin     `koanf:"admin" yaml:"admin"`
	Store     Store     `koanf:"store" yaml:"store"`
	Screen    Screen    `koanf:"screen" yaml:"screen"`
	Telemetry Telemetry `koanf:"telemetry" yaml:"telemetry"`
	// Routes are the deduplicated endpoints; at least one is required.
	Routes []Route `koanf:"routes" yaml:"routes"`

	envWarnings []string // HOOKSTAMP_ variables that look meant to set a key
}

// Server is the public listener that providers deliver to.
type Server struct {
	// Listen is the host:port to listen on. Default ":8080".
	Listen string `koanf:"listen" yaml:"listen"`
	// BodyLimit is the largest request body accepted; larger ones get 413
	// (outcome too_large). Default 1MiB.
	BodyLimit Size `koanf:"body_limit" yaml:"body_limit"`
	// ReadTimeout bounds reading one request. Default 10s.
	ReadTimeout time.Duration `koanf:"read_timeout" yaml:"read_timeout"`
	// WriteTimeout bounds writing one response. Default 60s.
	WriteTimeout time.Duration `koanf:"write_timeout" yaml:"write_timeout"`
	// MaxConns bounds the connections the listener serves at once; one
	// more is refused: answered 503 and closed (over TLS, closed). Each
	// idle keep-alive connection holds about 25 KiB. Default 4096.
	MaxConns int `koanf:"max_conns" yaml:"max_conns"`
	// ShutdownTimeout is how long in-flight deliveries may drain after
	// SIGTERM. Default 15s.
	ShutdownTimeout time.Duration `koanf:"shutdown_timeout" yaml:"shutdown_timeout"`
	// TrustedProxies are CIDRs (or single IPs) whose X-Forwarded-For is
	// believed. Default none.
	TrustedProxies []string `koanf:"trusted_proxies" yaml:"trusted_proxies"`
	// TLS makes Listen serve HTTPS. Default off.
	TLS TLS `koanf:"tls" yaml:"tls"`
	// RedirectListen is the host:port of a plain-HTTP listener that answers
	// ACME HTTP-01 challenges and redirects everything else to https;
	// "" = none. Default "".
	RedirectListen string `koanf:"redirect_listen" yaml:"redirect_listen"`
}

// TLS is the certificate of the delivery listener: from files or from an
// ACME CA, never both. Neither set = plain HTTP.
type TLS struct {
	// CertFile and KeyFile are PEM files (the certificate chain, leaf
	// first, and its private key), reloaded when they change. Default "".
	CertFile string `koanf:"cert_file" yaml:"cert_file"`
	KeyFile  string `koanf:"key_file" yaml:"key_file"`
	// ACME obtains and renews certificates automatically.
	ACME ACME `koanf:"acme" yaml:"acme"`
	// MinVersion is the oldest TLS version accepted: "1.2" or "1.3".
	// Default "1.2".
	MinVersion string `koanf:"min_version" yaml:"min_version"`
}

// Enabled reports whether the delivery listener serves HTTPS.
func (t TLS) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" || t.ACME.Enabled() }

// ACME is automatic certificates from an ACME CA, with HTTP-01 (on
// server.redirect_listen) and TLS-ALPN-01 (on server.listen) challenges
// answered by the gateway. Account and certificates are kept in the
// ledger's database when it is PostgreSQL (replicas share them), else in
// a directory beside the SQLite file.
type ACME struct {
	// Domains are the names of the certificate; required for ACME.
	// Default [].
	Domains []string `koanf:"domains" yaml:"domains"`
	// Email is the account's contact address. Default "".
	Email string `koanf:"email" yaml:"email"`
	// CA is the ACME directory URL. Default "" = Let's Encrypt.
	CA string `koanf:"ca" yaml:"ca"`
}

// Enabled reports whether any ACME key is set.
func (a ACME) Enabled() bool { return len(a.Domains) > 0 || a.Email != "" || a.CA != "" }

// Admin is the operator listener: health, metrics and the admin API.
type Admin struct {
	// Listen is the host:port of the admin listener; "" turns it off.
	// Default "127.0.0.1:9090".
	Listen string `koanf:"listen" yaml:"listen"`
	// Token is the bearer token for /admin/*; empty turns /admin/* off.
	// Default "".
	Token string `koanf:"token" yaml:"token"`
	// Console serves the operator console at /ui/ when Token is set.
	// Default true.
	Console bool `koanf:"console" yaml:"console"`
	// TraceURL links an event's trace id in the console: an http(s) URL
	// in which "{trace_id}" is replaced by it. Default "" (no link).
	TraceURL string `koanf:"trace_url" yaml:"trace_url"`
	// SecureCookies marks the console's cookies Secure: for a console
	// reached over HTTPS through a proxy, the admin listener itself
	// serving plain HTTP. Default false.
	SecureCookies bool `koanf:"secure_cookies" yaml:"secure_cookies"`
	// ConsoleHosts are the host names, besides IP addresses, localhost and
	// the host of Listen, under which the console answers: a name a proxy
	// in front passes on as Host. A page of another name, rebound to the
	// listener's address by its DNS, is refused. Default none.
	ConsoleHosts []string `koanf:"console_hosts" yaml:"console_hosts"`
}

// Store is the durable ledger (GORM).
type Store struct {
	// Driver is StoreSQLite or StorePostgres. Default "sqlite".
	Driver string `koanf:"driver" yaml:"driver"`
	// DSN is the SQLite file or the PostgreSQL URL/keyword string.
	// Default "data/hookstamp.db".
	DSN string `koanf:"dsn" yaml:"dsn"`
	// MaxOpenConns caps the connection pool. Default 16.
	MaxOpenConns int `koanf:"max_open_conns" yaml:"max_open_conns"`
	// AutoMigrate creates or upgrades the schema at start-up. Default true.
	AutoMigrate bool `koanf:"auto_migrate" yaml:"auto_migrate"`
	// SweepInterval is how often expired rows are deleted. Default 1m.
	SweepInterval time.Duration `koanf:"sweep_interval" yaml:"sweep_interval"`
	// OnUnavailable is StoreUnavailableReject (503, fail closed) or
	// StoreUnavailablePass (forward without dedup). Default "reject".
	OnUnavailable string `koanf:"on_unavailable" yaml:"on_unavailable"`
}

// Screen is the fast, forgetful claim layer in front of the ledger.
type Screen struct {
	// Driver is ScreenMemory (one process only), ScreenRedis or ScreenNone
	// (claims are made in the ledger). Default "memory".
	Driver string `koanf:"driver" yaml:"driver"`
	// Redis is used when Driver is "redis".
	Redis Redis `koanf:"redis" yaml:"redis"`
	// Prefix starts every screen key. Default "hookstamp:".
	Prefix string `koanf:"prefix" yaml:"prefix"`
	// Lease is the lifetime of an in-flight claim (screen or ledger); it must
	// be longer than every route's upstream.timeout. Default 30s.
	Lease time.Duration `koanf:"lease" yaml:"lease"`
	// TTL is the lifetime of a done entry in the screen. Default 24h.
	TTL time.Duration `koanf:"ttl" yaml:"ttl"`
	// MaxCachedBody is the largest response body kept in the screen; larger
	// responses are replayed from the ledger. Default 64KiB.
	MaxCachedBody Size `koanf:"max_cached_body" yaml:"max_cached_body"`
	// LocalCache is the in-process cache of done records; 0 turns it off.
	// It is what the cache adds to the process's memory: its heap and the
	// collector's headroom for it (half of it in heap with GOGC=100).
	// Default 32MiB.
	LocalCache Size `koanf:"local_cache" yaml:"local_cache"`
	// OnUnavailable is ScreenUnavailableStore (claim in the ledger),
	// ScreenUnavailableReject (503) or ScreenUnavailablePass (forward without
	// dedup). Default "store".
	OnUnavailable string `koanf:"on_unavailable" yaml:"on_unavailable"`
}

// Redis is the connection to the Redis screen.
type Redis struct {
	// Addrs are host:port addresses; several mean Redis Cluster.
	// Default ["127.0.0.1:6379"].
	Addrs []string `koanf:"addrs" yaml:"addrs"`
	// Username for Redis ACLs. Default "".
	Username string `koanf:"username" yaml:"username"`
	// Password for Redis AUTH. Default "".
	Password string `koanf:"password" yaml:"password"`
	// DB is the database number; must be 0 with Cluster. Default 0.
	DB int `koanf:"db" yaml:"db"`
	// TLS turns on TLS to Redis. Default false.
	TLS bool `koanf:"tls" yaml:"tls"`
}

// Telemetry configures traces, metrics and logs.
type Telemetry struct {
	// ServiceName is the OpenTelemetry service.name. Default "hookstamp".
	ServiceName string  `koanf:"service_name" yaml:"service_name"`
	Traces      Traces  `koanf:"traces" yaml:"traces"`
	Metrics     Metrics `koanf:"metrics" yaml:"metrics"`
	Log         Log     `koanf:"log" yaml:"log"`
}

// Traces configures the trace exporter.
type Traces struct {
	// Exporter is ExporterNone, ExporterStdout or ExporterOTLP (configured by
	// the standard OTEL_EXPORTER_OTLP_* variables). Default "none".
	Exporter string `koanf:"exporter" yaml:"exporter"`
	// SampleRatio is the fraction of traces sampled, in [0, 1]. Default 1.0.
	SampleRatio float64 `koanf:"sample_ratio" yaml:"sample_ratio"`
}

// Metrics configures metric export.
type Metrics struct {
	// Prometheus serves /metrics on the admin listener. Default true.
	Prometheus bool `koanf:"prometheus" yaml:"prometheus"`
}

// Log configures the structured logger.
type Log struct {
	// Level is debug, info, warn or error. Default "info".
	Level string `koanf:"level" yaml:"level"`
	// Format is json or text. Default "json".
	Format string `koanf:"format" yaml:"format"`
}

// Route is one deduplicated endpoint.
type Route struct {
	// Name namespaces the keys of this route: [a-z0-9_-]{1,64}, unique.
	// Required.
	Name string `koanf:"name" yaml:"name"`
	// Path is matched exactly, or as a prefix when it ends in "/*". It starts
	// with "/". Required.
	Path string `koanf:"path" yaml:"path"`
	// Methods are the deduplicated methods; other methods pass through.
	// Default ["POST"].
	Methods []string `koanf:"methods" yaml:"methods"`
	// Mode is ModeEnforce or ModeShadow (forward everything, count would-be
	// duplicates). Default "enforce".
	Mode string `koanf:"mode" yaml:"mode"`
	// Preset names a provider preset (see Presets) that fills key,
	// fingerprint, verify.scheme and retention where the route leaves them
	// unset. Default "" (none).
	Preset   string   `koanf:"preset" yaml:"preset,omitempty"`
	Upstream Upstream `koanf:"upstream" yaml:"upstream"`
	Key      Key      `koanf:"key" yaml:"key"`
	// Fingerprint says what a delivery means, to tell retries from key reuse.
	Fingerprint Fingerprint `koanf:"fingerprint" yaml:"fingerprint"`
	// Verify checks the provider's signature before anything is claimed.
	Verify Verify `koanf:"verify" yaml:"verify"`
	// Inflight is InflightWait (hold a repeat until the first finishes) or
	// InflightReject (409 at once). Default "wait".
	Inflight string `koanf:"inflight" yaml:"inflight"`
	// WaitTimeout bounds how long a repeat waits for the first delivery.
	// Default 10s.
	WaitTimeout time.Duration `koanf:"wait_timeout" yaml:"wait_timeout"`
	Record      Record        `koanf:"record" yaml:"record"`
	// Delivery is DeliverySync (the provider waits for the upstream's
	// answer) or DeliveryAsync (stored, acknowledged at once, delivered from
	// the queue; SPEC §10). Default "sync".
	Delivery string `koanf:"delivery" yaml:"delivery"`
	// Async configures DeliveryAsync; ignored on sync routes.
	Async Async `koanf:"async" yaml:"async"`
	// Retention is the ledger row lifetime. Default 720h, or the preset's.
	Retention time.Duration `koanf:"retention" yaml:"retention"`
	// Source names the sender for "top duplicate sources": "ip" or
	// "header:NAME". Default "ip".
	Source string `koanf:"source" yaml:"source"`
}

// Upstream is where a route forwards to.
type Upstream struct {
	// URL is the absolute http(s) URL forwarded to; a "/*" route appends the
	// rest of the path. Required.
	URL string `koanf:"url" yaml:"url"`
	// Timeout bounds one forward. Default 10s.
	Timeout time.Duration `koanf:"timeout" yaml:"timeout"`
	// KeyHeader is the request header that carries the key upstream; ""
	// sends none. Default "Idempotency-Key".
	KeyHeader string `koanf:"key_header" yaml:"key_header"`
}

// Key says where a delivery's idempotency key comes from.
type Key struct {
	// Sources are tried in order; the first non-empty value wins. Default
	// none (a preset fills them); required when Required is true.
	Sources []KeySource `koanf:"sources" yaml:"sources"`
	// Required: a delivery without a key gets 400 (missing_key); false lets
	// it pass through. Default true.
	Required bool `koanf:"required" yaml:"required"`
	// MaxLength is the longest key accepted, in bytes. Default 255.
	MaxLength int `koanf:"max_length" yaml:"max_length"`
}

// KeySource is one place a key may come from. In YAML it is a one-entry
// mapping such as `header: X-Event-Id` or `json: data.object.id`.
type KeySource struct {
	// Kind is SourceHeader, SourceJSON, SourceForm, SourceQuery,
	// SourceTemplate, SourceBodyHash or SourceFieldsHash.
	Kind string `koanf:"kind"`
	// Arg is the header name, GJSON path, form field, query parameter,
	// template (see ParseTemplate), digest algorithm ("sha256") or the
	// comma-separated fields of a fields_hash ("json:#.eventId,header:X-Id").
	Arg string `koanf:"arg"`
}

// MarshalYAML writes the source back in its one-entry mapping form.
func (s KeySource) MarshalYAML() (any, error) {
	return map[string]string{s.Kind: s.Arg}, nil
}

// Fingerprint says which part of a delivery identifies its meaning.
type Fingerprint struct {
	// Mode is FingerprintBody, FingerprintFields or FingerprintNone.
	// Default "body".
	Mode string `koanf:"mode" yaml:"mode"`
	// Fields are "json:PATH", "form:NAME", "header:NAME" or "query:NAME"
	// entries; required with mode fields, not allowed otherwise. Default none.
	Fields []string `koanf:"fields" yaml:"fields"`
	// OnMismatch is OnMismatchReject (422) or OnMismatchReplay. Default
	// "reject".
	OnMismatch string `koanf:"on_mismatch" yaml:"on_mismatch"`
}

// Verify configures signature verification. An empty Scheme verifies nothing.
type Verify struct {
	// Scheme is one of the Scheme* constants, or "" for none. Default "".
	Scheme string `koanf:"scheme" yaml:"scheme"`
	// Secrets are the HMAC secrets; several allow rotation. Default none.
	Secrets []string `koanf:"secrets" yaml:"secrets"`
	// PublicKey is the provider's public key: RSA for alipay and wechatpay,
	// Ed25519 for ed25519, discord and the v1a signatures of
	// standard-webhooks, ECDSA P-256 for ecdsa and sendgrid. PEM or the
	// provider's own format (see verify.Options.PublicKey). Default "".
	PublicKey string `koanf:"public_key" yaml:"public_key"`
	// URL is the signed notification URL (square). Default "".
	URL string `koanf:"url" yaml:"url"`
	// Tolerance is the accepted clock skew for schemes with a signed
	// timestamp. Default 5m; 10m with scheme twitch (Twitch's own limit).
	Tolerance time.Duration `koanf:"tolerance" yaml:"tolerance"`
	// Header carries the signature (schemes hmac, ed25519, ecdsa). Default "".
	Header string `koanf:"header" yaml:"header"`
	// Algorithm is sha1, sha256 or sha512 (scheme hmac only). Default
	// "sha256".
	Algorithm string `koanf:"algorithm" yaml:"algorithm"`
	// Encoding is hex or base64 (schemes hmac, ed25519, ecdsa). Default "hex".
	Encoding string `koanf:"encoding" yaml:"encoding"`
	// Prefix precedes the signature in the header, e.g. "sha256=" (schemes
	// hmac, ed25519, ecdsa). Default "".
	Prefix string `koanf:"prefix" yaml:"prefix"`
	// JSON is the GJSON path of the signature (hmac, ed25519, ecdsa) or
	// token (token) inside the JSON body, instead of header. Default "".
	JSON string `koanf:"json" yaml:"json"`
	// Template is the signed content (schemes hmac, ed25519, ecdsa), e.g.
	// "v0:{header:X-Zm-Request-Timestamp}:{body}". Default "{body}".
	Template string `koanf:"template" yaml:"template"`
	// Timestamp is where the signed timestamp is (schemes hmac, ed25519,
	// ecdsa); checked against tolerance. Default none.
	Timestamp VerifyTimestamp `koanf:"timestamp" yaml:"timestamp"`
	// Separator splits the header into several candidate signatures
	// (scheme hmac only). Default "": one signature.
	Separator string `koanf:"separator" yaml:"separator"`
	// SecretEncoding is raw, hex or base64: how the secrets are written
	// (scheme hmac only). Default "" (raw).
	SecretEncoding string `koanf:"secret_encoding" yaml:"secret_encoding"`
	// Single lists JSON arrays that must hold exactly one element, the one
	// signed (scheme hmac only). Default none.
	Single []string `koanf:"single" yaml:"single"`
	// Challenge is a handshake hookstamp answers itself: zoom (scheme
	// hmac), lark (scheme token with json) or meta (any scheme with
	// secrets). Default "".
	Challenge string `koanf:"challenge" yaml:"challenge"`
	// ChallengeToken is the verify token of Meta's subscription check;
	// required with challenge meta. A secret. Default "".
	ChallengeToken string `koanf:"challenge_token" yaml:"challenge_token"`
}

// VerifyTimestamp says where a scheme hmac, ed25519 or ecdsa request
// carries its signed timestamp: a header or a member of the JSON body, never both.
type VerifyTimestamp struct {
	// Header names the header holding the timestamp. Default "".
	Header string `koanf:"header" yaml:"header"`
	// JSON is the GJSON path of the timestamp in the body. Default "".
	JSON string `koanf:"json" yaml:"json"`
	// Unit is s (Unix seconds) or ms (milliseconds). Default "" (s).
	Unit string `koanf:"unit" yaml:"unit"`
}

// Record says which upstream answers are final and what is kept of them.
type Record struct {
	// Statuses are the final statuses: classes "1xx".."4xx" or single codes
	// such as "200". 408, 425, 429 and 5xx are never final (a class matches
	// none of them; naming one is an error). Default ["2xx", "4xx"].
	Statuses []string `koanf:"statuses" yaml:"statuses"`
	// Headers are the response headers kept for replay; Set-Cookie is not
	// allowed. Default ["Content-Type"].
	Headers []string `koanf:"headers" yaml:"headers"`
	// MaxBody is the largest response body recorded; larger ones are
	// recorded without body. 0 records no body at all, not "no limit"
	// (SPEC §3 reads "larger bodies"). Default 1MiB.
	MaxBody Size `koanf:"max_body" yaml:"max_body"`
	// Ambiguous is AmbiguousRelease or AmbiguousHold: what happens when the
	// upstream gave no answer after the request was sent. Default "release".
	Ambiguous string `koanf:"ambiguous" yaml:"ambiguous"`
	// Request stores each delivery's request with its record, and records
	// every forward as an attempt (SPEC §11). Async routes always store it
	// (see Route.StoresRequests). Default false.
	Request bool `koanf:"request" yaml:"request"`
}

// Async is a store-and-forward route's acknowledgement and delivery policy
// (SPEC §10); a synchronous route storing requests redelivers them under
// all of it but Ack.
type Async struct {
	// Ack is what the provider gets once the delivery is stored. Default
	// 202 with no body, or the preset's.
	Ack Ack `koanf:"ack" yaml:"ack"`
	// MaxAttempts: after this many attempts the delivery is dead. Default 25.
	MaxAttempts int `koanf:"max_attempts" yaml:"max_attempts"`
	// MaxAge: no wait before an attempt runs past this age, and a delivery
	// this old after a failed attempt is dead. Default 72h.
	MaxAge time.Duration `koanf:"max_age" yaml:"max_age"`
	// Backoff spaces the attempts: exponential from Initial, capped at Max,
	// full jitter; an upstream's Retry-After is honoured up to Max. Neither
	// waits past MaxAge. Default 1s, 1h.
	Backoff Backoff `koanf:"backoff" yaml:"backoff"`
	// Concurrency bounds this route's attempts in flight on one replica.
	// Default 8.
	Concurrency int `koanf:"concurrency" yaml:"concurrency"`
	// PollInterval is how often each replica looks for this route's
	// deliveries that became due while none were running: the longest an
	// idle route's delivery waits after its acknowledgement. Default 250ms.
	PollInterval time.Duration `koanf:"poll_interval" yaml:"poll_interval"`
}

// MinPollInterval is the shortest Async.PollInterval.
const MinPollInterval = 10 * time.Millisecond

// MaxDuration is the longest any duration setting may be: ten years, past
// any use, and far enough below time.Duration's 292 that the sums and
// doubles the gateway makes of them (a lease's two, a backoff's jitter
// bound) cannot overflow.
const MaxDuration = 10 * 365 * 24 * time.Hour

// MaxConcurrency is the largest Async.Concurrency: River's
// QueueNumWorkersMax, which refuses to start a queue with more.
const MaxConcurrency = 10_000

// Ack is the fixed answer a store-and-forward route gives the provider.
type Ack struct {
	// Status is a 2xx status: anything else would make the provider retry a
	// delivery that is already stored.
	Status int `koanf:"status" yaml:"status"`
	// ContentType is sent when Body is not empty.
	ContentType string `koanf:"content_type" yaml:"content_type"`
	Body        string `koanf:"body" yaml:"body"`
}

// Backoff is the retry schedule of an async route.
type Backoff struct {
	Initial time.Duration `koanf:"initial" yaml:"initial"`
	Max     time.Duration `koanf:"max" yaml:"max"`
}

// StoresRequests reports whether the route keeps each delivery's request
// and attempts (SPEC §11): always on async routes, which deliver from it.
func (r Route) StoresRequests() bool {
	return r.Record.Request || r.Delivery == DeliveryAsync
}

// IsFinal reports whether status is final for this record policy. It never
// reports 408, 425, 429 or 5xx as final. It assumes validated statuses.
func (r Record) IsFinal(status int) bool {
	if neverFinal(status) {
		return false
	}
	for _, s := range r.Statuses {
		if matchStatus(s, status) {
			return true
		}
	}
	return false
}

// IsPrefix reports whether the route matches a path prefix ("/hooks/*").
func (r Route) IsPrefix() bool { return strings.HasSuffix(r.Path, "/*") }

// PathPrefix is the path without its trailing "*" for a prefix route
// ("/hooks/*" → "/hooks/"), and the path itself for an exact route.
func (r Route) PathPrefix() string {
	if r.IsPrefix() {
		return strings.TrimSuffix(r.Path, "*")
	}
	return r.Path
}

// MatchPath is PathPrefix with its percent-escapes decoded: requests are
// matched on their decoded path, so a path written as it appears in a URL
// ("/hooks/caf%C3%A9", "/a%20b") must be matched as "/hooks/café" and
// "/a b" — as written, no request could ever reach it. A path whose
// escapes do not decode (refused by validation) is returned as written.
func (r Route) MatchPath() string {
	p := r.PathPrefix()
	if d, err := url.PathUnescape(p); err == nil {
		return d
	}
	return p
}

// HasMethod reports whether method is deduplicated on this route.
func (r Route) HasMethod(method string) bool {
	for _, m := range r.Methods {
		if m == method {
			return true
		}
	}
	return false
}

// SourceHeader is the header named by Source "header:NAME", or "" when the
// source is the client IP.
func (r Route) SourceHeader() string {
	name, ok := strings.CutPrefix(r.Source, "header:")
	if !ok {
		return ""
	}
	return name
}

// Enumerated values. They are plain strings so the struct reads like the YAML.
const (
	ModeEnforce = "enforce"
	ModeShadow  = "shadow"

	SourceHeader   = "header"
	SourceJSON     = "json"
	SourceForm     = "form"
	SourceQuery    = "query"
	SourceTemplate = "template"
	SourceBodyHash = "body_hash"
	// SourceFieldsHash keys on the SHA-256 of fields written as in
	// fingerprint.fields, separated by commas.
	SourceFieldsHash = "fields_hash"

	FingerprintBody   = "body"
	FingerprintFields = "fields"
	FingerprintNone   = "none"

	OnMismatchReject = "reject"
	OnMismatchReplay = "replay"

	InflightWait   = "wait"
	InflightReject = "reject"

	DeliverySync  = "sync"
	DeliveryAsync = "async"

	AmbiguousRelease = "release"
	AmbiguousHold    = "hold"

	StoreSQLite   = "sqlite"
	StorePostgres = "postgres"

	StoreUnavailableReject = "reject"
	StoreUnavailablePass   = "pass"

	ScreenMemory = "memory"
	ScreenRedis  = "redis"
	ScreenNone   = "none"

	ScreenUnavailableStore  = "store"
	ScreenUnavailableReject = "reject"
	ScreenUnavailablePass   = "pass"

	ExporterNone   = "none"
	ExporterStdout = "stdout"
	ExporterOTLP   = "otlp"

	// OTLP trace protocols: OTLPProtocols lists them.
	OTLPHTTPProtobuf = "http/protobuf"
	OTLPGRPC         = "grpc"

	// Scheme names are verify's: one list for what config accepts and what
	// the verifier implements.
	SchemeStandardWebhooks = verify.SchemeStandardWebhooks
	SchemeStripe           = verify.SchemeStripe
	SchemeGitHub           = verify.SchemeGitHub
	SchemeShopify          = verify.SchemeShopify
	SchemeSlack            = verify.SchemeSlack
	SchemeSquare           = verify.SchemeSquare
	SchemePaddle           = verify.SchemePaddle
	SchemeRazorpay         = verify.SchemeRazorpay
	SchemeTwitch           = verify.SchemeTwitch
	SchemeAlipay           = verify.SchemeAlipay
	SchemeWeChatPay        = verify.SchemeWeChatPay
	SchemeHMAC             = verify.SchemeHMAC
	SchemeToken            = verify.SchemeToken
	SchemeEd25519          = verify.SchemeEd25519
	SchemeECDSA            = verify.SchemeECDSA
	SchemeDiscord          = verify.SchemeDiscord
	SchemeSendGrid         = verify.SchemeSendGrid

	ChallengeZoom = verify.ChallengeZoom
	ChallengeLark = verify.ChallengeLark
	ChallengeMeta = verify.ChallengeMeta
)

// RedactedValue replaces every non-empty secret in Redacted and YAML.
const RedactedValue = "[redacted]"
