package console

import (
	"fmt"
	"strconv"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// chart is a horizontal bar chart of a route's outcomes, drawn by the
// template as inline SVG in a viewBox of chartWidth by Height.
type chart struct {
	Bars []bar
	// Width and Height are the viewBox's.
	Width, Height int
	// Summary is the chart in words, for screen readers.
	Summary string
}

type bar struct {
	Outcome string
	Count   int64
	Y       int // top of the bar
	TextY   int // baseline of its labels
	// LabelX is where the outcome's name ends, X where the bar starts.
	LabelX, X int
	Width     int
	// CountX is where the count is written, after the bar.
	CountX int
}

// The chart's geometry, in viewBox units: the outcome names in the left
// labelWidth, the bars after, barMax wide at most.
const (
	chartWidth = 420
	labelWidth = 110
	barMax     = 260
	barHeight  = 20
	barGap     = 8
)

// outcomeChart draws the outcomes that happened, in the order of
// idempotency.Outcomes, the longest bar for the largest count.
func outcomeChart(outcomes map[string]int64) chart {
	var most int64
	for _, n := range outcomes {
		most = max(most, n)
	}
	var c chart
	if most == 0 {
		return c
	}
	for _, o := range idempotency.Outcomes {
		n := outcomes[string(o)]
		if n == 0 {
			continue
		}
		y := barGap + len(c.Bars)*(barHeight+barGap)
		w := max(1, int(n*barMax/most))
		c.Bars = append(c.Bars, bar{Outcome: string(o), Count: n, Y: y, TextY: y + barHeight - 5,
			LabelX: labelWidth - 6, X: labelWidth, Width: w, CountX: labelWidth + w + 6})
		if c.Summary != "" {
			c.Summary += ", "
		}
		c.Summary += string(o) + " " + strconv.FormatInt(n, 10)
	}
	c.Width, c.Height = chartWidth, barGap+len(c.Bars)*(barHeight+barGap)
	c.Summary = fmt.Sprintf("Deliveries by outcome: %s.", c.Summary)
	return c
}
