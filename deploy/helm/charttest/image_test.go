package charttest

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

var dockerUserRE = regexp.MustCompile(`^USER\s+(\S+)\s*$`)

// imageUser is the USER of the Dockerfile's runtime stage.
func imageUser(tb testing.TB) string {
	tb.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	user := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "FROM ") {
			user = "" // only the last stage's USER is the image's
		}
		if m := dockerUserRE.FindStringSubmatch(line); m != nil {
			user = m[1]
		}
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return user
}

// The image runs as the user the chart's pods run as, and says so with
// numbers: a kubelet enforcing runAsNonRoot cannot verify a named user
// ("nonroot") and refuses to start a pod that does not set runAsUser.
func TestImageUserIsNumericAndThePodsUser(t *testing.T) {
	user := imageUser(t)
	uid, gid, ok := strings.Cut(user, ":")
	u, errU := strconv.ParseInt(uid, 10, 64)
	g, errG := strconv.ParseInt(gid, 10, 64)
	if !ok || errU != nil || errG != nil {
		t.Fatalf("Dockerfile USER %q, want numeric UID:GID", user)
	}
	if u == 0 {
		t.Fatalf("Dockerfile USER %q is root", user)
	}
	psc := mustRender(t, nil).deployment(t).Spec.Template.Spec.SecurityContext
	if psc == nil || psc.RunAsUser == nil || psc.RunAsGroup == nil || *psc.RunAsUser != u || *psc.RunAsGroup != g {
		t.Errorf("Dockerfile USER %s, the chart's pod security context %+v: want the same user and group", user, psc)
	}
}

// checkLabels: every label of every manifest is one Kubernetes accepts.
func checkLabels(t *testing.T, r *rendered) {
	t.Helper()
	if len(r.Labels) == 0 {
		t.Fatal("no manifest's labels read")
	}
	for id, labels := range r.Labels {
		for k, v := range labels {
			for _, msg := range validation.IsQualifiedName(k) {
				t.Errorf("%s: label key %q: %s", id, k, msg)
			}
			for _, msg := range validation.IsValidLabelValue(v) {
				t.Errorf("%s: label %s=%q: %s", id, k, v, msg)
			}
		}
	}
}

// image.digest pins the image the pods (and the migration Job) run, and
// neither it nor a digest written into the tag reaches a label, which
// could not hold it (63 characters, no "@" or ":").
func TestImageDigest(t *testing.T) {
	const digest = "sha256:3f1c6c4a0a2b7e0b6a0f7d9c3e1b2a4d5c6e7f8091a2b3c4d5e6f708192a3b4c"
	tests := []struct {
		name                 string
		image                map[string]any
		wantImage, wantLabel string
	}{
		{"digest", map[string]any{"repository": "registry.example.com/hookstamp", "tag": "v0.1.0", "digest": digest},
			"registry.example.com/hookstamp@" + digest, "v0.1.0"},
		{"digest without a tag", map[string]any{"repository": "registry.example.com/hookstamp", "digest": digest},
			"registry.example.com/hookstamp@" + digest, "dev"},
		{"digest in the tag", map[string]any{"repository": "registry.example.com/hookstamp", "tag": "v0.1.0@" + digest},
			"registry.example.com/hookstamp:v0.1.0@" + digest, "v0.1.0"},
		{"long tag", map[string]any{"repository": "hookstamp", "tag": "v0.1.0-" + strings.Repeat("a", 70) + "-"},
			"hookstamp:v0.1.0-" + strings.Repeat("a", 70) + "-", "v0.1.0-" + strings.Repeat("a", 56)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRender(t, map[string]any{"image": tt.image, "migration": map[string]any{"enabled": true}})
			checkLabels(t, r)
			if got := gatewayContainer(t, r.deployment(t)).Image; got != tt.wantImage {
				t.Errorf("gateway image %q, want %q", got, tt.wantImage)
			}
			if len(r.Jobs) != 1 || r.Jobs[0].Spec.Template.Spec.Containers[0].Image != tt.wantImage {
				t.Errorf("the migration Job does not run %q", tt.wantImage)
			}
			if got := r.deployment(t).Labels["app.kubernetes.io/version"]; got != tt.wantLabel {
				t.Errorf("app.kubernetes.io/version %q, want %q", got, tt.wantLabel)
			}
		})
	}
	if _, err := renderChart(t, map[string]any{"image": map[string]any{"digest": "@" + digest}}); err == nil || !strings.Contains(err.Error(), "image.digest") {
		t.Errorf("a digest with its \"@\": render error %v, want one naming image.digest", err)
	}
}

// image.tag is a string: a tag YAML read as a number (20240601, 1.10) is
// refused, since 1.10 is already 1.1 by then, rather than rendered as
// "2.0240601e+07" or "1.1". An empty tag is the chart's appVersion.
func TestImageTagIsAString(t *testing.T) {
	accepted := []struct {
		name, vals           string
		wantImage, wantLabel string
	}{
		{"quoted date", `image: {tag: "20240601"}`, "hookstamp:20240601", "20240601"},
		{"quoted version", `image: {tag: "1.10"}`, "hookstamp:1.10", "1.10"},
		{"empty", `image: {tag: ""}`, "hookstamp:dev", "dev"},
		{"null", `image: {tag: null}`, "hookstamp:dev", "dev"},
	}
	for _, tt := range accepted {
		t.Run(tt.name, func(t *testing.T) {
			var vals map[string]any
			if err := yamlUnmarshal(tt.vals, &vals); err != nil {
				t.Fatal(err)
			}
			d := mustRender(t, vals).deployment(t)
			if got := gatewayContainer(t, d).Image; got != tt.wantImage {
				t.Errorf("gateway image %q, want %q", got, tt.wantImage)
			}
			if got := d.Labels["app.kubernetes.io/version"]; got != tt.wantLabel {
				t.Errorf("app.kubernetes.io/version %q, want %q", got, tt.wantLabel)
			}
		})
	}
	checkRefused(t, "", []refusal{
		{"date", `image: {tag: 20240601}`, `image.tag must be a string; this one was read as a float64`},
		{"version", `image: {tag: 1.10}`, `Quote it (tag: "1.10")`},
		{"bool", `image: {tag: true}`, `image.tag must be a string; this one was read as a bool`},
		{"number digest", `image: {digest: 1234567890}`, `is not a digest (sha256:`},
	})
	// --set image.tag=20240601 gives Helm an int64.
	if _, err := renderChart(t, map[string]any{"image": map[string]any{"tag": int64(20240601)}}); err == nil || !strings.Contains(err.Error(), "--set-string image.tag") {
		t.Errorf("image.tag int64: render error %v, want one asking for --set-string", err)
	}
}
