package charttest

import (
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// What the gateway may take after the drain before it exits: the release of
// abandoned claims (idempotency.Options.OpTimeout, 5s) and the flush of
// telemetry (telemetry.ShutdownTimeout, 5s).
const releaseWindow = 10 * time.Second

// checkInvariants asserts what docs/production.md asks of a deployment on
// the release r. existing holds the Secrets the chart does not create (by
// name, then key), as an operator would have made them.
func checkInvariants(t *testing.T, r *rendered, existing map[string]map[string]string) effectiveConfig {
	t.Helper()
	d := r.deployment(t)
	pod := d.Spec.Template
	c := gatewayContainer(t, d)
	secrets := secretValues(r, existing)

	// The configuration the pod mounts passes `gateway check` in the pod's
	// environment, on the files the pod mounts.
	cm := r.configMap(t, mountedConfigMap(t, pod.Spec.Volumes))
	eff := gatewayCheck(t, podFiles(t, pod.Spec, c, secrets, cm.Data["config.yaml"]), podEnviron(t, c, secrets))

	adminPort := listenPort(t, "admin.listen", eff.Admin.Listen)
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Fatalf("%s probe: none, or not an HTTP GET", name)
		}
		if got := containerPort(t, c, p.HTTPGet.Port); got != adminPort {
			t.Errorf("%s probe on port %d, want %d (the effective admin.listen %q)", name, got, adminPort, eff.Admin.Listen)
		}
	}
	for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe} {
		if p.HTTPGet.Path != "/healthz" {
			t.Errorf("startup or liveness probe GET %s, want /healthz", p.HTTPGet.Path)
		}
	}
	checkReadiness(t, c.ReadinessProbe.HTTPGet.Path, eff)
	servicePorts := map[string]map[string]int32{
		releaseName + "-hookstamp":       {"http": listenPort(t, "server.listen", eff.Server.Listen)},
		releaseName + "-hookstamp-admin": {"admin": adminPort},
	}
	if eff.Server.RedirectListen != "" {
		servicePorts[releaseName+"-hookstamp"]["redirect"] = listenPort(t, "server.redirect_listen", eff.Server.RedirectListen)
	}
	checkServices(t, r, c, servicePorts)
	checkPrivilegedPorts(t, pod.Spec.SecurityContext, c)

	drain, err := time.ParseDuration(eff.Server.ShutdownTimeout)
	if err != nil {
		t.Fatalf("effective server.shutdown_timeout %q: %v", eff.Server.ShutdownTimeout, err)
	}
	var preStop time.Duration
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		preStop = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	if grace := gracePeriod(t, r); time.Duration(grace)*time.Second < preStop+drain+releaseWindow {
		t.Errorf("terminationGracePeriodSeconds %d, want ≥ pre-stop %s + shutdown_timeout %s + release %s", grace, preStop, drain, releaseWindow)
	}

	checkSecurity(t, pod.Spec.SecurityContext, c.SecurityContext)
	replicas := d.Spec.Replicas
	if len(r.HPAs) == 1 && replicas == nil {
		replicas = r.HPAs[0].Spec.MinReplicas
	}
	checkSpread(t, r, replicas, pod.Labels, pod.Spec.Affinity)
	checkNoSecretOutsideSecrets(t, r, secrets)
	checkLabels(t, r)
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() {
		t.Errorf("resources %+v: want CPU and memory requests and a memory limit", c.Resources)
	}
	return eff
}

// checkReadiness: the readiness probe is /readyz with every member optional
// (SPEC §8) whose failure the effective configuration serves through: a
// replica that still serves deliveries stays in the Service.
func checkReadiness(t *testing.T, path string, eff effectiveConfig) {
	t.Helper()
	want := map[string]bool{}
	if eff.Store.OnUnavailable == "pass" {
		want["ledger"] = true // forwarded, not recorded
	}
	if eff.Screen.Driver == "redis" && (eff.Screen.OnUnavailable == "store" || eff.Screen.OnUnavailable == "pass") {
		want["screen"] = true // claimed in the ledger, or forwarded
	}
	if len(eff.Server.TLS.ACME.Domains) > 0 {
		want["tls"] = true // the CA's challenge reaches only a ready replica
	}
	u, err := url.Parse(path)
	if err != nil || u.Path != "/readyz" {
		t.Fatalf("readiness probe GET %q, want /readyz (%v)", path, err)
	}
	got := map[string]bool{}
	for _, v := range u.Query()["optional"] {
		for name := range strings.SplitSeq(v, ",") {
			got[name] = true
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("readiness probe GET %s: optional members %v, want %v (store.on_unavailable %q, screen %s with on_unavailable %q)",
			path, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)), eff.Store.OnUnavailable, eff.Screen.Driver, eff.Screen.OnUnavailable)
	}
}

func mountedConfigMap(t *testing.T, vols []corev1.Volume) string {
	t.Helper()
	for _, v := range vols {
		if v.Name == "config" && v.ConfigMap != nil {
			return v.ConfigMap.Name
		}
	}
	t.Fatal("no volume \"config\" from a ConfigMap")
	return ""
}

// listenPort is the port of a listen address the gateway accepted.
func listenPort(t *testing.T, key, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("effective %s %q: %v", key, addr, err)
	}
	n, err := strconv.ParseInt(p, 10, 32)
	if err != nil {
		t.Fatalf("effective %s %q: %v", key, addr, err)
	}
	return int32(n)
}

// containerPort resolves a probe's or a Service's target port on c.
func containerPort(t *testing.T, c *corev1.Container, port intstr.IntOrString) int32 {
	t.Helper()
	if port.Type == intstr.Int {
		return port.IntVal
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port named %q", c.Name, port.StrVal)
	return 0
}

// checkServices: each Service has the ports of want (by Service, then
// port name: the container port it must reach), and no other.
func checkServices(t *testing.T, r *rendered, c *corev1.Container, want map[string]map[string]int32) {
	t.Helper()
	for _, s := range r.Services {
		ports, ok := want[s.Name]
		if !ok {
			t.Errorf("unexpected Service %s", s.Name)
			continue
		}
		delete(want, s.Name)
		got := map[string]int32{}
		for _, p := range s.Spec.Ports {
			got[p.Name] = containerPort(t, c, p.TargetPort)
		}
		if !maps.Equal(got, ports) {
			t.Errorf("Service %s ports %+v reach container ports %v, want %v", s.Name, s.Spec.Ports, got, ports)
		}
	}
	for name := range want {
		t.Errorf("no Service %s", name)
	}
}

// checkPrivilegedPorts: a container port below 1024 can be bound by the
// gateway, which runs as a user without capabilities, only where the pod
// lowers net.ipv4.ip_unprivileged_port_start to it.
func checkPrivilegedPorts(t *testing.T, pod *corev1.PodSecurityContext, c *corev1.Container) {
	t.Helper()
	start := int64(1024)
	if pod != nil {
		for _, s := range pod.Sysctls {
			if s.Name == "net.ipv4.ip_unprivileged_port_start" {
				n, err := strconv.ParseInt(s.Value, 10, 32)
				if err != nil {
					t.Fatalf("sysctl %s=%q", s.Name, s.Value)
				}
				start = n
			}
		}
	}
	for _, p := range c.Ports {
		if int64(p.ContainerPort) < start {
			t.Errorf("container port %s %d is privileged (net.ipv4.ip_unprivileged_port_start %d) for a user without capabilities", p.Name, p.ContainerPort, start)
		}
	}
}

// podFiles writes the files of every Secret the container mounts (from
// secrets, by Secret name, then key) under a directory of the test's, as
// the kubelet would under the mount's path, and returns configYAML with
// those paths rooted there: `gateway check` reads certificate files.
func podFiles(t *testing.T, pod corev1.PodSpec, c *corev1.Container, secrets map[string]map[string]string, configYAML string) string {
	t.Helper()
	root := t.TempDir()
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			data, ok := secrets[v.Secret.SecretName]
			if !ok {
				t.Fatalf("volume %s: Secret %q, which neither the chart nor the test provides", v.Name, v.Secret.SecretName)
			}
			dir := filepath.Join(root, m.MountPath)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			for k, val := range data {
				if err := os.WriteFile(filepath.Join(dir, k), []byte(val), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			configYAML = strings.ReplaceAll(configYAML, " "+m.MountPath+"/", " "+dir+"/")
		}
	}
	return configYAML
}

func checkSecurity(t *testing.T, pod *corev1.PodSecurityContext, c *corev1.SecurityContext) {
	t.Helper()
	if pod == nil || pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot || pod.RunAsUser == nil || *pod.RunAsUser == 0 {
		t.Errorf("pod security context %+v: want runAsNonRoot and a non-zero runAsUser", pod)
	}
	if c == nil || c.ReadOnlyRootFilesystem == nil || !*c.ReadOnlyRootFilesystem ||
		c.AllowPrivilegeEscalation == nil || *c.AllowPrivilegeEscalation ||
		c.Capabilities == nil || len(c.Capabilities.Drop) != 1 || c.Capabilities.Drop[0] != "ALL" {
		t.Errorf("container security context %+v: want a read-only root filesystem, no privilege escalation, every capability dropped", c)
	}
}

// checkSpread: a disruption budget that lets at most all but one replica go,
// and an anti-affinity that keeps replicas on different nodes, both
// selecting the pods.
func checkSpread(t *testing.T, r *rendered, replicas *int32, podLabels map[string]string, aff *corev1.Affinity) {
	t.Helper()
	if replicas == nil {
		t.Fatal("replicas unset")
	}
	if len(r.PDBs) != 1 {
		t.Fatalf("%d PodDisruptionBudgets, want 1", len(r.PDBs))
	}
	pdb := r.PDBs[0].Spec
	if !selects(t, pdb.Selector, podLabels) || pdb.MaxUnavailable == nil || pdb.MaxUnavailable.IntValue() < 1 || pdb.MaxUnavailable.IntValue() >= int(*replicas) {
		t.Errorf("PodDisruptionBudget %+v: want a selector of the pods and 1 ≤ maxUnavailable < %d", pdb, *replicas)
	}
	if aff == nil || aff.PodAntiAffinity == nil {
		t.Fatal("no pod anti-affinity")
	}
	terms := aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	for _, w := range aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
		terms = append(terms, w.PodAffinityTerm)
	}
	// A required one-per-node leaves a rollout's surge replica no node
	// where there are as many nodes as replicas: it replaces in place.
	ru := r.deployment(t).Spec.Strategy.RollingUpdate
	if hard := len(aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0; ru == nil ||
		hard && (ru.MaxSurge.IntValue() != 0 || ru.MaxUnavailable.IntValue() != 1) ||
		!hard && (ru.MaxSurge.IntValue() != 1 || ru.MaxUnavailable.IntValue() != 0) {
		t.Errorf("rolling update %+v with required anti-affinity %v", ru, hard)
	}
	for _, term := range terms {
		if term.TopologyKey == "kubernetes.io/hostname" && selects(t, term.LabelSelector, podLabels) {
			return
		}
	}
	t.Errorf("pod anti-affinity %+v: no term across nodes selecting the pods", aff.PodAntiAffinity)
}

func selects(t *testing.T, sel *metav1.LabelSelector, podLabels map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatalf("selector %+v: %v", sel, err)
	}
	return !s.Empty() && s.Matches(labels.Set(podLabels))
}

// secretValues is every Secret the pods may read: the chart's and the
// operator's.
func secretValues(r *rendered, existing map[string]map[string]string) map[string]map[string]string {
	all := map[string]map[string]string{}
	for _, s := range r.Secrets {
		data := map[string]string{}
		for k, v := range s.Data {
			data[k] = string(v)
		}
		for k, v := range s.StringData {
			data[k] = v
		}
		all[s.Name] = data
	}
	for name, data := range existing {
		all[name] = data
	}
	return all
}

// checkNoSecretOutsideSecrets: no secret value is in a ConfigMap, in a
// literal environment variable or in an annotation.
func checkNoSecretOutsideSecrets(t *testing.T, r *rendered, secrets map[string]map[string]string) {
	t.Helper()
	var plain []string
	for _, cm := range r.ConfigMaps {
		for k, v := range cm.Data {
			plain = append(plain, "ConfigMap "+cm.Name+" "+k+": "+v)
		}
	}
	for _, d := range r.Deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				plain = append(plain, "env "+e.Name+"="+e.Value)
			}
		}
		for k, v := range d.Spec.Template.Annotations {
			plain = append(plain, "annotation "+k+": "+v)
		}
	}
	checked := 0
	for name, data := range secrets {
		for k, v := range data {
			if len(v) < 4 {
				continue // "" or a flag: not a secret
			}
			checked++
			for _, p := range plain {
				if strings.Contains(p, v) {
					t.Errorf("Secret %s's %s appears in %.80s…", name, k, p)
				}
			}
		}
	}
	if checked == 0 {
		t.Error("no secret value to look for: the check proves nothing")
	}
}

// gracePeriod is terminationGracePeriodSeconds the chart derives.
func gracePeriod(t *testing.T, r *rendered) int64 {
	t.Helper()
	g := r.deployment(t).Spec.Template.Spec.TerminationGracePeriodSeconds
	if g == nil {
		t.Fatal("terminationGracePeriodSeconds unset")
	}
	return *g
}
