package web

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"

	"github.com/edgeheal/edgeheal/fleet"
)

type stateCount struct {
	Name  string
	Count int
}

type choice struct{ Value, Label string }

// siteOptions is how many sites the filter lists in a menu; with more, it
// is a text field (the first screen stays small at any size).
const siteOptions = 50

// sitesShown is how many sites the console's rollup shows; /sites has all.
const sitesShown = 15

var (
	sortChoices = []choice{{fleet.SortChanged, "last change first"}, {fleet.SortName, "name"}, {fleet.SortSite, "site"},
		{fleet.SortSeen, "silent longest first"}, {fleet.SortAvailability, "least available first"}}
	silentChoices = []choice{{"", "any"}, {"15m", "15 min"}, {"1h", "1 hour"}, {"24h", "1 day"}}
)

func (s *server) fleetPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f, err := parseFilter(q, DefaultLimit)
	bad := ""
	if err != nil {
		bad, f = err.Error(), fleet.Filter{Sort: fleet.SortChanged, Limit: DefaultLimit}
	}
	now := s.opts.Now()
	h := s.opts.Store.Health(now)
	sum := s.opts.Store.Summary(now)
	nodes, matched := s.opts.Store.ListAt(f, now)
	var states []stateCount
	for _, st := range fleet.States {
		if sum.ByState[st] > 0 || st != fleet.StateUnknown {
			states = append(states, stateCount{st, sum.ByState[st]})
		}
	}
	glance, chartTitle := sum.Fleet.Days, "fleet availability per day, last 30 days"
	if f.Site != "" {
		for _, site := range sum.Sites {
			if site.Name == f.Site {
				glance, chartTitle = site.Days, "availability of site "+f.Site+" per day, last 30 days"
			}
		}
	}
	var siteNames []string
	if len(sum.Sites) <= siteOptions {
		siteNames = s.opts.Store.Sites()
	}
	s.render(w, s.fleet, map[string]any{
		"Title": "edgeheal fleet", "Health": h, "Summary": sum, "States": states, "AllStates": fleet.States,
		"SiteNames": siteNames, "Sites": sum.Sites[:min(len(sum.Sites), sitesShown)], "AllSites": len(sum.Sites),
		"Filter": f, "BadFilter": bad, "Nodes": nodes, "Matched": matched, "Sorts": sortChoices, "Silents": silentChoices,
		"Silent": q.Get("silent"), "Query": filterQuery(f, q.Get("silent")),
		"Prev": pageLink(f, q, f.Offset-f.Limit), "Next": pageLink(f, q, f.Offset+f.Limit), "HasNext": f.Offset+len(nodes) < matched,
		"From": min(f.Offset+1, matched), "To": f.Offset + len(nodes),
		"AvailabilityChart": availabilityChart("availability-chart", chartTitle, glance),
		"IncidentsChart":    incidentsChart(sum.Fleet.Days), "OutageChart": outageChart(sum.Fleet.Outages),
		"Spark": sparkline, "TriageMore": triageMore(sum.Triage),
	})
}

// filterQuery is the filter as a query string, for the CSV link.
func filterQuery(f fleet.Filter, silent string) string {
	v := url.Values{}
	for k, s := range map[string]string{"site": f.Site, "state": f.State, "node": f.Name, "silent": silent} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if f.Sort != fleet.SortChanged {
		v.Set("sort", f.Sort)
	}
	if f.GaveUp {
		v.Set("gave_up", "1")
	}
	if f.Incident {
		v.Set("incident", "1")
	}
	return v.Encode()
}

func pageLink(f fleet.Filter, q url.Values, offset int) string {
	v := url.Values{}
	for k, vs := range q {
		v[k] = vs
	}
	v.Set("offset", strconv.Itoa(max(offset, 0)))
	return "/?" + v.Encode()
}

// more is a line under the triage: how many of a kind were not listed.
type more struct {
	Count int
	What  string
	Href  string
}

func triageMore(t fleet.Triage) []more {
	var out []more
	links := map[string][2]string{
		fleet.TriageGaveUp: {"where edgeheal gave up", "/?gave_up=1"}, fleet.TriageIncident: {"degraded with an open incident", "/?state=degraded&incident=1"},
		fleet.TriageSiteLost: {"sites lost", "/sites"}, fleet.TriageLost: {"lost", "/?state=lost"}, fleet.TriageSilent: {"silent", "/?silent=15m&sort=seen"},
	}
	for _, k := range fleet.TriageKinds {
		if n := t.Counts[k] - fleet.TriageLimit; n > 0 {
			out = append(out, more{n, links[k][0], links[k][1]})
		}
	}
	return out
}

func (s *server) sitesPage(w http.ResponseWriter, _ *http.Request) {
	now := s.opts.Now()
	sum := s.opts.Store.Summary(now)
	s.render(w, s.sites, map[string]any{"Title": "edgeheal sites", "Health": s.opts.Store.Health(now), "Summary": sum,
		"Sites": sum.Sites, "Spark": sparkline})
}

// histView is one incident of a node's history as its page shows it.
type histView struct {
	Kind, Target, Diagnosis, HealedBy, Tip string
	Repairs                                []string
	Start, End                             time.Time
	Duration                               float64
	Open, GaveUp                           bool
}

func (s *server) nodePage(w http.ResponseWriter, r *http.Request) {
	now := s.opts.Now()
	d, ok := s.opts.Store.Detail(r.PathValue("name"), now)
	if !ok {
		http.Error(w, "no node "+r.PathValue("name")+" in the fleet view", http.StatusNotFound)
		return
	}
	data := map[string]any{"Title": "edgeheal node " + d.Name, "Health": s.opts.Store.Health(now), "Node": d}
	if h := d.History; h != nil {
		var inc []histView
		from := now.Add(-48 * time.Hour)
		for _, in := range h.Incidents {
			v := histView{Kind: in.Kind, Target: in.Target, Diagnosis: in.Diagnosis, HealedBy: in.HealedBy, Repairs: in.Repairs,
				Start: in.Start, End: in.End, Duration: in.DurationSeconds, Open: in.End.IsZero(), GaveUp: in.GaveUp}
			if v.Open {
				v.End = now
			}
			v.Tip = fmt.Sprintf("%s %s from %s for %s: %s; tried %v; %s", in.Kind, in.Target, utc(in.Start), dur(in.DurationSeconds),
				in.Diagnosis, in.Repairs, ending(v))
			from = minTime(from, in.Start)
			inc = append(inc, v)
		}
		sort.Slice(inc, func(i, j int) bool { return inc[i].Start.Before(inc[j].Start) })
		days := make([]fleet.DayPoint, len(h.Days.Healthy))
		for i := range days {
			dp := fleet.DayPoint{Day: h.Days.Start.Add(time.Duration(i) * 24 * time.Hour), HealthySeconds: uint64(h.Days.Healthy[i]),
				DarkSeconds: uint64(h.Days.Dark[i]), DegradedSeconds: uint64(h.Days.Degraded[i]), Incidents: uint64(h.Days.Incidents[i]), Availability: -1}
			if obs := dp.HealthySeconds + dp.DarkSeconds + dp.DegradedSeconds; obs > 0 {
				dp.Availability = float64(dp.HealthySeconds) / float64(obs)
			}
			days[i] = dp
		}
		data["HistIncidents"] = inc
		data["Timeline"] = timeline(inc, from, now)
		data["DaysChart"] = availabilityChart("node-availability", "availability of "+d.Name+" per day", days)
	}
	s.render(w, s.node, data)
}

func ending(v histView) string {
	switch {
	case v.GaveUp:
		return "edgeheal gave up"
	case v.Open:
		return "still open"
	case v.HealedBy == "":
		return "recovered by itself"
	}
	return "healed by " + v.HealedBy
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
