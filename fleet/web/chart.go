package web

import (
	"fmt"
	"html/template"
	"math"
	"strings"
	"time"

	"github.com/edgeheal/edgeheal/fleet"
)

// The charts are SVG written here, inside the page: readable without
// JavaScript and with nothing fetched from elsewhere. Every text in them
// is escaped.

const (
	chartW = 640
	chartH = 160
	padL   = 54
	padB   = 22
	padT   = 8
)

func esc(s string) string { return template.HTMLEscapeString(s) }

// availabilityChart draws the daily availability of days (one line,
// fleet or site) with a y axis from the lowest day to 100 %.
func availabilityChart(id, title string, days []fleet.DayPoint) template.HTML {
	lo := 1.0
	for _, d := range days {
		if d.Availability >= 0 {
			lo = min(lo, d.Availability)
		}
	}
	lo = math.Max(0, math.Floor((lo-0.0005)*1000)/1000) // a notch below the lowest, in 0.1 %
	if lo > 0.999 {
		lo = 0.999
	}
	var b strings.Builder
	openSVG(&b, id, title)
	plotW, plotH := float64(chartW-padL-8), float64(chartH-padT-padB)
	y := func(v float64) float64 { return padT + plotH*(1-(v-lo)/(1-lo)) }
	for _, v := range []float64{lo, (lo + 1) / 2, 1} {
		fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/><text class="axis" x="%d" y="%.1f" text-anchor="end">%s</text>`,
			padL, chartW-8, y(v), y(v), padL-4, y(v)+4, pct(v))
	}
	step := plotW / float64(max(len(days)-1, 1))
	var pts []string
	for i, d := range days {
		x := padL + step*float64(i)
		if d.Availability < 0 {
			continue
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y(d.Availability)))
		fmt.Fprintf(&b, `<circle class="pt" cx="%.1f" cy="%.1f" r="2.5"><title>%s: %s available, %s dark or degraded, %d incidents</title></circle>`,
			x, y(d.Availability), d.Day.Format("2006-01-02"), pct(d.Availability), dur(float64(d.DarkSeconds+d.DegradedSeconds)), d.Incidents)
	}
	if len(pts) > 0 {
		fmt.Fprintf(&b, `<polyline class="line" points="%s"/>`, strings.Join(pts, " "))
	} else {
		fmt.Fprintf(&b, `<text class="axis" x="%d" y="%d">no history yet: the nodes have published none</text>`, padL+10, chartH/2)
	}
	dayLabels(&b, days, step)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// barChart draws one bar per value, with its label under every nth.
func barChart(id, title string, values []float64, labels, tips []string, every int) template.HTML {
	var b strings.Builder
	openSVG(&b, id, title)
	top := 0.0
	for _, v := range values {
		top = max(top, v)
	}
	if top == 0 {
		top = 1
	}
	plotW, plotH := float64(chartW-padL-8), float64(chartH-padT-padB)
	fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%d" y1="%d" y2="%d"/><text class="axis" x="%d" y="%d" text-anchor="end">%s</text>`,
		padL, chartW-8, padT, padT, padL-4, padT+4, esc(num(top)))
	slot := plotW / float64(max(len(values), 1))
	for i, v := range values {
		h := plotH * v / top
		x := padL + slot*float64(i)
		fmt.Fprintf(&b, `<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s</title></rect>`,
			x+1, padT+plotH-h, math.Max(slot-2, 1), h, esc(tips[i]))
		if every > 0 && i%every == 0 {
			fmt.Fprintf(&b, `<text class="axis" x="%.1f" y="%d">%s</text>`, x+1, chartH-6, esc(labels[i]))
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func openSVG(b *strings.Builder, id, title string) {
	fmt.Fprintf(b, `<svg class="chart" id="%s" role="img" viewBox="0 0 %d %d" width="%d" height="%d"><title>%s</title>`,
		esc(id), chartW, chartH, chartW, chartH, esc(title))
}

func dayLabels(b *strings.Builder, days []fleet.DayPoint, step float64) {
	for i, d := range days {
		if (len(days)-1-i)%7 == 0 {
			fmt.Fprintf(b, `<text class="axis" x="%.1f" y="%d" text-anchor="%s">%s</text>`, padL+step*float64(i), chartH-6, anchor(i, len(days)), d.Day.Format("Jan 2"))
		}
	}
}

// incidentsChart is the fleet's incidents per day.
func incidentsChart(days []fleet.DayPoint) template.HTML {
	values, labels, tips := make([]float64, len(days)), make([]string, len(days)), make([]string, len(days))
	for i, d := range days {
		values[i], labels[i] = float64(d.Incidents), d.Day.Format("Jan 2")
		tips[i] = fmt.Sprintf("%s: %d incidents", d.Day.Format("2006-01-02"), d.Incidents)
	}
	return barChart("incidents-chart", "incidents per day, last 30 days", values, labels, tips, 7)
}

// outageChart is the outages by duration.
func outageChart(buckets []fleet.OutageBucket) template.HTML {
	values, labels, tips := make([]float64, len(buckets)), make([]string, len(buckets)), make([]string, len(buckets))
	for i, o := range buckets {
		values[i], labels[i] = float64(o.Count), o.Label
		tips[i] = fmt.Sprintf("%s: %d outages", o.Label, o.Count)
	}
	return barChart("outage-chart", "outages by duration, last 30 days", values, labels, tips, 1)
}

// sparkline is a site's 30 days in a row of the rollup.
func sparkline(days []fleet.DayPoint) template.HTML {
	const w, h = 90, 18
	var pts []string
	step := float64(w) / float64(max(len(days)-1, 1))
	for i, d := range days {
		if d.Availability >= 0 {
			v := math.Max(d.Availability, 0.9) // 90 % and below at the bottom
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", step*float64(i), 1+float64(h-2)*(1-(v-0.9)/0.1)))
		}
	}
	if len(pts) == 0 {
		return ""
	}
	return template.HTML(fmt.Sprintf(`<svg class="spark" viewBox="0 0 %d %d" width="%d" height="%d" aria-hidden="true"><polyline points="%s"/></svg>`,
		w, h, w, h, strings.Join(pts, " ")))
}

// timeline draws a node's incidents from its history on a time axis, one
// lane per target, each with its repairs and how it ended in its title.
func timeline(inc []histView, from, to time.Time) template.HTML {
	var lanes []string
	lane := map[string]int{}
	for _, in := range inc {
		if _, ok := lane[in.Kind+" "+in.Target]; !ok {
			lane[in.Kind+" "+in.Target] = len(lanes)
			lanes = append(lanes, in.Kind+" "+in.Target)
		}
	}
	const laneH, left = 22, 170
	height := padT + laneH*max(len(lanes), 1) + padB
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" id="timeline" role="img" viewBox="0 0 %d %d" width="%d" height="%d"><title>incidents on a timeline</title>`,
		chartW+200, height, chartW+200, height)
	span := to.Sub(from).Seconds()
	x := func(t time.Time) float64 {
		return left + float64(chartW+200-left-8)*math.Max(0, t.Sub(from).Seconds())/span
	}
	for i, l := range lanes {
		fmt.Fprintf(&b, `<text class="axis" x="4" y="%d">%s</text><line class="grid" x1="%d" x2="%d" y1="%d" y2="%d"/>`,
			padT+laneH*i+15, esc(truncate(l, 26)), left, chartW+192, padT+laneH*i+laneH, padT+laneH*i+laneH)
	}
	for _, in := range inc {
		x0, x1 := x(in.Start), x(in.End)
		class := "healed"
		switch {
		case in.GaveUp:
			class = "gaveup"
		case in.Open:
			class = "open"
		}
		fmt.Fprintf(&b, `<rect class="inc %s" x="%.1f" y="%d" width="%.1f" height="14"><title>%s</title></rect>`,
			class, x0, padT+laneH*lane[in.Kind+" "+in.Target]+3, math.Max(x1-x0, 3), esc(in.Tip))
	}
	for i := 0; i <= 4; i++ {
		t := from.Add(time.Duration(float64(to.Sub(from)) * float64(i) / 4))
		fmt.Fprintf(&b, `<text class="axis" x="%.1f" y="%d" text-anchor="%s">%s</text>`, x(t), height-6, anchor(i, 5), t.UTC().Format("Jan 2 15:04"))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// anchor keeps the first and last labels of an axis inside the chart.
func anchor(i, n int) string {
	switch i {
	case 0:
		return "start"
	case n - 1:
		return "end"
	}
	return "middle"
}

func truncate(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// pct is a share as a percentage a person reads: 99.97 %.
func pct(v float64) string {
	if v < 0 {
		return "–"
	}
	switch {
	case v >= 0.99995:
		return "100 %"
	case v >= 0.99:
		return fmt.Sprintf("%.2f %%", 100*v)
	}
	return fmt.Sprintf("%.1f %%", 100*v)
}

// dur is seconds as a person reads them: 45 s, 12 min, 3.5 h, 2.1 d.
func dur(s float64) string {
	switch {
	case s < 60:
		return fmt.Sprintf("%.0f s", s)
	case s < 3600:
		return fmt.Sprintf("%.1f min", s/60)
	case s < 86400:
		return fmt.Sprintf("%.1f h", s/3600)
	}
	return fmt.Sprintf("%.1f d", s/86400)
}

func num(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}
