package charttest

import (
	"strings"
	"testing"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
)

// With autoscaling the Deployment leaves its replicas to a
// HorizontalPodAutoscaler of its own (an upgrade rendering replicas would
// reset the count), and scaling out needs what several replicas need.
func TestAutoscaling(t *testing.T) {
	var vals map[string]any
	if err := yamlUnmarshal(`autoscaling: {enabled: true, minReplicas: 2, maxReplicas: 6, targetCPUUtilizationPercentage: 60}`, &vals); err != nil {
		t.Fatal(err)
	}
	r := mustRender(t, vals)
	checkInvariants(t, r, nil)
	d := r.deployment(t)
	if d.Spec.Replicas != nil {
		t.Errorf("replicas %d with autoscaling: each upgrade would reset the autoscaler's count", *d.Spec.Replicas)
	}
	if len(r.HPAs) != 1 {
		t.Fatalf("%d HorizontalPodAutoscalers, want 1", len(r.HPAs))
	}
	hpa := r.HPAs[0].Spec
	if ref := hpa.ScaleTargetRef; ref.APIVersion != "apps/v1" || ref.Kind != "Deployment" || ref.Name != d.Name {
		t.Errorf("the autoscaler scales %+v, want the Deployment %s", ref, d.Name)
	}
	if hpa.MinReplicas == nil || *hpa.MinReplicas != 2 || hpa.MaxReplicas != 6 {
		t.Errorf("the autoscaler's replicas %v to %d, want 2 to 6", hpa.MinReplicas, hpa.MaxReplicas)
	}
	if len(hpa.Metrics) != 1 || hpa.Metrics[0].Type != autoscalingv2.ResourceMetricSourceType || hpa.Metrics[0].Resource == nil ||
		hpa.Metrics[0].Resource.Name != corev1.ResourceCPU || hpa.Metrics[0].Resource.Target.Type != autoscalingv2.UtilizationMetricType ||
		hpa.Metrics[0].Resource.Target.AverageUtilization == nil || *hpa.Metrics[0].Resource.Target.AverageUtilization != 60 {
		t.Errorf("the autoscaler's metrics %+v, want CPU at 60%% of the request", hpa.Metrics)
	}
	if !strings.Contains(r.Notes, "2 to 6 replicas") {
		t.Errorf("NOTES.txt does not say the replicas are autoscaled:\n%s", r.Notes)
	}

	const embedded = `{autoscaling: {enabled: true}, replicaCount: 1, podDisruptionBudget: {enabled: false}, persistence: {enabled: true},
config: {store: {driver: sqlite, dsn: data/hookstamp.db}, screen: {driver: memory}}}`
	checkRefused(t, "", []refusal{
		{"SQLite", embedded, "autoscaling.maxReplicas > 1 needs config.store.driver: postgres"},
		{"SQLite by default", `{autoscaling: {enabled: true}, config: {store: {driver: null, dsn: null}}}`, "autoscaling.maxReplicas > 1 needs config.store.driver: postgres"},
		{"memory screen", `{autoscaling: {enabled: true}, config: {screen: {driver: memory}}}`, "autoscaling.maxReplicas > 1 needs config.screen.driver: redis"},
		{"min over max", `autoscaling: {enabled: true, minReplicas: 4, maxReplicas: 3}`, "autoscaling: minReplicas (4) must be at least 1 and maxReplicas (3) at least minReplicas"},
		{"no CPU request", `{autoscaling: {enabled: true}, resources: {requests: {cpu: null}}}`, "resources.requests.cpu, which is not set"},
	})
}
