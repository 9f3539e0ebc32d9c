package gateway

import (
	"fmt"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/verify/verifytest"
)

// A signing secret handed in through ${ENV} from a secret file or a
// Kubernetes Secret often ends in a newline the provider never signed
// with. The gateway must verify with the secret, not with the newline:
// otherwise every genuine delivery is refused 401 while `gateway check`
// reports the configuration as valid (the admin token and public_key are
// already read this way).
func TestSecretWithTrailingNewlineVerifies(t *testing.T) {
	up := newUpstream(t)
	const secret = "whsec_trailing_newline_5f1c0e"
	routes := signedRoutes(up.URL)
	g := startGateway(t, routesConfig(t, dbPath(t), "", "", routes, []string{
		"STRIPE_SECRET=" + secret + "\n", "GITHUB_SECRET=" + githubSecret + "\r\n",
	}))

	b := []byte(`{"id":"evt_nl_1","object":"event","type":"invoice.paid"}`)
	wantOutcome(t, post(t, g, "/webhooks/stripe", b, verifytest.Stripe(secret, b, time.Now())), 200, "forwarded")
	gb := []byte(`{"zen":"Half measures are as bad as nothing at all.","hook_id":7}`)
	h := verifytest.GitHub(githubSecret, gb)
	h.Set("X-GitHub-Delivery", "gh-nl-1")
	wantOutcome(t, post(t, g, "/webhooks/github", gb, h), 200, "forwarded")
}

// signedRoutes configures a stripe and a github route to upstream, their
// secrets read from STRIPE_SECRET and GITHUB_SECRET.
func signedRoutes(upstream string) string {
	return fmt.Sprintf(`  - name: stripe
    path: /webhooks/stripe
    preset: stripe
    upstream:
      url: %[1]s/stripe
    verify:
      secrets: ["${STRIPE_SECRET}"]
  - name: github
    path: /webhooks/github
    preset: github
    upstream:
      url: %[1]s/github
    verify:
      secrets: ["${GITHUB_SECRET}"]
`, upstream)
}
