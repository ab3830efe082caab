package main

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"github.com/edgeheal/edgeheal/agent"
	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/evidence"
	"github.com/edgeheal/edgeheal/agent/history"
	"github.com/edgeheal/edgeheal/agent/httpapi"
	"github.com/edgeheal/edgeheal/agent/metrics"
	"github.com/edgeheal/edgeheal/agent/mqtt"
	"github.com/edgeheal/edgeheal/agent/outbox"
	"github.com/edgeheal/edgeheal/agent/recorder"
	"github.com/edgeheal/edgeheal/broker"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/localapi"
	"github.com/edgeheal/edgeheal/wire"
)

// reporting is everything that tells the world: the outbox and its
// publisher, evidence, metrics, the HTTP endpoints and systemd. It lives
// for the whole process; a reload does not rebuild it. Nothing here can
// stop the agent from starting: a state directory that cannot be written,
// a missing CA or password file, a taken port are states of the
// components, reported and retried by the agent's supervisor.
type reporting struct {
	outbox    *outbox.Outbox
	evidence  *evidence.Store // nil: no bundles
	metrics   *metrics.Metrics
	recorder  *recorder.Recorder
	publisher *mqtt.Publisher // nil: report.mqtt.broker is empty
	history   *history.Book
	server    *httpapi.Server // metrics and health; nil: report.http.listen is empty
	local     *httpapi.Server // the local API; nil: report.http.socket is empty
	notifier  *notifier
	log       *slog.Logger
}

func newReporting(cfg *configs.Config, log *slog.Logger, links mqtt.LinkWatcher) *reporting {
	r := &reporting{log: log}
	warnAboutSecrets(cfg, log)
	var err error
	r.outbox, err = outbox.OpenOrMemory(cfg.Report.StateDir, outbox.Options{})
	if err != nil {
		panic(err) // only bad options fail, and these are constants
	}
	if h := r.outbox.Health(); h.Degraded {
		log.Error("the outbox keeps events in memory until report.state_dir can be written", "state_dir", cfg.Report.StateDir, "detail", h.Detail)
	}
	if n := r.outbox.Truncated(); n > 0 {
		log.Warn("outbox: cut a torn write at its tail (the agent was killed while writing)", "bytes", n)
	}
	if r.evidence, err = evidence.Open(cfg.Report.StateDir, 0); err != nil {
		log.Warn("incident evidence will not be kept", "error", err)
		r.evidence = nil
	}
	// A sweep comes every interval; a longer gap since the last one (a
	// stop, a suspend) is not counted as observed.
	maxGap := max(3*cfg.Interval.D(), 10*time.Second)
	if r.history, err = history.Open(cfg.Report.StateDir, cfg.Node.Name, cfg.Node.Site, maxGap, time.Now()); err != nil {
		log.Error("history", "error", err)
	}
	if cfg.Report.MQTT.Broker != "" {
		r.publisher, err = mqtt.NewPublisher(mqtt.Options{
			Config:  cfg.Report.MQTT,
			Node:    cfg.Node,
			Version: version,
			Outbox:  r.outbox,
			Session: mqtt.OpenSession(cfg.Report.StateDir, nil),
			Logger:  log.With("component", "mqtt"),
			Links:   links,
			History: r.history,
			Emit:    func(e core.Event) { r.recorder.Emit(e) }, // the recorder is made below, before anything runs
		})
		if err != nil {
			panic(err) // configs validated the broker URL and the node name
		}
		r.publisher.SetConfigRevision(cfg.Revision)
	}
	mopts := metrics.Options{Version: version, Outbox: r.outbox, History: r.historyTotals}
	if r.publisher != nil {
		mopts.MQTT = r.publisher.Connected
	}
	r.metrics = metrics.New(mopts)
	ro := recorder.Options{Store: r.outbox, OnEvent: r.onEvent, Log: log.With("component", "events")}
	if r.evidence != nil {
		ro.Evidence = r.evidence
	}
	r.recorder = recorder.New(ro)
	// The outbox's own events (its disk and damage incidents, drop
	// reports) are counted and logged like every other event.
	r.outbox.Observe(r.recorder.Observed)
	if r.notifier, err = newNotifier(log); err != nil {
		log.Warn("systemd watchdog off", "error", err)
	}
	return r
}

// warnAboutSecrets logs, at every start, a password accepted over a plain
// transport and every key or password file that group or others can read.
func warnAboutSecrets(cfg *configs.Config, log *slog.Logger) {
	if w := cfg.Report.MQTT.PlaintextWarning(); w != "" {
		log.Warn(w)
	}
	for _, f := range cfg.SecretFiles() {
		if err := broker.CheckSecretFile(f.Path); err != nil {
			log.Warn("a secret file is readable by others", "key", f.Key, "error", err)
		}
	}
}

// historyTotals are the history's counters for the metrics.
func (r *reporting) historyTotals() []metrics.TargetTotal {
	ts := r.history.Totals()
	out := make([]metrics.TargetTotal, len(ts))
	for i, t := range ts {
		out[i] = metrics.TargetTotal{Kind: t.Kind, Target: t.Target, DarkSeconds: t.DarkSeconds, DegradedSeconds: t.DegradedSecs, Incidents: t.Incidents}
	}
	return out
}

// onEvent is every event's first stop: the metrics and the history count
// it, an event that says the path may be back makes a disconnected
// publisher check the broker at once, and one that says the path became
// smaller than its open connection was made for makes it connect again.
func (r *reporting) onEvent(e core.Event) {
	r.metrics.ObserveEvent(e)
	r.history.Event(e)
	if r.publisher != nil && mqtt.SuggestsThePathIsBack(e) {
		r.publisher.TryNow()
	}
	if r.publisher != nil && mqtt.OutgrowsTheConnection(e) {
		r.publisher.Refresh(e.Summary)
	}
}

// wire hands the reporting components to the agent and points the HTTP
// API and the evidence at it.
func (r *reporting) wire(a *agent.Agent) {
	cfg := a.Config()
	// The recorder first: it drains the events every other part emits.
	comps := []core.Component{r.recorder, r.outbox, &history.Keeper{Book: r.history, Dir: cfg.Report.StateDir, Log: r.log.With("component", "history")}}
	if r.publisher != nil {
		comps = append(comps, r.publisher)
	}
	if cfg.Report.HTTP.Listen != "" || cfg.Report.HTTP.Socket != "" {
		opts := httpapi.ServerOptions{
			Listen:  cfg.Report.HTTP.Listen,
			Socket:  cfg.Report.HTTP.Socket,
			State:   a,
			Metrics: r.metrics.Handler(),
			Outbox:  r.outbox,
			Info: func() wire.NodeInfo {
				c := a.Config()
				return wire.NodeInfo{Node: c.Node.Name, Site: c.Node.Site, Version: version, ConfigRevision: c.Revision}
			},
			Logger: r.log.With("component", "http"),
			Stale:  agent.LivenessLimit(cfg),
		}
		if r.publisher != nil {
			opts.MQTT = r.publisher.Info
		}
		// Two components: a port another process holds costs metrics and
		// health, never the local API, and the other way round.
		if opts.Listen != "" {
			r.server = httpapi.NewServer(opts)
			comps = append(comps, r.server)
		}
		if opts.Socket != "" {
			r.local = httpapi.NewLocal(opts)
			r.local.Handle("GET "+localapi.HistoryPath, http.HandlerFunc(r.serveHistory))
			comps = append(comps, r.local)
		}
	}
	a.Report(comps...)
	r.recorder.SetCollect(a.Evidence)
}

// serveHistory answers /v1/history: the whole history the node keeps.
func (r *reporting) serveHistory(w http.ResponseWriter, req *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if err := json.NewEncoder(w).Encode(r.history.Snapshot(time.Now(), true)); err != nil {
		r.log.Debug("writing /v1/history", "error", err)
	}
}

// onRound feeds every sweep's checks to the metrics, the MQTT status and
// systemd's STATUS=.
func (r *reporting) onRound(checks []wire.Check) {
	r.metrics.SetChecks(checks)
	r.history.Observe(checks, time.Now())
	mqttOn := r.publisher != nil
	if mqttOn {
		r.publisher.SetChecks(checks)
	}
	_ = r.notifier.Status(statusLine(checks, r.outbox.Depth(), mqttOn && r.publisher.Connected(), mqttOn))
}

func (r *reporting) close() {
	if err := r.outbox.Close(); err != nil {
		r.log.Warn("closing the outbox", "error", err)
	}
}
