package loadbench

import (
	"fmt"
	"os"
	"path/filepath"
)

// GatewayConfig is the YAML of one gateway under test. Everything not
// written here is hookstamp's default: telemetry on (spans made with
// exporter none, sample_ratio 1.0; Prometheus metrics), 16 ledger
// connections, group commit, the 32 MiB local cache, the 1m sweeper.
type GatewayConfig struct {
	Store      string // postgres | sqlite
	DSN        string
	Screen     string // redis | memory | none
	RedisAddr  string
	Prefix     string
	LocalCache string // "" = default (32MiB)
	// OnUnavailable is screen.on_unavailable ("" = default, store). With
	// Redis, first deliveries are confirmed by a ledger claim in every mode.
	OnUnavailable string
	Sweep         string // "" = default (1m)
	UpstreamURL   string
	// Extra is YAML appended under the top level (whole sections).
	Extra string
	// Server is YAML appended to the server section (server.tls).
	Server string
	// Route is YAML appended to the route (delivery: async).
	Route string
}

// YAML renders the configuration.
func (c GatewayConfig) YAML() string {
	screen := fmt.Sprintf("screen:\n  driver: %s\n", c.Screen)
	if c.Screen == "redis" {
		screen += fmt.Sprintf("  redis:\n    addrs: [%q]\n", c.RedisAddr)
	}
	if c.Prefix != "" {
		screen += fmt.Sprintf("  prefix: %q\n", c.Prefix)
	}
	if c.LocalCache != "" {
		screen += fmt.Sprintf("  local_cache: %s\n", c.LocalCache)
	}
	if c.OnUnavailable != "" {
		screen += fmt.Sprintf("  on_unavailable: %s\n", c.OnUnavailable)
	}
	sweep := ""
	if c.Sweep != "" {
		sweep = "  sweep_interval: " + c.Sweep + "\n"
	}
	return fmt.Sprintf(`server:
  listen: "127.0.0.1:0"
  body_limit: 64KiB
%sadmin:
  listen: ""
store:
  driver: %s
  dsn: %q
%s%s
telemetry:
  log:
    level: warn
    format: text
%s
routes:
  - name: bench
    path: /hook
    upstream:
      url: %s/hook
      timeout: 10s
    key:
      sources:
        - header: X-Event-Id
%s`, c.Server, c.Store, c.DSN, sweep, screen, c.Extra, c.UpstreamURL, c.Route)
}

// Write saves the configuration as dir/name.yaml.
func (c GatewayConfig) Write(dir, name string) (string, error) {
	p := filepath.Join(dir, name+".yaml")
	return p, os.WriteFile(p, []byte(c.YAML()), 0o600)
}
