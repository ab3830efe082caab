package bench

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"slices"
)

// Colors of the contenders on the chart (colour-blind safe, Okabe–Ito).
var colors = map[string]string{
	None:        "#999999",
	Keepalive25: "#E69F00",
	Reresolve:   "#56B4E9",
	Edgeheal:    "#009E73",
}

// Chart geometry, in SVG user units: panels of a plot area and its margins
// in chartCols columns, under a legend.
const (
	chartPlotW, chartPlotH = 520.0, 190.0 // plot area of a panel
	chartMarginL           = 48.0
	chartMarginR           = 16.0
	chartMarginT           = 30.0
	chartMarginB           = 34.0
	chartCols              = 2
	chartLegendH           = 34.0
	chartPanelW            = chartMarginL + chartPlotW + chartMarginR
	chartPanelH            = chartMarginT + chartPlotH + chartMarginB
	chartFontFamily        = "DejaVu Sans, Helvetica, Arial, sans-serif"
)

// Chart draws telemetry delivered per second over time: one panel per
// scenario, one line per contender, the faults as dashed lines. It is a
// plain SVG with no dependencies.
func Chart(rep *Report) []byte {
	scen, conts := chartOrder(rep)
	rows := (len(scen) + chartCols - 1) / chartCols
	W, H := chartCols*chartPanelW, chartLegendH+float64(max(rows, 1))*chartPanelH
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="%s" font-size="11">`+"\n", W, H, W, H, chartFontFamily)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	writeChartLegend(&b, conts)
	for i, sc := range scen {
		p, marks := newChartPanel(rep, sc, float64(i%chartCols)*chartPanelW, chartLegendH+float64(i/chartCols)*chartPanelH)
		p.writeAxes(&b, sc)
		p.writeMarks(&b, marks)
		p.writeLines(&b, rep, sc, conts)
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// chartOrder lists the scenarios and the contenders in the order the
// report's results first name them.
func chartOrder(rep *Report) (scen, conts []string) {
	for _, r := range rep.Results {
		if !slices.Contains(scen, r.Scenario) {
			scen = append(scen, r.Scenario)
		}
		if !slices.Contains(conts, r.Contender) {
			conts = append(conts, r.Contender)
		}
	}
	return scen, conts
}

// writeChartLegend writes the chart's title and a coloured line per contender.
func writeChartLegend(b *bytes.Buffer, conts []string) {
	x := chartMarginL
	fmt.Fprintf(b, `<text x="%.0f" y="20" font-size="13" font-weight="bold">telemetry delivered (msg/s, 20 sent) by send time</text>`+"\n", x)
	x += 380
	for _, c := range conts {
		fmt.Fprintf(b, `<line x1="%.0f" y1="16" x2="%.0f" y2="16" stroke="%s" stroke-width="3"/><text x="%.0f" y="20">%s</text>`+"\n",
			x, x+18, colorOf(c), x+22, html.EscapeString(c))
		x += 30 + 7*float64(len(c))
	}
}

// chartPanel is one scenario's panel: its origin on the canvas, the time
// axis from x0 to x1 seconds from the fault and the rate axis up to ymax.
type chartPanel struct {
	ox, oy       float64
	x0, x1, ymax float64
}

// newChartPanel places the panel of scenario sc at (ox, oy) and sizes its
// axes to fit every contender's series: time from the fault (S1: from the
// contender's start), with at most 10 s before it, and at least 20 msg/s.
// It also returns the scenario's fault marks, from the result with most.
func newChartPanel(rep *Report, sc string, ox, oy float64) (chartPanel, []Mark) {
	const lead = 10.0
	p := chartPanel{ox: ox, oy: oy, x0: 0.0, x1: 1.0, ymax: 20.0}
	var marks []Mark
	for _, r := range rep.Results {
		if r.Scenario != sc {
			continue
		}
		p.x0 = math.Min(p.x0, -math.Min(r.FaultOffset, lead))
		p.x1 = math.Max(p.x1, float64(len(r.Series))-r.FaultOffset)
		for _, v := range r.Series {
			p.ymax = math.Max(p.ymax, float64(v))
		}
		if len(r.Marks) > len(marks) {
			marks = r.Marks
		}
	}
	return p, marks
}

// px is the canvas x of t seconds from the fault.
func (p chartPanel) px(t float64) float64 {
	return p.ox + chartMarginL + (t-p.x0)/(p.x1-p.x0)*chartPlotW
}

// py is the canvas y of a rate of v messages per second.
func (p chartPanel) py(v float64) float64 {
	return p.oy + chartMarginT + chartPlotH - v/p.ymax*chartPlotH
}

// writeAxes writes the panel's title, frame, rate labels and time ticks.
func (p chartPanel) writeAxes(b *bytes.Buffer, sc string) {
	ox, oy := p.ox, p.oy
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" font-size="12" font-weight="bold">%s %s</text>`+"\n", ox+chartMarginL, oy+chartMarginT-10, sc, html.EscapeString(Titles[sc]))
	fmt.Fprintf(b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#cccccc"/>`+"\n", ox+chartMarginL, oy+chartMarginT, chartPlotW, chartPlotH)
	for _, v := range []float64{0, p.ymax / 2, p.ymax} {
		fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="end">%.0f</text>`+"\n", ox+chartMarginL-4, p.py(v)+4, v)
	}
	step := tickStep(p.x1 - p.x0)
	for t := math.Ceil(p.x0/step) * step; t <= p.x1; t += step {
		if math.Abs(t) < 1e-9 {
			t = 0 // not "-0"
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#eeeeee"/><text x="%.1f" y="%.0f" text-anchor="middle">%.0f</text>`+"\n",
			p.px(t), oy+chartMarginT, p.px(t), oy+chartMarginT+chartPlotH, p.px(t), oy+chartMarginT+chartPlotH+14, t)
	}
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="middle" fill="#555555">seconds from the fault</text>`+"\n", ox+chartMarginL+chartPlotW/2, oy+chartMarginT+chartPlotH+28)
}

// writeMarks writes a dashed line per fault, labelled when there are at
// most 4 (more would overlap).
func (p chartPanel) writeMarks(b *bytes.Buffer, marks []Mark) {
	oy := p.oy
	for _, m := range marks {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#d55e00" stroke-dasharray="4 3"/>`+"\n", p.px(m.At), oy+chartMarginT, p.px(m.At), oy+chartMarginT+chartPlotH)
	}
	if len(marks) > 0 && len(marks) <= 4 {
		for _, m := range marks {
			x, anchor := p.px(m.At)+3, "start"
			if p.px(m.At) > p.ox+chartMarginL+chartPlotW*0.6 { // right half: label on the left of the line
				x, anchor = p.px(m.At)-3, "end"
			}
			fmt.Fprintf(b, `<text x="%.1f" y="%.0f" fill="#d55e00" font-size="10" text-anchor="%s">%s</text>`+"\n", x, oy+chartMarginT+11, anchor, html.EscapeString(m.Label))
		}
	}
}

// writeLines writes a polyline per contender that has a series in sc.
func (p chartPanel) writeLines(b *bytes.Buffer, rep *Report, sc string, conts []string) {
	for k, c := range conts {
		// Earlier contenders are drawn wider, so a line lying on top of
		// another (all at zero, say) still shows the one beneath.
		width := 1.6 + 0.7*float64(len(conts)-1-k)
		r, ok := rep.Find(sc, c)
		if !ok || len(r.Series) == 0 {
			continue
		}
		var pts bytes.Buffer
		for t, v := range r.Series {
			x := float64(t) + 0.5 - r.FaultOffset
			if x < p.x0 {
				continue
			}
			fmt.Fprintf(&pts, "%.1f,%.1f ", p.px(x), p.py(float64(v)))
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="%.1f" stroke-linejoin="round" points="%s"/>`+"\n", colorOf(c), width, bytes.TrimSpace(pts.Bytes()))
	}
}

func colorOf(c string) string {
	if col, ok := colors[c]; ok {
		return col
	}
	return "#000000"
}

// tickStep picks a round step giving about 6 ticks over n seconds.
func tickStep(n float64) float64 {
	for _, s := range []float64{5, 10, 15, 30, 60, 120, 300, 600} {
		if n/s <= 7 {
			return s
		}
	}
	return 1200
}
