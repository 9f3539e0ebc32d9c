package charttest

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
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
