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

// Chart draws telemetry delivered per second over time: one panel per
// scenario, one line per contender, the faults as dashed lines. It is a
// plain SVG with no dependencies.
func Chart(rep *Report) []byte {
	var scen []string
	var conts []string
	for _, r := range rep.Results {
		if !slices.Contains(scen, r.Scenario) {
			scen = append(scen, r.Scenario)
		}
		if !slices.Contains(conts, r.Contender) {
			conts = append(conts, r.Contender)
		}
	}
	const (
		pw, ph     = 520.0, 190.0 // plot area of a panel
		ml, mr     = 48.0, 16.0
		mt, mb     = 30.0, 34.0
		cols       = 2
		legendH    = 34.0
		panelW     = ml + pw + mr
		panelH     = mt + ph + mb
		fontFamily = "DejaVu Sans, Helvetica, Arial, sans-serif"
	)
	rows := (len(scen) + cols - 1) / cols
	W, H := cols*panelW, legendH+float64(max(rows, 1))*panelH
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="%s" font-size="11">`+"\n", W, H, W, H, fontFamily)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	// Legend.
	x := ml
	fmt.Fprintf(&b, `<text x="%.0f" y="20" font-size="13" font-weight="bold">telemetry delivered (msg/s, 20 sent) by send time</text>`+"\n", x)
	x += 380
	for _, c := range conts {
		fmt.Fprintf(&b, `<line x1="%.0f" y1="16" x2="%.0f" y2="16" stroke="%s" stroke-width="3"/><text x="%.0f" y="20">%s</text>`+"\n",
			x, x+18, colorOf(c), x+22, html.EscapeString(c))
		x += 30 + 7*float64(len(c))
	}
	for i, sc := range scen {
		ox := float64(i%cols) * panelW
		oy := legendH + float64(i/cols)*panelH
		// Panel extent: time from the fault (S1: from the contender's
		// start), with at most lead seconds before it.
		const lead = 10.0
		x0, x1, ymax := 0.0, 1.0, 20.0
		var marks []Mark
		for _, r := range rep.Results {
			if r.Scenario != sc {
				continue
			}
			x0 = math.Min(x0, -math.Min(r.FaultOffset, lead))
			x1 = math.Max(x1, float64(len(r.Series))-r.FaultOffset)
			for _, v := range r.Series {
				ymax = math.Max(ymax, float64(v))
			}
			if len(r.Marks) > len(marks) {
				marks = r.Marks
			}
		}
		px := func(t float64) float64 { return ox + ml + (t-x0)/(x1-x0)*pw }
		py := func(v float64) float64 { return oy + mt + ph - v/ymax*ph }
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-size="12" font-weight="bold">%s %s</text>`+"\n", ox+ml, oy+mt-10, sc, html.EscapeString(Titles[sc]))
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#cccccc"/>`+"\n", ox+ml, oy+mt, pw, ph)
		for _, v := range []float64{0, ymax / 2, ymax} {
			fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">%.0f</text>`+"\n", ox+ml-4, py(v)+4, v)
		}
		step := tickStep(x1 - x0)
		for t := math.Ceil(x0/step) * step; t <= x1; t += step {
			if math.Abs(t) < 1e-9 {
				t = 0 // not "-0"
			}
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#eeeeee"/><text x="%.1f" y="%.0f" text-anchor="middle">%.0f</text>`+"\n",
				px(t), oy+mt, px(t), oy+mt+ph, px(t), oy+mt+ph+14, t)
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle" fill="#555555">seconds from the fault</text>`+"\n", ox+ml+pw/2, oy+mt+ph+28)
		for _, m := range marks {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#d55e00" stroke-dasharray="4 3"/>`+"\n", px(m.At), oy+mt, px(m.At), oy+mt+ph)
		}
		if len(marks) > 0 && len(marks) <= 4 {
			for _, m := range marks {
				x, anchor := px(m.At)+3, "start"
				if px(m.At) > ox+ml+pw*0.6 { // right half: label on the left of the line
					x, anchor = px(m.At)-3, "end"
				}
				fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" fill="#d55e00" font-size="10" text-anchor="%s">%s</text>`+"\n", x, oy+mt+11, anchor, html.EscapeString(m.Label))
			}
		}
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
				if x < x0 {
					continue
				}
				fmt.Fprintf(&pts, "%.1f,%.1f ", px(x), py(float64(v)))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%.1f" stroke-linejoin="round" points="%s"/>`+"\n", colorOf(c), width, bytes.TrimSpace(pts.Bytes()))
		}
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
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
