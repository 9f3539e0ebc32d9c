package inbox

import (
	"context"
	"sync"
)

// gate lets one call per key at a time into the database. Copies of a key
// in this process wait here, holding nothing; without it each would hold
// a pooled connection while its insert waited on the first copy's row
// lock, and a burst of copies could take the whole pool, the first
// copy's handler then waiting for a connection of its own forever.
type gate struct {
	mu    sync.Mutex
	turns map[string]*turn
}

// turn is one key's gate: a token, and how many calls hold or wait for it.
type turn struct {
	token   chan struct{}
	waiting int
}

// enter waits for key's turn until ctx is done; leave ends it.
func (g *gate) enter(ctx context.Context, key string) (leave func(), err error) {
	g.mu.Lock()
	if g.turns == nil {
		g.turns = map[string]*turn{}
	}
	t := g.turns[key]
	if t == nil {
		t = &turn{token: make(chan struct{}, 1)}
		g.turns[key] = t
	}
	t.waiting++
	g.mu.Unlock()
	done := func() {
		g.mu.Lock()
		if t.waiting--; t.waiting == 0 {
			delete(g.turns, key)
		}
		g.mu.Unlock()
	}
	select {
	case t.token <- struct{}{}:
		return func() { <-t.token; done() }, nil
	case <-ctx.Done():
		done()
		return nil, ctx.Err()
	}
}
