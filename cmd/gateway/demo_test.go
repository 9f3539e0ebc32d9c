package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/hookstamp/hookstamp/internal/config"
)

// make run's configuration has no token: the demo makes one and says
// where the console is; a configured token is kept and never printed.
func TestDemoTokenForTheConsole(t *testing.T) {
	cfg, err := config.Load("../../config.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Routes[0].StoresRequests() {
		t.Errorf("the demo route does not store requests: the console's event log would be empty")
	}
	var out bytes.Buffer
	demoToken(cfg, &out)
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(cfg.Admin.Token) {
		t.Fatalf("demo token %q", cfg.Admin.Token)
	}
	for _, want := range []string{"admin token for this run: " + cfg.Admin.Token, "http://127.0.0.1:9090/ui/"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo banner lacks %q:\n%s", want, out.String())
		}
	}

	cfg.Admin.Token = "chosen"
	out.Reset()
	demoToken(cfg, &out)
	if cfg.Admin.Token != "chosen" || out.Len() != 0 {
		t.Errorf("a configured token: %q, printed %q", cfg.Admin.Token, out.String())
	}
}
