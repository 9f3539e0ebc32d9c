package loadbench

import (
	"context"
)

// peers are the systems hookstamp's users would otherwise run, measured
// beside it: N0, nginx's proxy hop (nginx.go), and F1, Fiber's own
// idempotency middleware on Redis storage (bench/peers/fiberidem).
type peers struct {
	nginx *Child // nil when nginx could not be found or installed
	fiber *Child
}

// peers starts F1 and, when N0 is among the systems run, nginx (which
// may install it: nginxBinary).
func (r *run) peers(ctx context.Context) (*peers, error) {
	p := &peers{}
	if !r.wants("N0") {
		r.logf("N0: not among -systems, nginx not started")
	} else if bin := nginxBinary(r.logf); bin != "" {
		c, err := StartNginx(ctx, bin, r.dir, "n0-nginx", r.up.URL)
		if err != nil {
			return nil, err
		}
		r.logf("%s: pid %d on %s (%s)", c.Name, c.PID(), c.Addr, bin)
		r.kids = append(r.kids, c)
		p.nginx = c
	} else {
		r.logf("N0: no nginx and it cannot be installed here (not root, no apt-get, or %s set): N0 is left out", noInstallEnv)
	}
	var err error
	if p.fiber, err = r.start(ctx, "f1-fiber-idempotency", "fiberidem", r.up.URL, r.o.RedisAddr, r.prefix("f1")); err != nil {
		return nil, err
	}
	return p, nil
}

// systems are the peers' cells; F1's repeats are the working set recorded
// on F1 first, as B2's are on hookstamp.
func (p *peers) systems(ctx context.Context, r *run, working []string) ([]*system, error) {
	var out []*system
	if p.nginx != nil {
		out = append(out, &system{name: "N0", desc: "nginx proxy_pass hop, keep-alive upstream",
			doer: NewHTTPTarget(p.nginx.Addr, unique(1)), child: p.nginx})
	}
	ft := NewHTTPTarget(p.fiber.Addr, nil)
	if err := r.prerecord(ctx, ft, working, "F1", "the working set on F1"); err != nil {
		return nil, err
	}
	return append(out,
		&system{name: "F1u", desc: "Fiber middleware/idempotency + Redis storage, 100% unique",
			doer: ft.WithMix(unique(1)), child: p.fiber},
		&system{name: "F1r", desc: "Fiber middleware/idempotency + Redis storage, 100% repeats",
			doer: ft.WithMix(&Mix{Working: working}), child: p.fiber},
	), nil
}

func (p *peers) children() []*Child {
	if p.nginx == nil {
		return []*Child{p.fiber}
	}
	return []*Child{p.nginx, p.fiber}
}
