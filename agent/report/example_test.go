package report_test

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/edgeheal/edgeheal/agent"
	"github.com/edgeheal/edgeheal/agent/report"
	"github.com/edgeheal/edgeheal/configs"
)

// exampleAgent stands in for the agent's supervisor, which satisfies
// report.AgentState without importing report.
type exampleAgent struct{}

func (exampleAgent) Checks() []agent.Check                     { return nil }
func (exampleAgent) Ready() (bool, string)                     { return true, "" }
func (exampleAgent) LastProgress() time.Time                   { return time.Now() }
func (exampleAgent) WorkloadReady(string) (bool, string, bool) { return false, "", false }

// Example shows how cmd/edgeheal wires reporting: the order of start and
// stop matters (stop the publisher before closing the outbox, so the
// `offline` goodbye is sent and no ack is written to a closed log).
func Example() {
	cfg := configs.Config{ /* from configs.Load */ }
	log := slog.New(report.LogHandler(os.Stderr, slog.LevelInfo, "edgeheal"))
	ctx := context.Background()

	ob, err := report.OpenOutbox(cfg.Report.StateDir, report.OutboxOptions{})
	if err != nil {
		log.Error("outbox", "err", err)
		return
	}
	defer ob.Close()
	var pub *report.Publisher
	if cfg.Report.MQTT.Broker != "" {
		sess, err := report.OpenSession(cfg.Report.StateDir)
		if err != nil {
			log.Error("session", "err", err)
			return
		}
		pub, err = report.NewPublisher(report.PublisherOptions{
			Config: cfg.Report.MQTT, Node: cfg.Node, Version: "1.2.3", Outbox: ob, Session: sess, Logger: log,
		})
		if err != nil {
			log.Error("mqtt", "err", err)
			return
		}
	}
	mopts := report.MetricsOptions{Version: "1.2.3", Outbox: ob}
	if pub != nil {
		mopts.MQTT = pub.Connected
	}
	metrics := report.NewMetrics(mopts)
	evidence, _ := report.OpenEvidenceStore(cfg.Report.StateDir, 0)
	emit := report.Emitter(ob, metrics, log) // the agent's agent.Emit
	_, _ = emit, evidence                    // handed to the agent

	state := exampleAgent{}
	sopts := report.ServerOptions{
		Listen: cfg.Report.HTTP.Listen, State: state, Metrics: metrics, Outbox: ob,
		Info: func() report.NodeInfo {
			return report.NodeInfo{Node: cfg.Node.Name, Site: cfg.Node.Site, Version: "1.2.3"}
		},
	}
	if pub != nil {
		sopts.MQTT = pub.Info
		pub.Start(ctx) // never blocks on the broker
	}
	srv := report.NewServer(sopts)
	if err := srv.Start(); err != nil {
		log.Error("http", "err", err)
	}
	notify, _ := report.NewNotifier(log)
	notify.Ready()
	go notify.RunWatchdog(ctx, state.LastProgress)

	// Each round: pub.SetChecks(checks); metrics.SetChecks(checks);
	// notify.Status(report.StatusLine(checks, ob.Depth(), pub.Connected(), true)).
	// On SIGHUP: notify.Reloading(); reload; metrics.ConfigLoaded(ok, time.Now());
	// pub.SetConfigRevision(rev); notify.Ready().

	// Shutdown.
	notify.Stopping()
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if pub != nil {
		pub.Stop(stopCtx) // publishes `offline`, then disconnects
	}
	srv.Shutdown(stopCtx)
}
