package bench

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/edgeheal/edgeheal/lab/ktrace"
)

// S2: re-plug the modem every ReplugEvery, Replugs times. Exposure per
// re-plug: the new link's RTM_NEWLINK to TX checksum offload seen off, and
// by the kernel's clock the request to create it to the fix (see
// ReplugExposure; a contender that never turns it off leaves it on:
// counted as unfixed). With labs side by side, one re-plug is timed at a
// time (replugTurn).
func (e *env) s2(ctx context.Context) error {
	if err := e.warmup(ctx); err != nil {
		return err
	}
	tr, err := ktrace.OpenNetdevEvents()
	if err != nil {
		e.res.Notes = append(e.res.Notes, "exposure not timed by the kernel: "+err.Error())
	} else {
		defer tr.Close()
	}
	ms := func(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Microsecond)) / 1000 }
	next := time.Now()
	for i := range e.o.Replugs {
		if err := takeReplugTurn(ctx); err != nil {
			return err
		}
		at := time.Now()
		if i == 0 {
			e.res.FaultAt = at
		}
		ex, err := ReplugExposure(ctx, e.l, min(5*time.Second, e.o.ReplugEvery/2), tr)
		<-replugTurn // give the turn back
		if err != nil {
			return fmt.Errorf("re-plug %d: %w", i+1, err)
		}
		e.mark(at, "re-plug")
		switch {
		case ex.Fixed.IsZero():
			e.res.ExposureUnfixed++
		case ex.TraceErr != nil:
			e.res.ExposureMs = append(e.res.ExposureMs, ms(ex.Duration()))
			e.res.Notes = append(e.res.Notes, fmt.Sprintf("re-plug %d: not timed by the kernel: %v", i+1, ex.TraceErr))
		case tr != nil && ex.FixedKernel == 0:
			e.res.ExposureMs = append(e.res.ExposureMs, ms(ex.Duration()))
			e.res.Notes = append(e.res.Notes, fmt.Sprintf("re-plug %d: no netdevice event of another process in the kernel's trace", i+1))
		default:
			e.res.ExposureMs = append(e.res.ExposureMs, ms(ex.Duration()))
			if tr != nil {
				e.res.ExposureKernelMs = append(e.res.ExposureKernelMs, ms(ex.KernelDuration()))
				if ex.Made != 0 {
					e.res.ExposureSplit = append(e.res.ExposureSplit, ExposureSplit{
						MakingMs: ms(ex.MakingDuration()), AgentMs: ms(ex.KernelDuration() - ex.MakingDuration())})
				}
			}
		}
		next = next.Add(e.o.ReplugEvery)
		if err := sleep(ctx, time.Until(next)); err != nil {
			return err
		}
	}
	return nil
}

// replugTurn lets one S2 lab at a time re-plug its modem and time the
// fix. Side by side, the labs' schedules fall within milliseconds of each
// other (each waits the same warm-up), and the bench is one process for
// every lab: another lab's re-plug (links made and moved under the RTNL
// lock) and its feature reads every millisecond would land in this lab's
// timing, as making or as the agent's fix. A node re-plugs one modem.
// A lab whose contender never fixes the link holds its turn for the whole
// limit (5 s), so a round of the four S2 labs can take 15 s: within the
// full and the short run's periods (60 and 20 s); with a shorter period a
// lab's re-plugs come late, never fewer.
var replugTurn = make(chan struct{}, 1)

// takeReplugTurn waits for the turn (or ctx); the taker gives it back
// with <-replugTurn.
func takeReplugTurn(ctx context.Context) error {
	select {
	case replugTurn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
