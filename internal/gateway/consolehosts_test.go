package gateway

import (
	"slices"
	"testing"

	"github.com/hookstamp/hookstamp/internal/config"
)

// The name admin.listen binds to is one the console answers to, beside
// admin.console_hosts; an address or an empty host adds nothing needed.
func TestConsoleHostsIncludeTheListenName(t *testing.T) {
	for _, tc := range []struct {
		listen string
		hosts  []string
		want   []string
	}{
		{"admin.internal:9090", []string{"console.example.com"}, []string{"console.example.com", "admin.internal"}},
		{":9090", []string{"console.example.com"}, []string{"console.example.com"}},
		{"", nil, nil},
	} {
		a := config.Admin{Listen: tc.listen, ConsoleHosts: tc.hosts}
		if got := consoleHosts(a); !slices.Equal(got, tc.want) {
			t.Errorf("listen %q, console_hosts %q: %q, want %q", tc.listen, tc.hosts, got, tc.want)
		}
		if !slices.Equal(a.ConsoleHosts, tc.hosts) {
			t.Errorf("console_hosts changed to %q", a.ConsoleHosts)
		}
	}
}
