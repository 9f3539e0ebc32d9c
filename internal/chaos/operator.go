package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// holdRoute is the chaos route with record.ambiguous: hold, and adminToken
// the bearer token of every gateway's admin API, which the operator uses.
const (
	holdRoute  = "payouts"
	adminToken = "chaos-admin-token"
)

// Resolution is one held key the operator resolved.
type Resolution struct {
	Route, Key string
	// Action is "release" (the upstream never applied the event: the next
	// delivery is forwarded) or "record" (it did: repeats replay Status,
	// ContentType and Body, the upstream's own answer to it).
	Action      string
	Status      int
	ContentType string
	Body        []byte
	// Start and End bracket the resolve call; Life is the incarnation
	// whose admin API answered it.
	Start, End time.Time
	Life       string
	// Took is when it took effect, as far as the audit can tell: the
	// line Life logged resolving the key, else End.
	Took time.Time
	// Unsure: the call got no answer, or a 5xx, so the gateway may or may
	// not have resolved the key; the audit lets it explain what follows.
	Unsure bool
}

// operator plays the on-call engineer of a hold route: it lists the keys
// held on every pass, looks each one up in the upstream's log — the
// application's own books — and resolves it the way those books say.
type operator struct {
	gws    []*GatewayProc
	up     *Upstream
	client *http.Client
	// minAge is how long a key stays held before it is resolved: longer
	// than a forward the upstream may still be logging.
	minAge time.Duration

	mu       sync.Mutex
	resolved []Resolution
	// lastCutoff: every key held before it was resolved by the last pass
	// that listed the held keys completely.
	lastCutoff time.Time
	failures   int
}

func newOperator(gws []*GatewayProc, up *Upstream, minAge time.Duration) *operator {
	return &operator{gws: gws, up: up, minAge: minAge, client: &http.Client{Timeout: 3 * time.Second}}
}

// run makes a pass every interval until ctx ends.
func (o *operator) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			o.pass(ctx)
		}
	}
}

// heldRecord is the part of an admin record the operator reads.
type heldRecord struct {
	Key       string    `json:"key"`
	CreatedAt time.Time `json:"created_at"`
}

// pass lists the held keys at the first gateway that answers and resolves
// those held for at least minAge. It reports whether every one of them was
// resolved.
func (o *operator) pass(ctx context.Context) bool {
	for _, g := range o.gws {
		l := g.Serving()
		if l == nil {
			continue
		}
		cutoff := time.Now().Add(-o.minAge)
		var list struct {
			Held      []heldRecord `json:"held"`
			Truncated bool         `json:"truncated"`
		}
		if err := o.call(ctx, g, http.MethodGet, "/admin/routes/"+holdRoute+"/held?limit=1000", nil, &list); err != nil {
			o.fail()
			continue
		}
		all := !list.Truncated
		for _, h := range list.Held {
			if !h.CreatedAt.Before(cutoff) {
				continue
			}
			if err := o.resolve(ctx, g, l.Name, h.Key); err != nil {
				o.fail()
				all = false
			}
		}
		if all {
			o.mu.Lock()
			o.lastCutoff = cutoff
			o.mu.Unlock()
		}
		return all
	}
	return false
}

// resolve settles one held key by the upstream's log.
func (o *operator) resolve(ctx context.Context, g *GatewayProc, life, key string) error {
	res := Resolution{Route: holdRoute, Key: key, Action: "release", Life: life}
	body := map[string]any{"action": "release"}
	if rec, ok := o.up.FirstApplied(holdRoute, key); ok {
		res.Action, res.Status, res.ContentType, res.Body = "record", rec.Status, rec.ContentType, rec.Response
		body = map[string]any{"action": "record", "status": rec.Status,
			"headers": map[string]string{"Content-Type": rec.ContentType}, "body": string(rec.Response)}
	}
	res.Start = time.Now()
	path := "/admin/routes/" + holdRoute + "/records/" + url.PathEscape(key) + "/resolve"
	err := o.call(ctx, g, http.MethodPost, path, body, nil)
	res.End = time.Now()
	var refused *statusError
	switch {
	case err == errNotHeld:
		return nil // resolved meanwhile, through another gateway
	case errors.As(err, &refused) && refused.status < 500:
		return err // refused: nothing changed
	}
	res.Unsure = err != nil
	o.mu.Lock()
	o.resolved = append(o.resolved, res)
	o.mu.Unlock()
	return err
}

var errNotHeld = errors.New("not held")

// statusError is an admin answer other than 200.
type statusError struct {
	status int
	what   string
}

func (e *statusError) Error() string { return e.what }

// call makes one admin request; a 404 is errNotHeld.
func (o *operator) call(ctx context.Context, g *GatewayProc, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+g.AdminAddr+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := o.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return err
	case resp.StatusCode == http.StatusNotFound && method == http.MethodPost:
		return errNotHeld
	case resp.StatusCode != http.StatusOK:
		return &statusError{resp.StatusCode, fmt.Sprintf("%s %s: %d %s", method, path, resp.StatusCode, b)}
	case out != nil:
		return json.Unmarshal(b, out)
	}
	return nil
}

func (o *operator) fail() {
	o.mu.Lock()
	o.failures++
	o.mu.Unlock()
}

// results are the resolutions made, the cutoff of the last complete pass,
// and the number of admin calls that failed (a gateway down, a ledger
// fault).
func (o *operator) results() ([]Resolution, time.Time, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Resolution(nil), o.resolved...), o.lastCutoff, o.failures
}
