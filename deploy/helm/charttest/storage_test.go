package charttest

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// dataVolume is the volume the gateway container mounts, writable, at
// /app/data (nil: none).
func dataVolume(t *testing.T, d *appsv1.Deployment) *corev1.Volume {
	t.Helper()
	for _, m := range gatewayContainer(t, d).VolumeMounts {
		if m.MountPath != "/app/data" || m.ReadOnly {
			continue
		}
		for i, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == m.Name {
				return &d.Spec.Template.Spec.Volumes[i]
			}
		}
		t.Fatalf("volume mount %s names no volume", m.Name)
	}
	return nil
}

// A SQLite ledger outlives its pod: on a PersistentVolumeClaim, and never
// shared by two pods at once (Recreate: a surge pod would open a ledger of
// its own, or wait for a ReadWriteOnce volume held on another node). An
// emptyDir only when the values say the ledger may be lost.
func TestSQLiteLedgerOutlivesThePod(t *testing.T) {
	const embedded = `replicaCount: 1
podDisruptionBudget: {enabled: false}
config: {store: {driver: sqlite, dsn: data/hookstamp.db}, screen: {driver: memory}}
`
	tests := []struct {
		name, vals string
		wantClaim  string // "": an emptyDir
		wantPVC    *corev1.PersistentVolumeClaimSpec
	}{
		{"claim made by the chart", `persistence: {enabled: true, size: 5Gi, storageClass: fast-ssd}`, releaseName + "-hookstamp-data",
			&corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}},
		{"claim of the operator's", `persistence: {enabled: true, existingClaim: hookstamp-ledger}`, "hookstamp-ledger", nil},
		{"ephemeral, said so", `persistence: {ephemeral: true}`, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var vals map[string]any
			if err := yamlUnmarshal(embedded+tt.vals, &vals); err != nil {
				t.Fatal(err)
			}
			r := mustRender(t, vals)
			checkSingleReplica(t, r)
			v := dataVolume(t, r.deployment(t))
			switch {
			case tt.wantClaim == "" && (v.EmptyDir == nil || v.PersistentVolumeClaim != nil):
				t.Errorf("/app/data from %+v, want an emptyDir", v.VolumeSource)
			case tt.wantClaim != "" && (v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != tt.wantClaim):
				t.Errorf("/app/data from %+v, want the claim %s", v.VolumeSource, tt.wantClaim)
			}
			if tt.wantPVC == nil {
				if len(r.PVCs) != 0 {
					t.Errorf("%d PersistentVolumeClaims made, want none", len(r.PVCs))
				}
				return
			}
			if len(r.PVCs) != 1 || r.PVCs[0].Name != tt.wantClaim {
				t.Fatalf("PersistentVolumeClaims %d, want %s", len(r.PVCs), tt.wantClaim)
			}
			pvc := r.PVCs[0].Spec
			if size := pvc.Resources.Requests[corev1.ResourceStorage]; size.String() != "5Gi" ||
				pvc.StorageClassName == nil || *pvc.StorageClassName != "fast-ssd" ||
				len(pvc.AccessModes) != 1 || pvc.AccessModes[0] != tt.wantPVC.AccessModes[0] {
				t.Errorf("PersistentVolumeClaim %+v, want 5Gi of fast-ssd, ReadWriteOnce", pvc)
			}
		})
	}
}

// The README's example of one replica on SQLite.
func TestSQLiteExample(t *testing.T) {
	var vals map[string]any
	if err := yamlUnmarshal(readmeBlock(t, "<!-- charttest: sqlite-values -->"), &vals); err != nil {
		t.Fatalf("README SQLite values: %v", err)
	}
	r := mustRender(t, vals)
	checkSingleReplica(t, r)
	if v := dataVolume(t, r.deployment(t)); v.PersistentVolumeClaim == nil || len(r.PVCs) != 1 {
		t.Errorf("/app/data from %+v, %d claims: want the chart's claim", v.VolumeSource, len(r.PVCs))
	}
}

// A memory screen is one process's claims: a surge pod beside the old one
// would forward what the old one is forwarding.
func TestMemoryScreenRecreates(t *testing.T) {
	var vals map[string]any
	if err := yamlUnmarshal(`{replicaCount: 1, podDisruptionBudget: {enabled: false}, config: {screen: {driver: memory}}}`, &vals); err != nil {
		t.Fatal(err)
	}
	d := mustRender(t, vals).deployment(t)
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || d.Spec.Strategy.RollingUpdate != nil {
		t.Errorf("strategy %+v with a memory screen, want Recreate", d.Spec.Strategy)
	}
	if v := dataVolume(t, d); v != nil {
		t.Errorf("a PostgreSQL ledger with a volume at /app/data: %+v", v)
	}
}

func TestSQLiteRefusedValues(t *testing.T) {
	const embedded = `replicaCount: 1
podDisruptionBudget: {enabled: false}
config: {store: {driver: sqlite, dsn: data/hookstamp.db}, screen: {driver: memory}}
`
	async := `{name: gh, path: /gh, upstream: {url: "http://a:1/"}, key: {sources: [{header: X-Id}]}, delivery: async}`
	checkRefused(t, embedded, []refusal{
		{"no persistence", ``, "set persistence.enabled"},
		{"async route, ephemeral", `persistence: {ephemeral: true}
config: {routes: [` + async + `]}`, "config.routes[0] (gh) is delivery: async on a SQLite ledger without persistence"},
		{"Redis screen, ephemeral", `persistence: {ephemeral: true}
config: {screen: {driver: redis, redis: {addrs: ["redis:6379"]}}}`, "persistence.ephemeral with config.screen.driver redis"},
		{"file outside the volume", `persistence: {enabled: true}
config: {store: {dsn: /tmp/hookstamp.db}}`, `config.store.dsn: "/tmp/hookstamp.db" is not a file in /app/data`},
		{"in memory", `persistence: {enabled: true}
config: {store: {dsn: "file:data/x.db?mode=memory"}}`, "is not a file in /app/data"},
		{"migration Job", `{persistence: {enabled: true}, migration: {enabled: true}}`, "migration.enabled with config.store.driver sqlite"},
	})
}

// mergeValues merges over into base, maps key by key, as Helm merges -f
// files.
func mergeValues(base, over map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		if b, ok := out[k].(map[string]any); ok {
			if o, ok := v.(map[string]any); ok {
				out[k] = mergeValues(b, o)
				continue
			}
		}
		out[k] = v
	}
	return out
}
