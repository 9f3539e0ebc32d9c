package charttest

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Every name the chart makes fits the 63 characters of a name, and of the
// label Kubernetes copies some into (a Job's job-name), for every release
// name Helm accepts (53 characters at most): "<fullname>-admin" and the
// like are cut before their suffix, not after. The alerts select the admin
// Service under the name it really has.
func TestLongReleaseNames(t *testing.T) {
	var all, sqlite map[string]any
	if err := yamlUnmarshal(`{serviceMonitor: {enabled: true}, prometheusRule: {enabled: true}, migration: {enabled: true}}`, &all); err != nil {
		t.Fatal(err)
	}
	if err := yamlUnmarshal(`{replicaCount: 1, podDisruptionBudget: {enabled: false}, persistence: {enabled: true},
config: {store: {driver: sqlite, dsn: data/hookstamp.db}, screen: {driver: memory}}}`, &sqlite); err != nil {
		t.Fatal(err)
	}
	override := mergeValues(all, map[string]any{"fullnameOverride": strings.Repeat("x", 56) + "-" + strings.Repeat("y", 6)})
	tests := []struct {
		name, release string
		vals          map[string]any
	}{
		{"46 characters", "payments-webhooks-gateway-production-eu-west-1", all},
		{"51 characters", "payments-webhooks-gateway-production-eu-west-1-blue", all},
		{"53 characters", "payments-webhooks-gateway-production-eu-west-1-blue-2", all},
		{"53 characters, SQLite", "payments-webhooks-gateway-production-eu-west-1-blue-2", sqlite},
		{"63-character fullnameOverride", releaseName, override},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRenderRelease(t, tt.release, tt.vals)
			checkLabels(t, r)
			for id, name := range r.Names {
				for _, msg := range validation.IsDNS1123Label(name) {
					t.Errorf("%s: name %q: %s", id, name, msg)
				}
			}
			for _, s := range r.Services {
				for _, msg := range validation.IsDNS1035Label(s.Name) {
					t.Errorf("Service %q: %s", s.Name, msg)
				}
			}
			if len(r.PrometheusRules) == 0 {
				return
			}
			var admin string
			for _, s := range r.Services {
				if selects(t, &r.ServiceMonitors[0].Spec.Selector, s.Labels) {
					admin = s.Name
				}
			}
			if admin == "" {
				t.Fatal("the ServiceMonitor scrapes no Service")
			}
			for _, g := range r.PrometheusRules[0].Spec.Groups {
				for _, rule := range g.Rules {
					if !strings.Contains(rule.Expr.StrVal, `service="`+admin+`"`) {
						t.Errorf("%s: %s does not select the admin Service %s", rule.Alert, rule.Expr.StrVal, admin)
					}
				}
			}
			if !strings.Contains(r.Notes, "svc/"+admin+" ") {
				t.Errorf("NOTES.txt does not port-forward to the admin Service %s:\n%s", admin, r.Notes)
			}
		})
	}
}
