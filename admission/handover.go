package admission

import (
	"fmt"
	"time"
)

// ReleaseCalls is how many store calls a release may take: the release,
// and after a conflict (a renew whose response was lost moved the row) an
// authoritative read and a second release.
const ReleaseCalls = 3

// Handover is the planned-handover budget of one session, from the
// owner acting on the request to the new owner's activation:
// close + 3*C + (pb + C) + A.
//
// The old owner closes its transports (close), releases the row
// (release, ReleaseCalls store calls), the target standby takes it
// (standby_pickup: a watch tells it of the release at once; if the watch
// is down its next poll does, within one poll boundary, and the acquire's
// read and compare-and-swap share one renew_call_timeout) and activates
// (activation). The same figure bounds how long the old owner and the
// other standbys hold off after a handover before competing again, so a
// dead target strands no session for longer.
func Handover(t Timing, closeBound, activation time.Duration) (Budget, error) {
	var c calc
	pb, err := PollBoundary(t.AcquirePollInterval)
	if err != nil {
		return Budget{}, fmt.Errorf("%w (standby_pickup)", err)
	}
	terms := []Term{
		{Name: "close", Value: closeBound},
		keyed("release", c.mul("release", t.RenewCallTimeout, ReleaseCalls), lease("renew_call_timeout", ReleaseCalls, t.RenewCallTimeout)),
		keyed("standby_pickup", c.add("standby_pickup", pb, t.RenewCallTimeout), pollParts(t, pb, 1), lease("renew_call_timeout", 1, t.RenewCallTimeout)),
		{Name: "activation", Value: activation},
	}
	return total(&c, terms)
}

// HandoverOf is Handover for an admitted report.
func HandoverOf(r Report) (Budget, error) {
	return Handover(r.Timing, r.CloseBound, r.Activation)
}
