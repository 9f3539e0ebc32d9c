package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/testenv"
)

// A route verified by a token the provider sends as is (GitLab's header,
// Lark's body field) stores it with the request, for a redelivery to
// carry; the event log shows it redacted, as whoever reads it could
// otherwise forge deliveries that pass verification.
func TestEventLogRedactsTheVerifyToken(t *testing.T) {
	up := newUpstream(t)
	routes := ""
	for preset, secret := range map[string]string{"gitlab": "GITLAB_WEBHOOK_TOKEN", "lark": "LARK_VERIFICATION_TOKEN"} {
		routes += "  - name: " + preset + "\n    path: /webhooks/" + preset + "\n    preset: " + preset +
			"\n    upstream: {url: \"" + up.URL + "/" + preset + "\"}\n    record: {request: true}\n" +
			"    verify: {secrets: [\"${" + secret + "}\"]}\n"
	}
	cfg := routesConfig(t, dbPath(t), "", "", routes, waveTwoEnv)
	cfg.Admin.Listen, cfg.Admin.Token = "127.0.0.1:0", asyncAdminToken
	g := startGatewayWith(t, cfg, asyncOptions(t))

	for _, c := range []struct {
		route, key string
		body       []byte
		hdr        http.Header
	}{
		{"gitlab", "gl-evt-1", gitlabBody, headers("X-Gitlab-Token", gitlabToken, "Idempotency-Key", "gl-evt-1", "Content-Type", "application/json")},
		{"lark", "lark-evt-1", larkEvent(larkToken, "lark-evt-1"), headers("Content-Type", "application/json")},
	} {
		t.Run(c.route, func(t *testing.T) {
			wantOutcome(t, post(t, g, "/webhooks/"+c.route, c.body, c.hdr), http.StatusOK, "forwarded")
			var detail struct {
				Request struct {
					Headers    map[string][]string `json:"headers"`
					BodyBase64 string              `json:"body_base64"`
				} `json:"request"`
			}
			raw := adminGet(t, g, "/admin/routes/"+c.route+"/records/"+c.key, asyncAdminToken)
			if err := json.Unmarshal([]byte(raw), &detail); err != nil {
				t.Fatal(err)
			}
			body, _ := base64.StdEncoding.DecodeString(detail.Request.BodyBase64)
			if strings.Contains(raw, gitlabToken) || strings.Contains(raw, larkToken) || bytes.Contains(body, []byte(larkToken)) {
				t.Fatalf("the record shows the route's token:\n%s", raw)
			}
			if c.route == "gitlab" && !slices.Equal(detail.Request.Headers["X-Gitlab-Token"], []string{"[redacted]"}) {
				t.Errorf("X-Gitlab-Token shown as %q, want [redacted]", detail.Request.Headers["X-Gitlab-Token"])
			}
			if c.route == "lark" && !bytes.Contains(body, []byte(`"token":"[redacted]"`)) {
				t.Errorf("the lark body shown: %s, want its token redacted", body)
			}

			if status, b := adminPost(t, g, "/admin/routes/"+c.route+"/records/"+c.key+"/redeliver", ""); status != http.StatusAccepted {
				t.Fatalf("redeliver = %d %s", status, b)
			}
			testenv.Eventually(t, 10*time.Second, "the redelivery", func() bool { return up.count(c.key) == 2 })
			up.mu.Lock()
			last, lastBody := up.last.Clone(), up.lastBody
			up.mu.Unlock()
			if c.route == "gitlab" && last.Get("X-Gitlab-Token") != gitlabToken {
				t.Errorf("the redelivery carried X-Gitlab-Token %q, want the original", last.Get("X-Gitlab-Token"))
			}
			if lastBody != string(c.body) {
				t.Errorf("the redelivery's body: %s, want the original %s", lastBody, c.body)
			}
		})
	}
}
