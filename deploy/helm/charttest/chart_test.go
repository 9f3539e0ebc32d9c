// Package charttest renders the Helm chart in ../hookstamp with Helm's own
// library and checks the manifests against what docs/production.md asks of
// a deployment; the rendered configuration is checked by the gateway itself.
package charttest

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	release "helm.sh/helm/v4/pkg/release/v1"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

func TestDefaultValues(t *testing.T) {
	r := mustRender(t, nil)
	checkInvariants(t, r, nil)
	if got := *r.deployment(t).Spec.Replicas; got != 3 {
		t.Errorf("replicas %d, want 3", got)
	}
	if len(r.ServiceMonitors) != 0 || len(r.PrometheusRules) != 0 || len(r.Jobs) != 0 || len(r.Hooks) != 0 || len(r.HPAs) != 0 {
		t.Errorf("ServiceMonitor, PrometheusRule, migration Job, hooks and autoscaler are opt-in; got %d, %d, %d, %d, %d",
			len(r.ServiceMonitors), len(r.PrometheusRules), len(r.Jobs), len(r.Hooks), len(r.HPAs))
	}
	token := r.secret(releaseName + "-hookstamp").Data["HOOKSTAMP_ADMIN_TOKEN"]
	if len(token) != 32 {
		t.Errorf("generated admin token %q, want 32 characters", token)
	}
	if !strings.Contains(r.Notes, "curl -i -X POST localhost:8080/webhooks/demo") {
		t.Errorf("NOTES.txt does not show how to send a first webhook:\n%s", r.Notes)
	}
}

// productionExample is the README's production example: its values, and
// the Secrets its `kubectl create secret` lines make.
func productionExample(t *testing.T) (map[string]any, map[string]map[string]string) {
	t.Helper()
	var vals map[string]any
	if err := yamlUnmarshal(readmeBlock(t, "<!-- charttest: production-values -->"), &vals); err != nil {
		t.Fatalf("README production values: %v", err)
	}
	return vals, readmeSecrets(t, readmeBlock(t, "<!-- charttest: production-secrets -->"))
}

var (
	createSecretRE = regexp.MustCompile(`create secret generic (\S+)`)
	fromLiteralRE  = regexp.MustCompile(`--from-literal=([A-Z_][A-Z0-9_]*)='([^']*)'`)
)

func readmeSecrets(t *testing.T, sh string) map[string]map[string]string {
	t.Helper()
	secrets := map[string]map[string]string{}
	var cur map[string]string
	for _, line := range strings.Split(sh, "\n") {
		if m := createSecretRE.FindStringSubmatch(line); m != nil {
			cur = map[string]string{}
			secrets[m[1]] = cur
		}
		if m := fromLiteralRE.FindStringSubmatch(line); m != nil {
			if cur == nil {
				t.Fatalf("README: --from-literal before any create secret: %q", line)
			}
			cur[m[1]] = m[2]
		}
	}
	if len(secrets) == 0 {
		t.Fatal("README: no secret made in the production example")
	}
	return secrets
}

func TestProductionExample(t *testing.T) {
	vals, existing := productionExample(t)
	r := mustRender(t, vals)
	eff := checkInvariants(t, r, existing)

	if len(r.Secrets) != 0 {
		t.Errorf("with secrets.existingSecret the chart made %d Secrets, want none", len(r.Secrets))
	}
	if got := gracePeriod(t, r); got != 5+20+10 {
		t.Errorf("terminationGracePeriodSeconds %d, want 35 (5 pre-stop + 20 shutdown_timeout + 10 release)", got)
	}
	if !strings.Contains(existing["hookstamp-secrets"]["DATABASE_URL"], "default_query_exec_mode=cache_describe") {
		t.Error("the example's DSN through PgBouncer lacks default_query_exec_mode=cache_describe (docs/production.md)")
	}
	if !eff.Telemetry.Metrics.Prometheus || len(r.ServiceMonitors) != 1 {
		t.Fatalf("want one ServiceMonitor and metrics on; got %d, prometheus %v", len(r.ServiceMonitors), eff.Telemetry.Metrics.Prometheus)
	}
	sm := r.ServiceMonitors[0]
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "admin" || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoints %+v, want port admin, /metrics", sm.Spec.Endpoints)
	}
	var admin int
	for _, s := range r.Services {
		if selects(t, &sm.Spec.Selector, s.Labels) {
			admin++
			if s.Name != releaseName+"-hookstamp-admin" {
				t.Errorf("ServiceMonitor selects Service %s, want only the admin one", s.Name)
			}
		}
	}
	if admin != 1 {
		t.Errorf("ServiceMonitor selects %d Services, want the admin one", admin)
	}
	if sm.Labels["release"] != "prometheus" {
		t.Errorf("ServiceMonitor labels %v: want the example's release=prometheus", sm.Labels)
	}
	checkMigrationJob(t, r, existing, "postgres://hookstamp_owner:")
}

// checkMigrationJob: a pre-install and pre-upgrade hook running `gateway
// migrate` on a configuration that passes `gateway check` in the Job's own
// environment, from hook copies that exist before it runs.
func checkMigrationJob(t *testing.T, r *rendered, existing map[string]map[string]string, dsnPrefix string) {
	t.Helper()
	if len(r.Jobs) != 1 {
		t.Fatalf("%d Jobs, want the migration Job", len(r.Jobs))
	}
	job := r.Jobs[0]
	h := r.Hooks["Job/"+job.Name]
	if h == nil || !hasEvents(h, release.HookPreInstall, release.HookPreUpgrade) {
		t.Fatalf("Job %s is not a pre-install and pre-upgrade hook: %+v", job.Name, h)
	}
	spec := job.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("migration Job has %d containers", len(spec.Containers))
	}
	c := &spec.Containers[0]
	if strings.Join(c.Args, " ") != "migrate -config /etc/hookstamp/config.yaml" {
		t.Errorf("migration Job args %q", c.Args)
	}
	cmName := mountedConfigMap(t, spec.Volumes)
	if cm := r.Hooks["ConfigMap/"+cmName]; cm == nil || cm.Weight >= h.Weight {
		t.Errorf("the Job's ConfigMap %s must be a hook made before the Job: %+v", cmName, cm)
	}
	for _, from := range c.EnvFrom {
		name := from.SecretRef.Name
		hs := r.Hooks["Secret/"+name]
		if _, ok := existing[name]; !ok && (hs == nil || hs.Weight >= h.Weight) {
			t.Errorf("the Job's Secret %s is neither the operator's nor a hook made before the Job", name)
		}
	}
	environ := podEnviron(t, c, secretValues(r, existing))
	gatewayCheck(t, podFiles(t, spec, c, secretValues(r, existing), r.configMap(t, cmName).Data["config.yaml"]), environ)
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "DATABASE_URL="); ok && !strings.HasPrefix(v, dsnPrefix) {
			t.Errorf("the Job's DATABASE_URL %q, want the one starting %q", v, dsnPrefix)
		}
	}
	checkSecurity(t, spec.SecurityContext, c.SecurityContext)

	// The Job's pods are none of the replicas: a Service would send them
	// deliveries, and the PodDisruptionBudget, finding a pod whose owner
	// cannot scale, would allow no disruption while a failed Job's pods
	// remain (node drains blocked).
	podLabels := labels.Set(job.Spec.Template.Labels)
	selectors := map[string]map[string]string{"Deployment": r.deployment(t).Spec.Selector.MatchLabels}
	for _, s := range r.Services {
		selectors["Service "+s.Name] = s.Spec.Selector
	}
	for _, p := range r.PDBs {
		selectors["PodDisruptionBudget "+p.Name] = p.Spec.Selector.MatchLabels
	}
	for what, sel := range selectors {
		if len(sel) > 0 && labels.SelectorFromSet(sel).Matches(podLabels) {
			t.Errorf("the %s selects the migration Job's pods (%v)", what, podLabels)
		}
	}
}

func hasEvents(h *release.Hook, want ...release.HookEvent) bool {
	for _, w := range want {
		found := false
		for _, e := range h.Events {
			found = found || e == w
		}
		if !found {
			return false
		}
	}
	return true
}

func TestMigrationHookWithTheChartsSecret(t *testing.T) {
	r := mustRender(t, map[string]any{"migration": map[string]any{"enabled": true}})
	checkInvariants(t, r, nil)
	checkMigrationJob(t, r, nil, "postgres://hookstamp@")
	// The Job's copy of the Secret must hold the token the replicas get.
	main := r.secret(releaseName + "-hookstamp").Data["HOOKSTAMP_ADMIN_TOKEN"]
	hook := r.secret(releaseName + "-hookstamp-migrate").Data["HOOKSTAMP_ADMIN_TOKEN"]
	if len(main) == 0 || !bytes.Equal(main, hook) {
		t.Errorf("admin token %q in the release's Secret, %q in the Job's copy", main, hook)
	}
}

// The migration Job runs where the replicas may, labelled and annotated
// as they are: a dedicated node pool, or a NetworkPolicy that lets only
// labelled pods reach PostgreSQL, would otherwise keep it from the
// database until the hook timed out.
func TestMigrationJobRunsWhereTheReplicasRun(t *testing.T) {
	var vals map[string]any
	if err := yamlUnmarshal(`{migration: {enabled: true}, nodeSelector: {pool: hooks}, tolerations: [{key: dedicated, value: hooks, effect: NoSchedule}],
podLabels: {db-access: "true"}, podAnnotations: {team: payments}}`, &vals); err != nil {
		t.Fatal(err)
	}
	r := mustRender(t, vals)
	checkMigrationJob(t, r, nil, "postgres://hookstamp@")
	pod := r.Jobs[0].Spec.Template
	if pod.Spec.NodeSelector["pool"] != "hooks" || len(pod.Spec.Tolerations) != 1 || pod.Spec.Tolerations[0].Key != "dedicated" ||
		pod.Labels["db-access"] != "true" || pod.Annotations["team"] != "payments" {
		t.Errorf("the migration Job's pod: nodeSelector %v, tolerations %v, labels %v, annotations %v",
			pod.Spec.NodeSelector, pod.Spec.Tolerations, pod.Labels, pod.Annotations)
	}
}

func TestInvariantsFollowValues(t *testing.T) {
	tests := []struct {
		name      string
		vals      string
		wantGrace int64
	}{
		{"admin on another port", `config: {admin: {listen: ":9191"}}`, 5 + 15 + 10},
		{"admin on all IPv4 interfaces", `config: {admin: {listen: "0.0.0.0:9292"}}`, 5 + 15 + 10},
		{"webhooks on another port", `config: {server: {listen: ":8181"}}`, 5 + 15 + 10},
		{"minutes and seconds", `config: {server: {shutdown_timeout: 1m30s}}`, 5 + 90 + 10},
		{"fraction rounded up", `config: {server: {shutdown_timeout: 2500ms}}`, 5 + 3 + 10},
		{"no pre-stop pause", `terminationGrace: {preStopSleepSeconds: 0}`, 15 + 10},
		{"longer release window", `terminationGrace: {releaseSeconds: 20}`, 5 + 15 + 20},
		{"hard anti-affinity", `podAntiAffinity: hard`, 5 + 15 + 10},
		{"Redis required", `config: {screen: {on_unavailable: reject}}`, 5 + 15 + 10},
		{"Redis passed through", `config: {screen: {on_unavailable: pass}}`, 5 + 15 + 10},
		{"ledger passed through", `config: {store: {on_unavailable: pass}}`, 5 + 15 + 10},
		{"both passed through", `config: {store: {on_unavailable: pass}, screen: {on_unavailable: pass}}`, 5 + 15 + 10},
		{"ledger passed through, no screen", `config: {store: {on_unavailable: pass}, screen: {driver: none}}`, 5 + 15 + 10},
		{"upstream password from the Secret", `{secrets: {env: {UP_PASS: pw}}, config: {routes: [{name: u, path: /u, upstream: {url: "https://app:${UP_PASS}@app.internal/hooks"}, key: {sources: [{header: X-Id}]}}]}}`, 5 + 15 + 10},
		{"upstream token and query from the Secret", `{secrets: {env: {UP_TOKEN: ghp_0123456789, TENANT: acme}}, config: {routes: [{name: u, path: /u, upstream: {url: "https://${UP_TOKEN}@app.internal/hooks?token=${UP_TOKEN}&tenant=${TENANT}&empty=&flag"}, key: {sources: [{header: X-Id}]}}]}}`, 5 + 15 + 10},
		{"literal query values not named as credentials", `{secrets: {env: {T: t0k}}, config: {routes: [{name: u, path: /u, upstream: {url: "http://app:9000/hook?tenant=acme&region=eu&token=${T}"}, key: {sources: [{header: X-Id}]}}]}}`, 5 + 15 + 10},
		{"one replica, embedded", `{replicaCount: 1, podDisruptionBudget: {enabled: false}, persistence: {enabled: true}, config: {store: {driver: sqlite, dsn: data/hookstamp.db}, screen: {driver: memory}}}`, 5 + 15 + 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var vals map[string]any
			if err := yamlUnmarshal(tt.vals, &vals); err != nil {
				t.Fatal(err)
			}
			r := mustRender(t, vals)
			if *r.deployment(t).Spec.Replicas > 1 {
				checkInvariants(t, r, nil)
			} else {
				checkSingleReplica(t, r)
			}
			if got := gracePeriod(t, r); got != tt.wantGrace {
				t.Errorf("terminationGracePeriodSeconds %d, want %d", got, tt.wantGrace)
			}
		})
	}
}

// checkSingleReplica: the embedded default on one replica validates, its
// SQLite file has a writable volume under the read-only root, and a new pod
// starts only once the old one has stopped.
func checkSingleReplica(t *testing.T, r *rendered) {
	t.Helper()
	d := r.deployment(t)
	c := gatewayContainer(t, d)
	cm := r.configMap(t, mountedConfigMap(t, d.Spec.Template.Spec.Volumes))
	eff := gatewayCheck(t, cm.Data["config.yaml"], podEnviron(t, c, secretValues(r, nil)))
	if eff.Store.Driver != "sqlite" {
		t.Fatalf("store.driver %q", eff.Store.Driver)
	}
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("strategy %+v with a SQLite ledger, want Recreate", d.Spec.Strategy)
	}
	if dataVolume(t, d) == nil {
		t.Errorf("no writable volume at /app/data for the SQLite ledger: %+v", c.VolumeMounts)
	}
}

// refusal is values (YAML) the chart must refuse to render, with what its
// error must say.
type refusal struct{ name, vals, want string }

// checkRefused renders each refusal's values, merged over base (YAML, ""
// for none) as a second -f file would be, and wants the render to fail
// saying what it says.
func checkRefused(t *testing.T, base string, tests []refusal) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b, vals map[string]any
			if err := yamlUnmarshal(base, &b); err != nil {
				t.Fatal(err)
			}
			if err := yamlUnmarshal(tt.vals, &vals); err != nil {
				t.Fatal(err)
			}
			_, err := renderChart(t, mergeValues(b, vals))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("render error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestRefusedValues(t *testing.T) {
	checkRefused(t, "", []refusal{
		{"literal admin token", `config: {admin: {token: hunter2-admin}}`, "config.admin.token holds a literal value"},
		{"admin token's default", `config: {admin: {token: "${HOOKSTAMP_ADMIN_TOKEN:-hunter2}"}}`, "config.admin.token holds a literal value, the default of ${HOOKSTAMP_ADMIN_TOKEN:-…}"},
		{"DSN's default", `config: {store: {dsn: "${DATABASE_URL:-postgres://u:pw@db/x}"}}`, "config.store.dsn holds a literal value, the default of ${DATABASE_URL:-…}"},
		{"signing secret's default", `config: {routes: [{name: s, path: /s, preset: stripe, upstream: {url: "http://a:1/"}, verify: {secrets: ["${STRIPE_SECRET:-whsec_x}"]}}]}`, "config.routes[0].verify.secrets[0] holds a literal value, the default of ${STRIPE_SECRET:-…}"},
		{"upstream password's default", `config: {routes: [{name: u, path: /u, upstream: {url: "https://app:${UP_PASS:-Sup3r}@app.internal/hooks"}, key: {sources: [{header: X-Id}]}}]}`, "config.routes[0].upstream.url's password holds a literal value, the default of ${UP_PASS:-…}"},
		{"literal DSN", `config: {store: {dsn: "postgres://u:pw@db/x"}}`, "config.store.dsn holds a literal value"},
		{"literal Redis password", `config: {screen: {redis: {password: s3cret}}}`, "config.screen.redis.password holds a literal value"},
		{"literal signing secret", `config: {routes: [{name: s, path: /s, preset: stripe, upstream: {url: "http://a:1/"}, verify: {secrets: [whsec_x]}}]}`, "config.routes[0].verify.secrets[0] holds a literal value"},
		{"literal challenge token", `config: {routes: [{name: m, path: /m, preset: meta, upstream: {url: "http://a:1/"}, verify: {secrets: ["${META_APP_SECRET}"], challenge_token: my-verify-token}}]}`, "config.routes[0].verify.challenge_token holds a literal value"},
		{"literal password in an upstream URL", `config: {routes: [{name: u, path: /u, upstream: {url: "https://app:Sup3rS3cret@app.internal/hooks"}, key: {sources: [{header: X-Id}]}}]}`, "config.routes[0].upstream.url's password holds a literal value"},
		{"token as an upstream URL's user", `config: {routes: [{name: u, path: /u, upstream: {url: "https://ghp_TOKEN@app.internal/hook"}, key: {sources: [{header: X-Id}]}}]}`, "config.routes[0].upstream.url's user information holds a literal value"},
		{"password holding an @", `config: {routes: [{name: u, path: /u, upstream: {url: "https://app:p@ss@app.internal/hook"}, key: {sources: [{header: X-Id}]}}]}`, "config.routes[0].upstream.url's password holds a literal value"},
		{"literal query value in an upstream URL", `config: {routes: [{name: u, path: /u, upstream: {url: "http://app:9000/hook?tenant=${TENANT}&api_key=sk_live_x"}, key: {sources: [{header: X-Id}]}}]}`, "config.routes[0].upstream.url's query parameter api_key holds a literal value"},
		{"literal Azure Functions key", `config: {routes: [{name: u, path: /u, upstream: {url: "https://fn.azurewebsites.net/api/hook?code=abc123"}, key: {sources: [{header: X-Id}]}}]}`, "config.routes[0].upstream.url's query parameter code holds a literal value"},
		{"query value's default", `config: {routes: [{name: u, path: /u, upstream: {url: "http://app:9000/hook?api_key=${API_KEY:-sk_live_x}"}, key: {sources: [{header: X-Id}]}}]}`, "config.routes[0].upstream.url's query parameter api_key holds a literal value, the default of ${API_KEY:-…}"},
		{"Redis URL with a password", `config: {screen: {redis: {addrs: ["redis://:hunter2@redis:6379"]}}}`, "config.screen.redis.addrs[0] holds user information"},
		{"Redis URL with a referenced password", `config: {screen: {redis: {addrs: ["redis:6379", "redis://:${REDIS_PASSWORD}@redis-1:6379"]}}}`, "config.screen.redis.addrs[1] holds user information"},
		{"secret variable not set", `config: {routes: [{name: s, path: /s, preset: stripe, upstream: {url: "http://a:1/"}, verify: {secrets: ["${STRIPE_SECRET}"]}}]}`, "config references ${STRIPE_SECRET}"},
		{"secret variable set in extraEnv of another name", `{extraEnv: [{name: STRIPE_SECRET_2, value: x}], config: {routes: [{name: s, path: /s, preset: stripe, upstream: {url: "http://a:1/"}, verify: {secrets: ["${STRIPE_SECRET}"]}}]}}`, "config references ${STRIPE_SECRET}"},
		{"memory screen on 3 replicas", `config: {screen: {driver: memory}}`, "config.screen.driver: redis"},
		{"SQLite on 3 replicas", `config: {store: {driver: sqlite, dsn: data/x.db}}`, "config.store.driver: postgres"},
		{"lease not covering timeout + 10s", `config: {screen: {lease: 15s}}`, "config.screen.lease (15s) must be at least routes[0].upstream.timeout (10s) + 10s"},
		{"admin on loopback", `config: {admin: {listen: "127.0.0.1:9090"}}`, "config.admin.listen: \"127.0.0.1:9090\" must listen on every interface"},
		{"admin off", `config: {admin: {listen: ""}}`, "config.admin.listen"},
		{"bad duration", `config: {server: {shutdown_timeout: 15}}`, "config.server.shutdown_timeout: \"15\" is not a Go duration"},
		{"ServiceMonitor without metrics", `{serviceMonitor: {enabled: true}, config: {telemetry: {metrics: {prometheus: false}}}}`, "serviceMonitor.enabled needs"},
		{"unknown anti-affinity", `podAntiAffinity: always`, "podAntiAffinity: \"always\""},
	})
}

// A ${NAME} the pods get from extraEnv, from a Secret of the operator's, is
// set: the chart does not refuse it, and the pod starts with it.
func TestSecretVariableFromExtraEnv(t *testing.T) {
	var vals map[string]any
	if err := yamlUnmarshal(`{extraEnv: [{name: STRIPE_SECRET, valueFrom: {secretKeyRef: {name: stripe, key: signing-secret}}}],
config: {routes: [{name: s, path: /s, preset: stripe, upstream: {url: "http://a:1/"}, verify: {secrets: ["${STRIPE_SECRET}"]}}]}}`, &vals); err != nil {
		t.Fatal(err)
	}
	r := mustRender(t, vals)
	checkInvariants(t, r, map[string]map[string]string{"stripe": {"signing-secret": "whsec_from-the-operators-secret"}})
}

func TestOptionalResources(t *testing.T) {
	off := mustRender(t, map[string]any{
		"grafanaDashboard":    map[string]any{"enabled": false},
		"podDisruptionBudget": map[string]any{"enabled": false},
		"serviceAccount":      map[string]any{"create": false},
	})
	if len(off.PDBs) != 0 || len(off.ServiceAccounts) != 0 || len(off.ConfigMaps) != 1 {
		t.Errorf("disabled: %d PDBs, %d ServiceAccounts, %d ConfigMaps (want the configuration's only)", len(off.PDBs), len(off.ServiceAccounts), len(off.ConfigMaps))
	}

	on := mustRender(t, nil)
	want, err := os.ReadFile(filepath.Join(repoRoot, "deploy/grafana/hookstamp-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	dash := on.configMap(t, releaseName+"-hookstamp-dashboard")
	if dash.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard labels %v: want grafana_dashboard=1 for the sidecar", dash.Labels)
	}
	if got := dash.Data["hookstamp-dashboard.json"]; got != strings.TrimRight(string(want), "\n") {
		t.Errorf("the dashboard ConfigMap differs from deploy/grafana/hookstamp-dashboard.json (copy it to deploy/helm/hookstamp/dashboards/hookstamp.json): %d bytes, want %d", len(got), len(want))
	}
	if len(on.ServiceAccounts) != 1 || on.deployment(t).Spec.Template.Spec.ServiceAccountName != on.ServiceAccounts[0].Name {
		t.Errorf("the pods do not run as the chart's ServiceAccount")
	}
}

func TestSecretChangeRollsThePods(t *testing.T) {
	a := mustRender(t, map[string]any{"secrets": map[string]any{"adminToken": "token-one-aaaaaaaa"}})
	b := mustRender(t, map[string]any{"secrets": map[string]any{"adminToken": "token-two-bbbbbbbb"}})
	ann := func(r *rendered) map[string]string { return r.deployment(t).Spec.Template.Annotations }
	if ann(a)["checksum/secret"] == ann(b)["checksum/secret"] {
		t.Error("a new admin token leaves the pod template unchanged: the replicas would keep the old one")
	}
	if ann(a)["checksum/config"] != ann(b)["checksum/config"] {
		t.Error("the configuration checksum changed with the token alone")
	}
}

// yamlUnmarshal reads YAML as Helm reads values.
func yamlUnmarshal(s string, v any) error { return yaml.Unmarshal([]byte(s), v) }
