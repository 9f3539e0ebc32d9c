package gateway

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/verify/verifytest"
)

// exampleEnv gives every variable the examples reference without a
// default a value of the right shape (a secret, a provider's RSA public
// key, a URL). A new example using a new variable adds it here.
func exampleEnv(tb testing.TB) map[string]string {
	tb.Helper()
	key, err := verifytest.GenerateRSAKey()
	if err != nil {
		tb.Fatal(err)
	}
	pem, err := verifytest.PublicKeyPEM(&key.PublicKey)
	if err != nil {
		tb.Fatal(err)
	}
	bare, err := verifytest.PublicKeyBase64(&key.PublicKey)
	if err != nil {
		tb.Fatal(err)
	}
	return map[string]string{
		"STRIPE_WEBHOOK_SECRET":         "whsec_dummy",
		"GITHUB_WEBHOOK_SECRET":         "dummy-github",
		"SHOPIFY_API_SECRET":            "dummy",
		"SLACK_SIGNING_SECRET":          "dummy",
		"ALIPAY_PUBLIC_KEY":             bare,
		"WECHATPAY_PLATFORM_PUBLIC_KEY": pem,
		"SQUARE_SIGNATURE_KEY":          "dummy",
		"SQUARE_NOTIFICATION_URL":       "https://hooks.example.com/webhooks/square",
		"PADDLE_WEBHOOK_SECRET":         "pdl_ntfset_dummy",
		"RAZORPAY_WEBHOOK_SECRET":       "dummy",
		"TWITCH_EVENTSUB_SECRET":        "dummy",
		"ADYEN_HMAC_KEY":                "DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00",
		"MAILGUN_SIGNING_KEY":           "dummy",
		"TWILIO_AUTH_TOKEN":             "dummy",
		"TWILIO_WEBHOOK_URL":            "https://hooks.example.com/webhooks/twilio",
		"GITLAB_WEBHOOK_TOKEN":          "dummy",
		"BITBUCKET_WEBHOOK_SECRET":      "dummy",
		"TELEGRAM_SECRET_TOKEN":         "dummy",
		"LARK_VERIFICATION_TOKEN":       "dummy",
		"DINGTALK_APP_SECRET":           "dummy",
		"META_APP_SECRET":               "dummy",
		"META_VERIFY_TOKEN":             "dummy-verify",
		"ZOOM_WEBHOOK_SECRET":           "dummy",
		"HUBSPOT_CLIENT_SECRET":         "dummy",
		"HUBSPOT_WEBHOOK_URL":           "https://hooks.example.com/webhooks/hubspot",
		"WEBHOOK_SECRET":                "whsec_dummydummydummy0",
		"HOOKSTAMP_ADMIN_TOKEN":         "dummy-admin-token",
		"DATABASE_URL":                  "postgres://hookstamp:dummy-db-password@db.internal:5432/hookstamp?sslmode=require",
		"DISCORD_PUBLIC_KEY":            "7d1f0c3b9b2e4a5d6c8f0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f",
		"SENDGRID_VERIFICATION_KEY":     sendgridTestKey,
		"CLERK_WEBHOOK_SIGNING_SECRET":  "whsec_dummyclerk000000",
		"RESEND_WEBHOOK_SECRET":         "whsec_dummyresend00000",
	}
}

// sendgridTestKey is sendgrid-go's test verification key (base64 DER
// P-256), in the form SendGrid's settings show it.
const sendgridTestKey = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEEDr2LjtURuePQzplybdC+u4CwrqDqBaWjcMMsTbhdbcwHBcepxo7yAQGhHPTnlvFYPAZFceEu/1FwCM/QmGUhA=="

// requiredVar finds ${NAME} references without a default.
var requiredVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// Every file in examples/ loads and validates with its variables set, and
// builds ready-to-serve routes (verifiers, extractors); secrets come from
// the environment, never the file; together the examples cover every
// preset.
func TestExamplesAreValid(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "examples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < len(config.Presets()) {
		t.Fatalf("%d example files, want at least one per preset (%d)", len(files), len(config.Presets()))
	}
	values := exampleEnv(t)
	covered := map[string]bool{}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			text, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var environ []string
			for _, m := range requiredVar.FindAllStringSubmatch(string(text), -1) {
				v, ok := values[m[1]]
				if !ok {
					t.Fatalf("references ${%s}: give it a value in exampleEnv", m[1])
				}
				environ = append(environ, m[1]+"="+v)
			}
			for i, line := range strings.Split(string(text), "\n") {
				code, _, _ := strings.Cut(line, "#")
				if strings.Contains(code, "secrets:") || strings.Contains(code, "public_key:") || strings.Contains(code, "token:") {
					if !strings.Contains(code, "${") {
						t.Errorf("line %d: a secret written in the file, not taken from ${ENV}: %s", i+1, line)
					}
				}
			}
			cfg, err := config.Load(path, environ)
			if err != nil {
				t.Fatalf("gateway check would fail:\n%v", err)
			}
			if _, err := buildRoutes(cfg); err != nil {
				t.Fatalf("routes do not build: %v", err)
			}
			if w := cfg.Warnings(time.Now()); len(w) > 0 {
				t.Errorf("gateway check would warn:\n%s", strings.Join(w, "\n"))
			}
			for _, r := range cfg.Routes {
				if r.Preset != "" {
					covered[r.Preset] = true
				}
				// Where the gateway verifies nothing, a forgery reaches
				// the upstream: its refusal must not become the answer
				// recorded under the event's id.
				if r.Preset != "" && r.Verify.Scheme == "" && strings.Join(r.Record.Statuses, ",") != "2xx" {
					t.Errorf("route %s: unverified preset %s records %v, want only 2xx", r.Name, r.Preset, r.Record.Statuses)
				}
			}
			// The redacted configuration (what `gateway check` prints)
			// shows no secret.
			out, err := cfg.Redacted().YAML()
			if err != nil {
				t.Fatal(err)
			}
			// Every secret value above contains "dummy"; public keys and
			// URLs without a password do not.
			if strings.Contains(string(out), "dummy") {
				t.Errorf("gateway check would print a secret:\n%s", out)
			}
		})
	}
	var missing []string
	for _, p := range config.Presets() {
		if !covered[p.Name] {
			missing = append(missing, p.Name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("no example uses the presets %v", missing)
	}
}

// docs/presets.md lists every preset with what the table in
// internal/config says: key, fingerprint fields, scheme and retention.
func TestPresetDocMatchesPresets(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "presets.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(doc), "\n") {
		if name, ok := strings.CutPrefix(line, "| `"); ok {
			if end := strings.Index(name, "`"); end > 0 {
				rows[name[:end]] = line
			}
		}
	}
	for _, p := range config.Presets() {
		t.Run(p.Name, func(t *testing.T) {
			row, ok := rows[p.Name]
			if !ok {
				t.Fatalf("docs/presets.md has no row for preset %s", p.Name)
			}
			var want []string
			for _, s := range p.Key {
				if s.Kind == config.SourceTemplate {
					want = append(want, "template")
				} else {
					want = append(want, s.Kind+" `"+s.Arg+"`")
				}
			}
			for _, f := range p.Fingerprint.Fields {
				_, name, _ := strings.Cut(f, ":")
				want = append(want, "`"+name+"`")
			}
			if p.Scheme == "" {
				want = append(want, "none built in")
			} else {
				want = append(want, "`"+p.Scheme+"` (")
			}
			want = append(want, fmt.Sprintf("| %dh", int(p.Retention.Hours())))
			for _, w := range want {
				if !strings.Contains(row, w) {
					t.Errorf("row does not say %q:\n%s", w, row)
				}
			}
		})
	}
}
