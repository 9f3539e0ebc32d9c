package ingress

import (
	"context"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// shortListener fails its first accepts as a process out of file
// descriptors does.
type shortListener struct {
	net.Listener
	failures atomic.Int32
}

func (l *shortListener) Accept() (net.Conn, error) {
	if l.failures.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// A sender that opens connections until the process runs out of file
// descriptors must not end the server: Serve returned at the first
// failed accept, and the gateway exited with every delivery in flight.
// It accepts again once descriptors are back, and the next delivery is
// forwarded.
func TestServerOutlivesRunningOutOfFileDescriptors(t *testing.T) {
	fwd := &countingForwarder{}
	// A method the route does not deduplicate is forwarded as it is: no
	// engine or key is involved.
	s := New(Options{Routes: []*Route{{Name: "r", Path: "/r", Methods: []string{"GET"}}},
		Engine: passEngine{}, Forwarder: fwd})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sl := &shortListener{Listener: ln}
	sl.failures.Store(5)
	served := make(chan error, 1)
	go func() { served <- s.Serve(sl) }()
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })

	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Post("http://"+ln.Addr().String()+"/r", "application/json", strings.NewReader("{}"))
	if err != nil {
		select {
		case err := <-served:
			t.Fatalf("Serve returned %v after accepts failed with EMFILE; want it to keep accepting", err)
		default:
		}
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || fwd.count() != 1 {
		t.Fatalf("status %d, %d forwards; want 200 and 1", resp.StatusCode, fwd.count())
	}
}
