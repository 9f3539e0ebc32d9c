package loadbench

import (
	"cmp"
	"fmt"
	"html"
	"math"
	"os"
	"slices"
	"strings"
)

// The chart is written by hand: two panels of plain SVG, no plotting
// library. Left: closed-loop throughput against concurrency, one line per
// system. Right: open-loop latency percentiles (p50, p99, p99.9) per
// system at the fixed rate. Both on log scales: the systems span an order
// of magnitude.

var palette = map[string]string{
	"U0": "#a3a3a3", "B0": "#6b7280", "B1": "#2563eb", "B2": "#16a34a", "B3": "#9333ea", "B3s": "#c026d3",
	"B4": "#ea580c", "B4s": "#f59e0b", "B4u": "#b45309", "B5": "#0891b2", "L1": "#1e293b", "L2": "#dc2626",
	"N0": "#374151", "F1u": "#be185d", "F1r": "#db2777",
}

// dashed systems are the baselines and peers, not hookstamp (and
// hookstamp's own earlier build, "@base").
var dashed = map[string]bool{"U0": true, "B0": true, "L1": true, "L2": true, "N0": true, "F1u": true, "F1r": true}

// colorOf is a system's color; an earlier build's shares its system's.
func colorOf(s string) string {
	if c, ok := palette[strings.TrimSuffix(s, "@base")]; ok {
		return c
	}
	return "#999999"
}

func isDashed(s string) bool { return dashed[s] || strings.HasSuffix(s, "@base") }

// WriteSVG draws the report's chart to path.
func (r *Report) WriteSVG(path string) error {
	const W, H = 1000, 480
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica,Arial,sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold" text-anchor="middle">hookstamp load benchmark — %s mode, %d CPUs, load avg %.2f, %s</text>`+"\n",
		W/2, html.EscapeString(r.Mode), r.Machine.CPUs, r.LoadBefore, html.EscapeString(r.GeneratedAt[:10]))

	var systems []string
	for _, x := range r.Results {
		if !slices.Contains(systems, x.System) {
			systems = append(systems, x.System)
		}
	}
	r.throughputPanel(&b, systems, 60, 50, 400, 340)
	r.latencyPanel(&b, systems, 560, 50, 420, 340)

	// Legend.
	x := 60
	for _, s := range systems {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d" font-size="10">%s</text>`+"\n",
			x, 428, colorOf(s), x+13, 437, html.EscapeString(s))
		x += 50
	}
	fmt.Fprintf(&b, `<text x="60" y="458" font-size="10" fill="#444">dashed, not hookstamp: U0 upstream alone · B0 Fiber proxy hop · N0 nginx hop · F1u/F1r Fiber idempotency on Redis, unique/repeats ·</text>`+"\n")
	fmt.Fprintf(&b, `<text x="60" y="470" font-size="10" fill="#444">L1 PG INSERT tx · L2 Redis SET NX · hookstamp: Redis+PG B1 unique, B2 repeats, B3 70/30, B3s 10/90 · ledger only B4u/B4/B4s · B5 SQLite</text>`+"\n")
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// logTicks are the gridlines of a log axis between lo and hi.
func logTicks(lo, hi float64) []float64 {
	var t []float64
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v >= lo*0.999 && v <= hi*1.001 {
				t = append(t, v)
			}
		}
	}
	return t
}

// niceBounds are the 1-2-5 steps just outside the positive values.
func niceBounds(vals []float64) (lo, hi float64) {
	lo, hi = math.Inf(1), 0
	for _, v := range vals {
		if v > 0 {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	if hi == 0 {
		return 1, 10
	}
	steps := func(v float64) []float64 {
		e := math.Pow(10, math.Floor(math.Log10(v)))
		return []float64{e, 2 * e, 5 * e, 10 * e}
	}
	down, up := steps(lo), steps(hi)
	for i := len(down) - 1; i >= 0; i-- {
		if down[i] <= lo {
			lo = down[i]
			break
		}
	}
	for _, u := range up {
		if u >= hi {
			hi = u
			break
		}
	}
	return lo, hi
}

func fmtTick(v float64, unit string) string {
	switch {
	case v >= 1000 && unit == "":
		return fmt.Sprintf("%gk", v/1000)
	case v < 1:
		return fmt.Sprintf("%g%s", v, unit)
	}
	return fmt.Sprintf("%g%s", v, unit)
}

func (r *Report) throughputPanel(b *strings.Builder, systems []string, x0, y0, w, h int) {
	concs := r.Settings.Concurrency
	var vals []float64
	for _, x := range r.Results {
		if x.Loop == "closed" {
			vals = append(vals, x.Throughput)
		}
	}
	lo, hi := niceBounds(vals)
	yOf := func(v float64) float64 {
		return float64(y0+h) - (math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*float64(h)
	}
	xOf := func(i int) float64 {
		if len(concs) == 1 {
			return float64(x0 + w/2)
		}
		return float64(x0) + 30 + float64(i)*float64(w-60)/float64(len(concs)-1)
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" font-weight="bold" text-anchor="middle">throughput, closed loop (req/s, log scale)</text>`+"\n", x0+w/2, y0-8)
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", x0, y0, w, h)
	for _, t := range logTicks(lo, hi) {
		y := yOf(t)
		fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e5e7eb"/><text x="%d" y="%.1f" text-anchor="end" font-size="10">%s</text>`+"\n",
			x0, x0+w, y, y, x0-4, y+3, fmtTick(t, ""))
	}
	for i, c := range concs {
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" font-size="10">%d conns</text>`+"\n", xOf(i), y0+h+14, c)
	}
	type label struct {
		name string
		x, y float64
	}
	var labels []label
	for _, s := range systems {
		var pts []string
		var last struct{ x, y float64 }
		for i, c := range concs {
			res := r.find(s, "closed", c)
			if res == nil || res.Throughput <= 0 {
				continue
			}
			last.x, last.y = xOf(i), yOf(res.Throughput)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", last.x, last.y))
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s c=%d: %.0f req/s</title></circle>`+"\n",
				last.x, last.y, colorOf(s), s, c, res.Throughput)
		}
		if len(pts) == 0 {
			continue
		}
		dash := ""
		if isDashed(s) {
			dash = ` stroke-dasharray="5,3"`
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), colorOf(s), dash)
		labels = append(labels, label{s, last.x + 6, last.y + 3})
	}
	// Labels at the lines' ends, pushed apart so that none overlaps.
	slices.SortFunc(labels, func(a, b label) int { return cmp.Compare(a.y, b.y) })
	for i := 1; i < len(labels); i++ {
		labels[i].y = max(labels[i].y, labels[i-1].y+11)
	}
	for _, l := range labels {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="10" fill="%s">%s</text>`+"\n", l.x, l.y, colorOf(l.name), l.name)
	}
}

func (r *Report) latencyPanel(b *strings.Builder, systems []string, x0, y0, w, h int) {
	var vals []float64
	for _, x := range r.Results {
		if x.Loop == "open" {
			vals = append(vals, x.P50, x.P999)
		}
	}
	lo, hi := niceBounds(vals)
	yOf := func(v float64) float64 {
		v = max(v, lo)
		return float64(y0+h) - (math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*float64(h)
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" font-weight="bold" text-anchor="middle">latency, open loop at %.0f req/s (ms, log): p50 · p99 · p99.9</text>`+"\n", x0+w/2, y0-8, r.Settings.OpenRate)
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", x0, y0, w, h)
	for _, t := range logTicks(lo, hi) {
		y := yOf(t)
		fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e5e7eb"/><text x="%d" y="%.1f" text-anchor="end" font-size="10">%s</text>`+"\n",
			x0, x0+w, y, y, x0-4, y+3, fmtTick(t, ""))
	}
	group := float64(w) / float64(max(len(systems), 1))
	bar := group / 4.5
	for i, s := range systems {
		res := r.find(s, "open", 0)
		if res == nil {
			continue
		}
		gx := float64(x0) + float64(i)*group + (group-3*bar)/2
		for j, v := range []float64{res.P50, res.P99, res.P999} {
			y := yOf(v)
			op := []string{"1", "0.65", "0.35"}[j]
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="%s"><title>%s %s: %.2f ms</title></rect>`+"\n",
				gx+float64(j)*bar, y, bar-1, float64(y0+h)-y, colorOf(s), op, s, []string{"p50", "p99", "p99.9"}[j], v)
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" font-size="10">%s</text>`+"\n", gx+1.5*bar, y0+h+14, s)
	}
}
