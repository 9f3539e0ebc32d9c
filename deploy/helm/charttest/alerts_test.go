package charttest

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
)

// The labels Prometheus Operator's scrape of a ServiceMonitor's target adds
// to every series.
var scrapeLabels = []string{"namespace", "service", "pod", "job", "instance", "container", "endpoint"}

var (
	matcherRE = regexp.MustCompile(`([a-z_]+)\s*(=~|!~|!=|=)\s*"`)
	byRE      = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
)

// alertRules renders the chart with vals and returns its alerting rules by
// name.
func alertRules(t *testing.T, vals map[string]any) (*rendered, map[string]monitoringv1.Rule) {
	t.Helper()
	r := mustRender(t, vals)
	if len(r.PrometheusRules) != 1 {
		t.Fatalf("%d PrometheusRules, want 1", len(r.PrometheusRules))
	}
	rules := map[string]monitoringv1.Rule{}
	for _, g := range r.PrometheusRules[0].Spec.Groups {
		for _, rule := range g.Rules {
			if _, dup := rules[rule.Alert]; dup || rule.Alert == "" {
				t.Errorf("alert %q: empty or twice", rule.Alert)
			}
			rules[rule.Alert] = rule
		}
	}
	return r, rules
}

// The alerts are on metrics the gateway emits (SPEC names them, with their
// labels), select this release's series as the chart's ServiceMonitor
// scrapes them, and each metric is on the dashboard an operator opens when
// one fires.
func TestAlertRules(t *testing.T) {
	r, rules := alertRules(t, map[string]any{
		"prometheusRule": map[string]any{"enabled": true},
		"serviceMonitor": map[string]any{"enabled": true},
	})
	checkInvariants(t, r, nil)
	want := map[string]string{ // alert → the metric it watches
		"HookstampTLSCertificateExpiresSoon": "hookstamp_tls_certificate_expiry_seconds",
		"HookstampDeadDeliveries":            "hookstamp_queue_depth",
		"HookstampHeldKeys":                  "hookstamp_held_keys",
		"HookstampQueueBacklog":              "hookstamp_queue_oldest_seconds",
		"HookstampLedgerDown":                "hookstamp_dependency_up",
		"HookstampScreenDown":                "hookstamp_dependency_up",
		"HookstampLedgerErrors":              "hookstamp_dependency_errors_total",
		"HookstampScreenErrors":              "hookstamp_dependency_errors_total",
		"HookstampDeliveriesRefused":         "hookstamp_requests_total",
	}
	var scraped []string // the Services the ServiceMonitor scrapes
	for _, s := range r.Services {
		if selects(t, &r.ServiceMonitors[0].Spec.Selector, s.Labels) {
			scraped = append(scraped, s.Name)
		}
	}
	if len(scraped) != 1 {
		t.Fatalf("the ServiceMonitor scrapes Services %v", scraped)
	}
	release := fmt.Sprintf(`namespace=%q,service=%q`, namespace, scraped[0])
	spec := specMetrics(t)
	dashboard := strings.Join(dashboardExprs(t), "\n")
	for name, metric := range want {
		rule, ok := rules[name]
		if !ok {
			t.Errorf("no alert %s", name)
			continue
		}
		expr := rule.Expr.StrVal
		if !slices.Contains(exprMetrics(expr), metric) {
			t.Errorf("%s: %s does not read %s", name, expr, metric)
		}
		if !strings.Contains(expr, "{"+release) {
			t.Errorf("%s: %s does not select the release's series {%s…}", name, expr, release)
		}
		checkExprLabels(t, name, expr, spec)
		if !strings.Contains(dashboard, metric) {
			t.Errorf("%s fires on %s, which no panel of the dashboard shows", name, metric)
		}
		if s := rule.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("%s: severity %q", name, s)
		}
		if sum := rule.Annotations["summary"]; !strings.Contains(sum, "{{ $") || rule.Annotations["description"] == "" {
			t.Errorf("%s: summary %q (Prometheus's templates eaten by Helm?), description %q", name, sum, rule.Annotations["description"])
		}
	}
	for name := range rules {
		if _, ok := want[name]; !ok {
			t.Errorf("alert %s: the test does not know what it watches", name)
		}
	}
	if expr := rules["HookstampTLSCertificateExpiresSoon"].Expr.StrVal; !strings.HasSuffix(expr, "< 1209600") {
		t.Errorf("TLS expiry alert %s: want under 14 days (1209600 s)", expr)
	}
}

// checkExprLabels: every label expr matches or groups by is one SPEC gives
// a metric of expr, or one the scrape adds.
func checkExprLabels(t *testing.T, alert, expr string, spec map[string][]string) {
	t.Helper()
	known := slices.Clone(scrapeLabels)
	for _, m := range exprMetrics(expr) {
		labels, ok := spec[m]
		if !ok {
			t.Errorf("%s reads %s, which SPEC does not name: %s", alert, m, expr)
		}
		known = append(known, labels...)
	}
	var used []string
	for _, m := range matcherRE.FindAllStringSubmatch(expr, -1) {
		used = append(used, m[1])
	}
	for _, m := range byRE.FindAllStringSubmatch(expr, -1) {
		for l := range strings.SplitSeq(m[1], ",") {
			used = append(used, strings.TrimSpace(l))
		}
	}
	for _, l := range used {
		if !slices.Contains(known, l) {
			t.Errorf("%s uses label %q, which none of its metrics has: %s", alert, l, expr)
		}
	}
}

// Scraped otherwise than by the chart's ServiceMonitor, the series are
// picked by the operator's selector; thresholds and labels follow values.
func TestAlertRulesFollowValues(t *testing.T) {
	var vals map[string]any
	if err := yamlUnmarshal(`prometheusRule: {enabled: true, selector: 'job="hookstamp"', tlsExpiryDays: 7, queueOldestSeconds: 60,
  labels: {release: prometheus}, alertLabels: {team: payments}}`, &vals); err != nil {
		t.Fatal(err)
	}
	r, rules := alertRules(t, vals)
	if r.PrometheusRules[0].Labels["release"] != "prometheus" {
		t.Errorf("PrometheusRule labels %v", r.PrometheusRules[0].Labels)
	}
	for name, rule := range rules {
		if !strings.Contains(rule.Expr.StrVal, `{job="hookstamp"`) || rule.Labels["team"] != "payments" {
			t.Errorf("%s: %s, labels %v: want the selector job=\"hookstamp\" and team=payments", name, rule.Expr.StrVal, rule.Labels)
		}
	}
	for name, want := range map[string]string{"HookstampTLSCertificateExpiresSoon": "< 604800", "HookstampQueueBacklog": "> 60"} {
		if expr := rules[name].Expr.StrVal; !strings.HasSuffix(expr, want) {
			t.Errorf("%s: %s, want it to end %q", name, expr, want)
		}
	}
	checkRefused(t, "", []refusal{
		{"no ServiceMonitor, no selector", `prometheusRule: {enabled: true}`, "prometheusRule.enabled without serviceMonitor.enabled"},
		{"no metrics", `{prometheusRule: {enabled: true, selector: 'job="x"'}, config: {telemetry: {metrics: {prometheus: false}}}}`, "prometheusRule.enabled needs config.telemetry.metrics.prometheus"},
	})
}
