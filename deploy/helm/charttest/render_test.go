package charttest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	release "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/release/v1/util"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const (
	chartDir    = "../hookstamp"
	releaseName = "hs"
	namespace   = "webhooks"
	// kubeVersion is the oldest Kubernetes the chart says it runs on
	// (Chart.yaml): Helm's test builds would otherwise claim 1.20.
	kubeVersion = "v1.30.0"
)

func parseKubeVersion(tb testing.TB) *common.KubeVersion {
	tb.Helper()
	v, err := common.ParseKubeVersion(kubeVersion)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// rendered is one `helm template` of the chart, every manifest decoded
// strictly into its Kubernetes type.
type rendered struct {
	Deployments     []*appsv1.Deployment
	Services        []*corev1.Service
	ConfigMaps      []*corev1.ConfigMap
	Secrets         []*corev1.Secret
	ServiceAccounts []*corev1.ServiceAccount
	PDBs            []*policyv1.PodDisruptionBudget
	Jobs            []*batchv1.Job
	ServiceMonitors []*monitoringv1.ServiceMonitor
	PVCs            []*corev1.PersistentVolumeClaim
	PrometheusRules []*monitoringv1.PrometheusRule
	HPAs            []*autoscalingv2.HorizontalPodAutoscaler
	// Hooks are the hook manifests by "Kind/name", with their events.
	Hooks map[string]*release.Hook
	// Labels are the labels of every manifest, and of its pod template,
	// by "Kind/name" (and "Kind/name pods").
	Labels map[string]map[string]string
	// Names are the metadata.name of every manifest, hooks included, by
	// "Kind/name".
	Names map[string]string
	Notes string
}

// renderChart runs what `helm template` runs on the chart with vals (the
// user's values, merged over values.yaml by Helm) and returns the error
// Helm gives, the chart's own `fail`s included.
func renderChart(tb testing.TB, vals map[string]any) (*release.Release, error) {
	tb.Helper()
	return renderRelease(tb, releaseName, vals)
}

// renderRelease is renderChart for a release of another name.
func renderRelease(tb testing.TB, name string, vals map[string]any) (*release.Release, error) {
	tb.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		tb.Fatalf("load chart: %v", err)
	}
	install := action.NewInstall(action.NewConfiguration())
	install.DryRunStrategy = action.DryRunClient
	install.Replace = true
	install.ReleaseName = name
	install.Namespace = namespace
	install.KubeVersion = parseKubeVersion(tb)
	rel, err := install.RunWithContext(context.Background(), ch, vals)
	if err != nil {
		return nil, err
	}
	r, ok := rel.(*release.Release)
	if !ok {
		tb.Fatalf("install returned %T, want *release.Release", rel)
	}
	return r, nil
}

// mustRender renders and decodes, failing the test on any error.
func mustRender(tb testing.TB, vals map[string]any) *rendered {
	tb.Helper()
	return mustRenderRelease(tb, releaseName, vals)
}

// mustRenderRelease is mustRender for a release of another name.
func mustRenderRelease(tb testing.TB, name string, vals map[string]any) *rendered {
	tb.Helper()
	rel, err := renderRelease(tb, name, vals)
	if err != nil {
		tb.Fatalf("render: %v", err)
	}
	out := &rendered{Hooks: map[string]*release.Hook{}, Labels: map[string]map[string]string{}, Names: map[string]string{}, Notes: rel.Info.Notes}
	for name, doc := range util.SplitManifests(rel.Manifest) {
		if err := out.decode(doc); err != nil {
			tb.Fatalf("manifest %s: %v\n%s", name, err, doc)
		}
	}
	for _, h := range rel.Hooks {
		if err := out.decode(h.Manifest); err != nil {
			tb.Fatalf("hook %s: %v\n%s", h.Path, err, h.Manifest)
		}
		out.Hooks[h.Kind+"/"+h.Name] = h
	}
	return out
}

// decode adds one manifest to r; a field its type does not have, a
// duplicate key or a kind the chart should not render is an error.
func (r *rendered) decode(doc string) error {
	if strings.TrimSpace(doc) == "" {
		return nil
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			Template struct {
				Metadata struct {
					Labels map[string]string `json:"labels"`
				} `json:"metadata"`
			} `json:"template"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
		return err
	}
	id := head.Kind + "/" + head.Metadata.Name
	r.Labels[id] = head.Metadata.Labels
	r.Names[id] = head.Metadata.Name
	if l := head.Spec.Template.Metadata.Labels; l != nil {
		r.Labels[id+" pods"] = l
	}
	switch head.APIVersion + " " + head.Kind {
	case "apps/v1 Deployment":
		return strictAppend(doc, &r.Deployments)
	case "v1 Service":
		return strictAppend(doc, &r.Services)
	case "v1 ConfigMap":
		return strictAppend(doc, &r.ConfigMaps)
	case "v1 Secret":
		return strictAppend(doc, &r.Secrets)
	case "v1 ServiceAccount":
		return strictAppend(doc, &r.ServiceAccounts)
	case "policy/v1 PodDisruptionBudget":
		return strictAppend(doc, &r.PDBs)
	case "batch/v1 Job":
		return strictAppend(doc, &r.Jobs)
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return strictAppend(doc, &r.ServiceMonitors)
	case "v1 PersistentVolumeClaim":
		return strictAppend(doc, &r.PVCs)
	case "monitoring.coreos.com/v1 PrometheusRule":
		return strictAppend(doc, &r.PrometheusRules)
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return strictAppend(doc, &r.HPAs)
	}
	return fmt.Errorf("unexpected %s %s", head.APIVersion, head.Kind)
}

func strictAppend[T any](doc string, list *[]*T) error {
	v := new(T)
	if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
		return fmt.Errorf("strict decode: %w", err)
	}
	*list = append(*list, v)
	return nil
}

// deployment is the one Deployment of the release.
func (r *rendered) deployment(tb testing.TB) *appsv1.Deployment {
	tb.Helper()
	if len(r.Deployments) != 1 {
		tb.Fatalf("%d Deployments rendered, want 1", len(r.Deployments))
	}
	return r.Deployments[0]
}

func (r *rendered) configMap(tb testing.TB, name string) *corev1.ConfigMap {
	tb.Helper()
	for _, c := range r.ConfigMaps {
		if c.Name == name {
			return c
		}
	}
	tb.Fatalf("no ConfigMap %q among %d", name, len(r.ConfigMaps))
	return nil
}

func (r *rendered) secret(name string) *corev1.Secret {
	for _, s := range r.Secrets {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// gatewayContainer is the Deployment's container named gateway.
func gatewayContainer(tb testing.TB, d *appsv1.Deployment) *corev1.Container {
	tb.Helper()
	for i := range d.Spec.Template.Spec.Containers {
		if c := &d.Spec.Template.Spec.Containers[i]; c.Name == "gateway" {
			return c
		}
	}
	tb.Fatal("no gateway container")
	return nil
}

// readmeBlock is the fenced block of README.md that follows the line
// holding marker: the chart's README shows the examples the tests render.
func readmeBlock(tb testing.TB, marker string) string {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		tb.Fatal(err)
	}
	_, after, ok := bytes.Cut(data, []byte(marker))
	if !ok {
		tb.Fatalf("README.md has no %q", marker)
	}
	_, after, ok = bytes.Cut(after, []byte("```"))
	if !ok {
		tb.Fatalf("README.md: no fenced block after %q", marker)
	}
	_, after, _ = bytes.Cut(after, []byte("\n")) // the fence's info string
	block, _, ok := bytes.Cut(after, []byte("```"))
	if !ok {
		tb.Fatalf("README.md: unclosed block after %q", marker)
	}
	return string(block)
}
