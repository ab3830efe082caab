package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/fleet"
	"github.com/edgeheal/edgeheal/fleet/source"
	"github.com/edgeheal/edgeheal/fleet/web"
	"github.com/edgeheal/edgeheal/lab"
)

// demoFleetAddr is where the demo serves the fleet view's page if the
// port is free (edgeheal-fleet's own default port); else any free port.
const demoFleetAddr = "127.0.0.1:9470"

// demoFleet is the cloud side's fleet view, in the demo's process: it
// reads the lab's broker from the cloud namespace and serves its page and
// /metrics on this machine's loopback, for a browser here.
type demoFleet struct {
	store  *fleet.Store
	url    string
	srv    *http.Server
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startDemoFleet(l *lab.Lab) (*demoFleet, error) {
	ln, err := net.Listen("tcp", demoFleetAddr)
	if err != nil {
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("fleet view: %w", err)
		}
	}
	f := &demoFleet{store: fleet.NewStore("edgeheal/v1"), url: "http://" + ln.Addr().String() + "/"}
	// The demo's page is on this machine's loopback for the person running
	// it, who says so by running the demo: no users to set up.
	f.srv = &http.Server{Handler: web.Handler(web.Options{Store: f.store, Version: "demo", Auth: fleet.Auth{Disabled: true}}), ReadHeaderTimeout: 5 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	m := fleet.MQTT{Share: ""}
	m.Broker, m.TopicPrefix, m.ClientID = fmt.Sprintf("tcp://127.0.0.1:%d", lab.BrokerPort), "edgeheal/v1", "edgeheal-fleet-"+l.Prefix()
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		var c net.Conn
		err := l.Do(lab.Cloud, func() error {
			var err error
			c, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			return err
		})
		return c, err
	}
	f.wg.Go(func() {
		_ = source.Run(ctx, source.Options{MQTT: m, Store: f.store, Dial: dial, DialTimeout: 2 * time.Second, MaxBackoff: time.Second})
	})
	f.wg.Go(func() {
		if err := f.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			f.store.SetConnected(false, err.Error())
		}
	})
	return f, nil
}

func (f *demoFleet) stop() {
	f.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = f.srv.Shutdown(ctx)
	f.wg.Wait()
}

// note says on the timeline what the fleet view saw by the end of an act:
// each node's state and since when, its open incidents, its last action
// and how many events it has sent.
func (d *demo) fleetNote(act int) {
	if d.fleet == nil {
		return
	}
	nodes, _ := d.fleet.store.List(fleet.Filter{Sort: fleet.SortName})
	if len(nodes) == 0 {
		d.say("fleet", "after act %d: no node seen yet (%s)", act, d.fleet.url)
		return
	}
	now := time.Now()
	for _, n := range nodes {
		det, _ := d.fleet.store.Detail(n.Name, now)
		var open []string
		for _, in := range det.Incidents {
			open = append(open, in.Kind+" "+in.Target)
		}
		if len(open) == 0 {
			open = []string{"none"}
		}
		last := "none"
		if n.LastAction != nil {
			last = fmt.Sprintf("%s %s (%s) at %s", n.LastAction.Action, n.LastAction.Target, n.LastAction.Result, d.at(n.LastAction.TS))
		}
		total := 0
		for _, c := range det.Counts {
			total += c
		}
		d.say("fleet", "after act %d: %s %s since %s, session %d; open incidents: %s; last action: %s; %d events in 24 h",
			act, n.Name, n.State, d.at(n.Since), n.Session, strings.Join(open, ", "), last, total)
	}
}
