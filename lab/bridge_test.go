package lab

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/internal/bridgetest"
)

// bridgeKind is the LEASEBRIDGE_LAB_KINDS name of the bridge-route
// trials. They run after the rounds, on their own brokers and processes
// (the shared-broker topology, docs/bridged-data.md), against the lab's
// etcd.
const bridgeKind = "bridge"

// bridgeTrials are the trials with the queues sized per the docs; one
// negative control follows them.
const bridgeTrials = 3

// controlQueue is the negative control's max_queued_messages.
const controlQueue = 10

// bridgeRate is the messages a second in each direction.
const bridgeRate = 50

// bridgeRun is one bridge-route trial.
type bridgeRun struct {
	N       int
	Control bool
	R       bridgetest.Result
	Errs    []string
}

// bridgeSelected reports whether LEASEBRIDGE_LAB_KINDS selects the
// bridge trials (every kind when it is unset).
func bridgeSelected() bool {
	s := os.Getenv("LEASEBRIDGE_LAB_KINDS")
	return s == "" || slices.Contains(strings.Split(strings.ReplaceAll(s, " ", ""), ","), bridgeKind)
}

// runBridgeTrials kills a bridge route's owner mid-stream bridgeTrials
// times with the brokers' queues sized per the docs, which must lose
// nothing, and once with a queue of controlQueue, which must lose.
func (l *lab) runBridgeTrials() {
	for i := 1; i <= bridgeTrials+1; i++ {
		run := &bridgeRun{N: i, Control: i > bridgeTrials}
		o := bridgetest.Options{Etcd: strings.Join(l.etcd.Endpoints(), ", "), KeyPrefix: fmt.Sprintf("/lab-bridge-%d/", i),
			Rate: bridgeRate, Before: 2 * time.Second, After: 2 * time.Second}
		if run.Control {
			o.QueueLimit = controlQueue
		}
		// A subtest, so that each trial's brokers and processes end with it.
		l.t.Run(fmt.Sprintf("bridge-%d", i), func(t *testing.T) { run.R = bridgetest.Run(t, o) })
		switch {
		case !run.Control:
			run.Errs = run.R.Problems()
		case run.R.In.Lost == 0 || run.R.Out.Lost == 0:
			run.Errs = []string{fmt.Sprintf("negative control lost in %d, out %d: want loss in both directions", run.R.In.Lost, run.R.Out.Lost)}
		}
		for _, e := range run.Errs {
			l.t.Errorf("bridge trial %d: %s", i, e)
		}
		l.bridgeRuns = append(l.bridgeRuns, run)
		l.t.Logf("bridge trial %d: queue %d, takeover %s (budget %s), lost %d/%d, duplicates %d/%d",
			i, run.R.QueueLimit, fs(run.R.Takeover), fs(run.R.Budget), run.R.In.Lost, run.R.Out.Lost, run.R.In.Duplicates, run.R.Out.Duplicates)
	}
}

func (l *lab) mdBridge(w writef) {
	if len(l.bridgeRuns) == 0 {
		return
	}
	w("## Bridge route across owner death\n\n")
	w("A bridge route (`internal/bridgetest`): a remote and a local mosquitto shared by two\n")
	w("`leasebridge run` processes with the lab's timings and etcd, one `out` and one `in` mapping at\n")
	w("QoS 1, %d messages a second published in each direction with a sequence number in the\n", bridgeRate)
	w("payload. The owner is SIGKILLed mid-stream; after its successor serves, traffic goes on and\n")
	w("the trial waits for the last sequence number in each direction. *Lost* are sequence numbers\n")
	w("that never arrived, *duplicates* deliveries beyond the first. Both brokers'\n")
	w("`max_queued_messages` is sized as [bridged-data.md](bridged-data.md) says: message rate x the\n")
	w("admitted owner-death budget. The last row is the negative control, with a queue of %d: the\n", controlQueue)
	w("brokers drop what the dead owner's session cannot hold, and the trial sees it. *Forwarded*\n")
	w("is the successor's `leasebridge_bridge_forwarded_total`.\n\n")
	w("| # | max_queued_messages | sent in / out | lost in / out | duplicates in / out | forwarded by successor in / out | takeover | owner-death budget | result |\n")
	w("|---|---|---|---|---|---|---|---|---|\n")
	for _, b := range l.bridgeRuns {
		r := b.R
		queue := fmt.Sprintf("%d (%d/s x %s)", r.QueueLimit, bridgeRate, fs(r.Budget))
		if b.Control {
			queue = fmt.Sprintf("%d (negative control)", r.QueueLimit)
		}
		result := "ok"
		if len(b.Errs) > 0 {
			result = "FAIL: " + strings.Join(b.Errs, "; ")
		}
		w("| %d | %s | %d / %d | %d / %d | %d / %d | %g / %g | %s | %s | %s |\n", b.N, queue, r.In.Sent, r.Out.Sent, r.In.Lost, r.Out.Lost,
			r.In.Duplicates, r.Out.Duplicates, r.In.Forwarded, r.Out.Forwarded, fs(r.Takeover), fs(r.Budget), result)
	}
	w("\n")
}
