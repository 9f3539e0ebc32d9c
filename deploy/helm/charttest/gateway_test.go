package charttest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// repoRoot is the hookstamp module: the gateway and its Dockerfile.
const repoRoot = "../../.."

// gatewayBin is the gateway built by TestMain from this checkout.
var gatewayBin string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "hookstamp-charttest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	gatewayBin = filepath.Join(dir, "gateway")
	build := exec.Command("go", "build", "-o", gatewayBin, "./cmd/gateway")
	build.Dir = repoRoot // the gateway's own module and go.mod
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build the gateway: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// effectiveConfig is what `gateway check` prints, the keys the chart's
// invariants are about.
type effectiveConfig struct {
	Server struct {
		Listen          string `json:"listen"`
		ShutdownTimeout string `json:"shutdown_timeout"`
		RedirectListen  string `json:"redirect_listen"`
		TLS             struct {
			CertFile string `json:"cert_file"`
			ACME     struct {
				Domains []string `json:"domains"`
			} `json:"acme"`
		} `json:"tls"`
	} `json:"server"`
	Admin struct {
		Listen string `json:"listen"`
	} `json:"admin"`
	Store struct {
		Driver        string `json:"driver"`
		OnUnavailable string `json:"on_unavailable"`
	} `json:"store"`
	Screen struct {
		Driver        string `json:"driver"`
		OnUnavailable string `json:"on_unavailable"`
	} `json:"screen"`
	Telemetry struct {
		Metrics struct {
			Prometheus bool `json:"prometheus"`
		} `json:"metrics"`
	} `json:"telemetry"`
}

// gatewayCheck runs `gateway check` on config.yaml with environ, as the
// pod would run it, and returns the effective configuration it printed.
func gatewayCheck(tb testing.TB, configYAML string, environ []string) effectiveConfig {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(configYAML), 0o600); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(gatewayBin, "check", "-config", path)
	cmd.Env = environ
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		tb.Fatalf("gateway check: %v\n%s\nconfig.yaml:\n%s", err, stderr.String(), configYAML)
	}
	var eff effectiveConfig
	if err := yaml.Unmarshal(stdout.Bytes(), &eff); err != nil {
		tb.Fatalf("gateway check printed what is not YAML: %v\n%s", err, stdout.String())
	}
	return eff
}

var dockerEnvRE = regexp.MustCompile(`^ENV\s+([A-Za-z_][A-Za-z0-9_]*)=(\S*)\s*$`)

// imageEnv is the environment the Dockerfile's runtime stage sets: a
// container starts with it, under the variables the pod spec sets.
func imageEnv(tb testing.TB) map[string]string {
	tb.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "FROM ") {
			clear(env) // only the last stage's ENV reaches the image
		}
		if m := dockerEnvRE.FindStringSubmatch(line); m != nil {
			env[m[1]] = m[2]
		}
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return env
}

// podEnviron is the environment container c starts with: the image's, then
// envFrom, then env (each later one wins, as in Kubernetes), with Secret
// references resolved from secrets (by Secret name, then key).
func podEnviron(tb testing.TB, c *corev1.Container, secrets map[string]map[string]string) []string {
	tb.Helper()
	env := imageEnv(tb)
	for _, from := range c.EnvFrom {
		if from.SecretRef == nil {
			tb.Fatalf("envFrom %+v: only Secrets are expected", from)
		}
		data, ok := secrets[from.SecretRef.Name]
		if !ok {
			tb.Fatalf("envFrom names Secret %q, which neither the chart nor the test provides", from.SecretRef.Name)
		}
		for k, v := range data {
			env[k] = v
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			v, ok := secrets[ref.Name][ref.Key]
			if !ok {
				tb.Fatalf("env %s: Secret %q has no key %q", e.Name, ref.Name, ref.Key)
			}
			env[e.Name] = v
		case e.ValueFrom.ResourceFieldRef != nil:
			env[e.Name] = resourceField(tb, c, e.ValueFrom.ResourceFieldRef)
		default:
			tb.Fatalf("env %s: unexpected source %+v", e.Name, e.ValueFrom)
		}
	}
	environ := make([]string, 0, len(env))
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	return environ
}

// resourceField is the value the kubelet gives a resourceFieldRef to c's
// memory: the quantity over the divisor (1 unless set), rounded up.
func resourceField(tb testing.TB, c *corev1.Container, ref *corev1.ResourceFieldSelector) string {
	tb.Helper()
	if ref.ContainerName != "" && ref.ContainerName != c.Name {
		tb.Fatalf("resourceFieldRef to container %q, from container %q", ref.ContainerName, c.Name)
	}
	var q resource.Quantity
	switch ref.Resource {
	case "limits.memory":
		q = c.Resources.Limits[corev1.ResourceMemory]
	case "requests.memory":
		q = c.Resources.Requests[corev1.ResourceMemory]
	default:
		tb.Fatalf("resourceFieldRef %q: only memory is expected", ref.Resource)
	}
	if q.IsZero() {
		tb.Fatalf("resourceFieldRef %q: container %s sets none", ref.Resource, c.Name)
	}
	divisor := int64(1)
	if !ref.Divisor.IsZero() {
		divisor = ref.Divisor.Value()
	}
	return strconv.FormatInt((q.Value()+divisor-1)/divisor, 10)
}
