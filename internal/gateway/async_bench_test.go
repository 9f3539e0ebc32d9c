package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// BenchmarkAsyncIntake measures acknowledged deliveries of unique keys on
// the embedded default (SQLite): each is a claim, then its queued row,
// request and job in a batched transaction, then the ack.
func BenchmarkAsyncIntake(b *testing.B) {
	up := newUpstream(b)
	cfg := gwConfig(b, up.URL, dbPath(b), asyncRoute, "")
	g := startGatewayWith(b, cfg, Options{Logger: testLogger(b)})
	url := g.URL() + "/hooks"
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16) // providers deliver concurrently: intakes share transactions
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			body := fmt.Sprintf(`{"id":"evt_%d"}`, n.Add(1))
			resp, err := client.Post(url, "application/json", strings.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				b.Errorf("intake answered %d", resp.StatusCode)
				return
			}
		}
	})
}
