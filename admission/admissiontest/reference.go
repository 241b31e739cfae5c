// Package admissiontest is an independent reference for the budget formulas
// of docs/failover-budget.md, written with arbitrary-precision integers so it can neither
// overflow nor share a bug with the checked int64 arithmetic it verifies.
package admissiontest

import (
	"math/big"
	"time"
)

// Timing are the reference inputs in nanoseconds; HB and ET are the
// lease store members' heartbeat_interval and election_timeout, used only
// by the fleet-store formulas.
type Timing struct {
	L, R, J, C, P, G, A, S, B int64
	HB, ET                    int64
}

func bi(v int64) *big.Int { return big.NewInt(v) }

func ceilDiv(a, b *big.Int) *big.Int {
	q, m := new(big.Int).QuoRem(a, b, new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, bi(1))
	}
	return q
}

func maxBig(a, b *big.Int) *big.Int {
	if a.Cmp(b) >= 0 {
		return a
	}
	return b
}

// PollBoundary is max(1ms, ceil(5*P/4)).
func PollBoundary(p int64) *big.Int {
	return maxBig(bi(int64(time.Millisecond)), ceilDiv(new(big.Int).Mul(bi(5), bi(p)), bi(4)))
}

// MinJitteredPoll is max(1ms, P - (P/2)/2) with Go's truncating division.
func MinJitteredPoll(p int64) *big.Int {
	return maxBig(bi(int64(time.Millisecond)), bi(p-(p/2)/2))
}

// OwnerDeath is L + 2*pb + (1 + ceil(L/mjp))*C + A + S.
func OwnerDeath(t Timing) *big.Int {
	pb := PollBoundary(t.P)
	rounds := new(big.Int).Add(bi(1), ceilDiv(bi(t.L), MinJitteredPoll(t.P)))
	sum := new(big.Int).Set(bi(t.L))
	sum.Add(sum, new(big.Int).Mul(bi(2), pb))
	sum.Add(sum, new(big.Int).Mul(rounds, bi(t.C)))
	sum.Add(sum, bi(t.A))
	sum.Add(sum, bi(t.S))
	return sum
}

// TakeoverDeferral is 2*pb + 3*C.
func TakeoverDeferral(t Timing) *big.Int {
	sum := new(big.Int).Mul(bi(2), PollBoundary(t.P))
	return sum.Add(sum, new(big.Int).Mul(bi(3), bi(t.C)))
}

// OwnerDeathSpread is OwnerDeath + TakeoverDeferral.
func OwnerDeathSpread(t Timing) *big.Int {
	return new(big.Int).Add(OwnerDeath(t), TakeoverDeferral(t))
}

// BrokerPath is B + R + J/2 + 2*min(5s, G) + G + 2*pb + 4*C + A + S.
func BrokerPath(t Timing) *big.Int {
	sum := new(big.Int)
	for _, v := range []int64{t.B, t.R, t.J / 2, 2 * min(int64(5*time.Second), t.G), t.G, t.A, t.S} {
		sum.Add(sum, bi(v))
	}
	sum.Add(sum, new(big.Int).Mul(bi(2), PollBoundary(t.P)))
	sum.Add(sum, new(big.Int).Mul(bi(4), bi(t.C)))
	return sum
}

// DevicePath is D + R + J/2 + 2*min(5s, G) + 2*pb + 4*C + A + S, with D
// in the field B.
func DevicePath(t Timing) *big.Int {
	sum := new(big.Int)
	for _, v := range []int64{t.B, t.R, t.J / 2, 2 * min(int64(5*time.Second), t.G), t.A, t.S} {
		sum.Add(sum, bi(v))
	}
	sum.Add(sum, new(big.Int).Mul(bi(2), PollBoundary(t.P)))
	sum.Add(sum, new(big.Int).Mul(bi(4), bi(t.C)))
	return sum
}

// StoreElection is E = 4*ET + 3*HB + 500ms.
func StoreElection(t Timing) *big.Int {
	e := new(big.Int).Mul(bi(4), bi(t.ET))
	e.Add(e, new(big.Int).Mul(bi(3), bi(t.HB)))
	return e.Add(e, bi(int64(500*time.Millisecond)))
}

// StoreRecovery is max(0, E + 3*C - (1 + ceil(L/mjp))*C).
func StoreRecovery(t Timing) *big.Int {
	need := new(big.Int).Add(StoreElection(t), new(big.Int).Mul(bi(3), bi(t.C)))
	rounds := new(big.Int).Add(bi(1), ceilDiv(bi(t.L), MinJitteredPoll(t.P)))
	need.Sub(need, new(big.Int).Mul(rounds, bi(t.C)))
	return maxBig(need, bi(0))
}

// OwnerDeathOnStore is OwnerDeath + StoreRecovery: the owner-death budget
// of a fleet that runs its lease store itself.
func OwnerDeathOnStore(t Timing) *big.Int {
	return new(big.Int).Add(OwnerDeath(t), StoreRecovery(t))
}

// ElectionRideThrough is E + 4*C + 2*R + J.
func ElectionRideThrough(t Timing) *big.Int {
	d := new(big.Int).Add(StoreElection(t), new(big.Int).Mul(bi(4), bi(t.C)))
	d.Add(d, new(big.Int).Mul(bi(2), bi(t.R)))
	return d.Add(d, bi(t.J))
}

// Fits reports whether v is representable as int64 nanoseconds.
func Fits(v *big.Int) bool { return v.IsInt64() }
