package bench

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/internal/testsupport"

	"github.com/edgeheal/edgeheal/lab"
)

// One short S1 for the contender without an agent and for edgeheal, side
// by side on their own labs: the harness starts and stops everything,
// measures, and edgeheal ends the outage that the other never does.
// About 20 s.
func TestLabBenchS1(t *testing.T) {
	testsupport.RequireRoot(t, "the lab: network namespaces, TUN, AF_PACKET")
	bin := filepath.Join(t.TempDir(), "edgeheal")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/edgeheal/edgeheal/cmd/edgeheal").CombinedOutput(); err != nil {
		t.Fatalf("building edgeheal: %v\n%s", err, out)
	}
	o := ShortOptions()
	o.Binary, o.WorkDir, o.Parallel = bin, t.TempDir(), true
	o.Scenarios, o.Contenders = []string{S1}, []string{None, Edgeheal}
	o.S1Window, o.Footprint = 10*time.Second, 0
	o.Logf = t.Logf
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	none, ok1 := rep.Find(S1, None)
	eh, ok2 := rep.Find(S1, Edgeheal)
	if !ok1 || !ok2 {
		t.Fatalf("results missing: %+v", rep.Results)
	}
	for _, r := range []Result{none, eh} {
		if r.Error != "" {
			t.Errorf("%s: %s", r.Contender, r.Error)
		}
		if len(r.Series) < 5 {
			t.Errorf("%s: series of %d seconds, want about 9", r.Contender, len(r.Series))
		}
	}
	if !none.OutageOngoing || none.LossPct != 100 {
		t.Errorf("without an agent: outage ongoing %v, loss %v %%; want a dark tunnel throughout", none.OutageOngoing, none.LossPct)
	}
	if eh.OutageOngoing || eh.RecoverSeconds == nil || eh.DetectSeconds == nil {
		t.Errorf("edgeheal: outage ongoing %v, recover %v, detect %v; want the tunnel back", eh.OutageOngoing, eh.RecoverSeconds, eh.DetectSeconds)
	}
	if len(eh.Actions) == 0 || eh.Actions[0].What != "offload-off" {
		t.Errorf("edgeheal's first action: %+v, want offload-off", eh.Actions)
	}
	if len(rep.Goals) == 0 {
		t.Error("no goal checked")
	}
	for _, r := range rep.Results {
		if left := lab.Leftovers(r.Lab, ""); r.Lab == "" || len(left) > 0 {
			t.Errorf("lab %q of %s: left behind %v", r.Lab, r.Contender, left)
		}
	}
	if _, err := rep.Write(t.TempDir()); err != nil {
		t.Error(err)
	}
}
