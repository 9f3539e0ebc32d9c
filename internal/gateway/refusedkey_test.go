package gateway

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/hookstamp/hookstamp/internal/testenv"
)

// A template key refused as longer than key.max_length is logged (SPEC §7:
// keys logged, so that an operator can tell which event was refused) as the
// real, escaped key cut at the limit ("1%2D2%2D3-4" cut at 8 bytes), not
// the raw values joined ("1-2-3-4": shorter than the limit it is said to
// pass, and as ambiguous as the escaping exists to prevent: a = "1-2",
// b = "3-4" joins the same).
func TestTooLongTemplateKeyIsLoggedEscaped(t *testing.T) {
	up := newUpstream(t)
	routes := fmt.Sprintf(`  - name: tpl
    path: /tpl
    upstream:
      url: %s/tpl
    key:
      sources:
        - template: "{json:a}-{json:b}"
      max_length: 8
`, up.URL)
	cfg := routesConfig(t, dbPath(t), "", "", routes, nil)
	logs := &testenv.Buffer{}
	g := startGatewayWith(t, cfg, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})

	wantOutcome(t, send(t, g, "/tpl", `{"a":"1-2-3","b":"4"}`), 400, "invalid_key")
	if line := lastLogLine(logs, "outcome=invalid_key"); !strings.Contains(line, " key=1%2D2%2D ") {
		t.Fatalf("the refused key is not logged as the escaped key cut at 8 bytes (1%%2D2%%2D):\n%s", logs)
	}
	if n := up.total.Load(); n != 0 {
		t.Fatalf("the upstream received %d requests, want 0", n)
	}
}
