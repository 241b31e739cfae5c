package admission_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/admission/admissiontest"
)

var mqttDefault = func() time.Duration {
	d, err := admission.MQTTActivationBound(30*time.Second, 30*time.Second, 30*time.Second)
	if err != nil {
		panic(err)
	}
	return d
}()

func TestMQTTActivationBoundAtDefaultsIs240s(t *testing.T) {
	if mqttDefault != 240*time.Second {
		t.Fatalf("MQTT activation at 30s defaults = %s, want 240s", mqttDefault)
	}
	if _, err := admission.MQTTActivationBound(math.MaxInt64/2, 1, 1); !errors.Is(err, admission.ErrOverflow) {
		t.Fatalf("huge connect_timeout: err = %v, want ErrOverflow", err)
	}
}

// The seed's table: standalone 1097.5s / B + 382.5s, clustered 336.5s /
// B + 290s, derived standalone renew_interval 75.56s.
func TestProfilesGiveTheSeedFigures(t *testing.T) {
	for _, tc := range []struct {
		mode        admission.Mode
		ownerDeath  string
		brokerBase  string
		renew       string
		renewOrigin admission.Origin
	}{
		{admission.Standalone, "1097.5s", "382.5s", "75.56s", admission.Derived},
		{admission.Clustered, "336.5s", "290s", "10s", admission.Profile},
	} {
		tm, err := admission.ResolveTiming(tc.mode, admission.Overrides{})
		if err != nil {
			t.Fatal(err)
		}
		od, err := admission.OwnerDeath(tm, mqttDefault, 0)
		if err != nil {
			t.Fatal(err)
		}
		bp, err := admission.BrokerPath(tm, 0, mqttDefault, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := admission.FormatSeconds(od.Total); got != tc.ownerDeath {
			t.Errorf("%s owner death = %s, want %s", tc.mode, got, tc.ownerDeath)
		}
		if got := admission.FormatSeconds(bp.Total); got != tc.brokerBase {
			t.Errorf("%s broker path = B + %s, want B + %s", tc.mode, got, tc.brokerBase)
		}
		if got := admission.FormatSecondsShort(tm.RenewInterval); got != tc.renew || tm.Origins["renew_interval"] != tc.renewOrigin {
			t.Errorf("%s renew_interval = %s (%s), want %s (%s)", tc.mode, got, tm.Origins["renew_interval"], tc.renew, tc.renewOrigin)
		}
		// Four renewal rounds at their longest fill lease_ttl exactly.
		if round := tm.RenewInterval + tm.RenewJitter/2 + tm.RenewCallTimeout; tc.mode == admission.Standalone && 4*round != tm.LeaseTTL {
			t.Errorf("standalone: 4 * (R + J/2 + C) = %s, want lease_ttl %s", 4*round, tm.LeaseTTL)
		}
		if tm.MaxRenewFails != 3 {
			t.Errorf("%s max_renew_fails = %d, want 3", tc.mode, tm.MaxRenewFails)
		}
	}
}

func TestResolveTimingDerivations(t *testing.T) {
	d := func(v time.Duration) *time.Duration { return &v }
	// lease_ttl pinned: renew cadence derived from it.
	tm, err := admission.ResolveTiming(admission.Clustered, admission.Overrides{LeaseTTL: d(60 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if round := tm.RenewInterval + tm.RenewJitter/2 + tm.RenewCallTimeout; 4*round != 60*time.Second {
		t.Errorf("pinned lease_ttl 60s: 4 rounds = %s", 4*round)
	}
	// renew_interval pinned: lease_ttl is four rounds with jitter R/4.
	tm, err = admission.ResolveTiming(admission.Standalone, admission.Overrides{RenewInterval: d(8 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if tm.RenewJitter != 2*time.Second || tm.LeaseTTL != 4*(8*time.Second+time.Second+5*time.Second) || tm.Origins["lease_ttl"] != admission.Derived {
		t.Errorf("pinned renew_interval 8s: jitter %s lease_ttl %s (%s)", tm.RenewJitter, tm.LeaseTTL, tm.Origins["lease_ttl"])
	}
	// A lease too short for its call timeout cannot yield a cadence.
	_, err = admission.ResolveTiming(admission.Standalone, admission.Overrides{LeaseTTL: d(8 * time.Second), RenewCallTimeout: d(3 * time.Second)})
	if !errors.Is(err, admission.ErrDerivation) || !strings.Contains(err.Error(), "8s/4 - 3s") {
		t.Errorf("lease_ttl 8s with call 3s: err = %v, want ErrDerivation with its numbers", err)
	}
	if _, err := admission.ResolveTiming("edge", admission.Overrides{}); !errors.Is(err, admission.ErrUnknownMode) {
		t.Errorf("unknown mode: err = %v", err)
	}
}

func explicit(l, r, j, c, p, g time.Duration) admission.Timing {
	return admission.Timing{LeaseTTL: l, RenewInterval: r, RenewJitter: j, RenewCallTimeout: c, AcquirePollInterval: p, StepDownGrace: g, MaxRenewFails: 3}
}

func randDur(rng *rand.Rand, maxD time.Duration) time.Duration {
	// Mix round values with odd nanosecond counts so truncation matters.
	if rng.IntN(2) == 0 {
		return time.Duration(rng.Int64N(int64(maxD/time.Millisecond))+1) * time.Millisecond
	}
	return time.Duration(rng.Int64N(int64(maxD)) + 1)
}

// Random explicit inputs agree to the nanosecond with the reference
// formulas evaluated in arbitrary precision.
func TestBudgetsAgreeWithReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		tm := explicit(randDur(rng, time.Hour), randDur(rng, 10*time.Minute), randDur(rng, time.Minute),
			randDur(rng, 30*time.Second), randDur(rng, time.Minute), randDur(rng, time.Minute))
		a, s, b := randDur(rng, 10*time.Minute), randDur(rng, time.Minute), randDur(rng, 10*time.Minute)
		ref := admissiontest.Timing{L: int64(tm.LeaseTTL), R: int64(tm.RenewInterval), J: int64(tm.RenewJitter),
			C: int64(tm.RenewCallTimeout), P: int64(tm.AcquirePollInterval), G: int64(tm.StepDownGrace), A: int64(a), S: int64(s), B: int64(b)}
		od, err := admission.OwnerDeath(tm, a, s)
		if err != nil {
			t.Fatal(err)
		}
		if want := admissiontest.OwnerDeath(ref); want.Int64() != int64(od.Total) {
			t.Fatalf("inputs %+v: owner death %d, reference %s", ref, od.Total, want)
		}
		ods, err := admission.OwnerDeathSpread(tm, a, s)
		if err != nil {
			t.Fatal(err)
		}
		if want := admissiontest.OwnerDeathSpread(ref); want.Int64() != int64(ods.Total) {
			t.Fatalf("inputs %+v: owner death with spread %d, reference %s", ref, ods.Total, want)
		}
		bp, err := admission.BrokerPath(tm, b, a, s)
		if err != nil {
			t.Fatal(err)
		}
		if want := admissiontest.BrokerPath(ref); want.Int64() != int64(bp.Total) {
			t.Fatalf("inputs %+v: broker path %d, reference %s", ref, bp.Total, want)
		}
		dp, err := admission.DevicePathBudget(tm, b, a, s)
		if err != nil {
			t.Fatal(err)
		}
		if want := admissiontest.DevicePath(ref); want.Int64() != int64(dp.Total) {
			t.Fatalf("inputs %+v: device path %d, reference %s", ref, dp.Total, want)
		}
	}
}

// The device-path budget must fit failover_slo like the others (the exact
// boundary passes), and a pinned cooldown shorter than a standby's pickup
// is refused; unpinned, the cooldown is max(threshold, pickup).
func TestDevicePathSLOAndCooldown(t *testing.T) {
	off := admission.BrokerHealth{Mode: admission.BrokerHealthOff}
	in := inputs(nil, off)
	in.DevicePath = admission.DevicePath{Threshold: 30 * time.Second}
	base := admission.Evaluate(in)
	if !base.Admitted() || base.DevicePath == nil || base.DevicePathFailover != "on" {
		t.Fatalf("device path on: %v %+v %s", base.Refusals, base.DevicePath, base.DevicePathFailover)
	}
	tm := in.Timing
	pb, _ := admission.PollBoundary(tm.AcquirePollInterval)
	want := 30*time.Second + tm.RenewInterval + tm.RenewJitter/2 + 2*min(admission.MaxStepDownStage, tm.StepDownGrace) + 2*pb + 4*tm.RenewCallTimeout + mqttDefault
	if base.DevicePath.Total != want {
		t.Errorf("device-path budget %s, want %s", base.DevicePath.Total, want)
	}
	if base.DevicePathCooldown != 30*time.Second {
		t.Errorf("derived cooldown %s, want the threshold 30s", base.DevicePathCooldown)
	}
	// Make the device path the largest budget, then put the SLO on it.
	in.DevicePath.Threshold = 10 * time.Minute
	big := admission.Evaluate(in)
	exact := big.DevicePath.Total
	in.FailoverSLO = &exact
	if r := admission.Evaluate(in); !r.Admitted() {
		t.Errorf("SLO equal to the device-path budget must pass: %v", r.Refusals)
	}
	short := exact - 1
	in.FailoverSLO = &short
	if r := admission.Evaluate(in); r.Admitted() || !strings.Contains(strings.Join(r.Refusals, "\n"), "device-path budget") {
		t.Errorf("SLO 1ns short of the device-path budget: %v", r.Refusals)
	}
	in.FailoverSLO = nil
	pickup := 2*pb + 2*tm.RenewCallTimeout
	low := pickup - 1
	in.DevicePath.Cooldown = &low
	if r := admission.Evaluate(in); r.Admitted() || !strings.Contains(strings.Join(r.Refusals, "\n"), "device_path_cooldown") {
		t.Errorf("cooldown below the standby pickup %s: %v", pickup, r.Refusals)
	}
	in.DevicePath.Cooldown = &pickup
	if r := admission.Evaluate(in); !r.Admitted() || r.DevicePathCooldown != pickup {
		t.Errorf("cooldown equal to the pickup: %v %s", r.Refusals, r.DevicePathCooldown)
	}
	in.DevicePath = admission.DevicePath{}
	if r := admission.Evaluate(in); r.DevicePath != nil || r.DevicePathFailover != "off" {
		t.Errorf("off: %+v %s", r.DevicePath, r.DevicePathFailover)
	}
}

func inputs(slo *time.Duration, bh admission.BrokerHealth) admission.Inputs {
	tm := explicit(45*time.Second, 10*time.Second, time.Second, 3*time.Second, 5*time.Second, 5*time.Second)
	return admission.Inputs{Session: "s", Timing: tm, BrokerHealth: bh, FailoverSLO: slo,
		Transports: []admission.Activation{{Name: "mqtt:local", Bound: mqttDefault, Close: time.Second}}}
}

func TestSLOBoundaryAndTriState(t *testing.T) {
	on := admission.BrokerHealth{Mode: admission.BrokerHealthOn, Threshold: 60 * time.Second}
	base := admission.Evaluate(inputs(nil, on))
	if !base.Admitted() {
		t.Fatalf("no SLO: refused: %v", base.Refusals)
	}
	worst := max(base.OwnerDeath.Total, base.BrokerPath.Total)
	exact := worst
	if r := admission.Evaluate(inputs(&exact, on)); !r.Admitted() {
		t.Errorf("SLO equal to the larger budget %s must pass: %v", exact, r.Refusals)
	}
	short := worst - 1
	r := admission.Evaluate(inputs(&short, on))
	if r.Admitted() || !strings.Contains(r.Refusals[0], "broker-path budget 350s exceeds failover_slo 349.999999999s by 0.000000001s") {
		t.Errorf("SLO 1ns short: refusals %q", r.Refusals)
	}
	slo := time.Hour
	r = admission.Evaluate(inputs(&slo, admission.BrokerHealth{}))
	if r.Admitted() || !strings.Contains(r.Refusals[0], "broker_health_step_down is omitted") || r.BrokerPathFailover != "undecided" {
		t.Errorf("SLO with omitted broker_health_step_down: %q (%s)", r.Refusals, r.BrokerPathFailover)
	}
	r = admission.Evaluate(inputs(&slo, admission.BrokerHealth{Mode: admission.BrokerHealthOff}))
	if !r.Admitted() || r.BrokerPath != nil || r.BrokerPathFailover != "off" {
		t.Errorf("off: admitted=%v broker path %v state %s", r.Admitted(), r.BrokerPath, r.BrokerPathFailover)
	}
	// Off covers owner death alone: a broker-path budget over the SLO does
	// not matter, an owner-death budget over it does.
	tight := base.OwnerDeath.Total - 1
	r = admission.Evaluate(inputs(&tight, admission.BrokerHealth{Mode: admission.BrokerHealthOff}))
	if r.Admitted() || !strings.Contains(r.Refusals[0], "owner-death budget 336.5s exceeds failover_slo") || !strings.Contains(r.Refusals[0], "activation 240s") {
		t.Errorf("owner death over SLO: %q", r.Refusals)
	}
}

func TestSelfFenceRefusalStatesTheInequality(t *testing.T) {
	in := inputs(nil, admission.BrokerHealth{Mode: admission.BrokerHealthOff})
	in.Timing.RenewInterval = 40 * time.Second
	in.Timing.RenewJitter = 0
	r := admission.Evaluate(in)
	want := "self-fence: renew_call_timeout + renew_interval + lease_renew_jitter/2 + renew_call_timeout + close_bound + clock_rate_margin = 3s + 40s + 0s + 3s + 1s + 0.045s = 47.045s must be <= lease_ttl = 45s"
	if r.Admitted() || !strings.Contains(strings.Join(r.Refusals, "\n"), want) {
		t.Errorf("refusals %q, want one containing %q", r.Refusals, want)
	}
	// Exactly at the boundary the owner still renews in time.
	in.Timing.RenewInterval = 45*time.Second - 3*time.Second - 3*time.Second - time.Second - 45*time.Millisecond
	if r := admission.Evaluate(in); !r.Admitted() {
		t.Errorf("self-fence boundary: %q", r.Refusals)
	}
	if r.FenceAfter != 45*time.Second-time.Second-45*time.Millisecond {
		t.Errorf("FenceAfter = %s", r.FenceAfter)
	}
}

func TestRangeRefusals(t *testing.T) {
	in := inputs(nil, admission.BrokerHealth{Mode: admission.BrokerHealthOff})
	in.Timing.AcquirePollInterval = 0
	in.Timing.MaxRenewFails = 0
	in.Timing.RenewJitter = -time.Second
	r := admission.Evaluate(in)
	got := strings.Join(r.Refusals, "\n")
	for _, want := range []string{"acquire_poll_interval = 0s: must be > 0", "max_renew_fails = 0: must be >= 1", "lease_renew_jitter = -1s: must be >= 0"} {
		if !strings.Contains(got, want) {
			t.Errorf("refusals %q lack %q", got, want)
		}
	}
	in = inputs(nil, admission.BrokerHealth{Mode: admission.BrokerHealthOff})
	in.Timing.RenewJitter = 2 * in.Timing.RenewInterval
	if r := admission.Evaluate(in); r.Admitted() || !strings.Contains(r.Refusals[0], "lease_renew_jitter/2 = 10s must be < renew_interval = 10s") {
		t.Errorf("jitter as large as twice the interval: %q", r.Refusals)
	}
}

func TestOverflowIsRefusedNamingTheTerm(t *testing.T) {
	in := inputs(nil, admission.BrokerHealth{Mode: admission.BrokerHealthOn, Threshold: math.MaxInt64 - time.Second})
	in.Timing.LeaseTTL = math.MaxInt64 / 2
	r := admission.Evaluate(in)
	got := strings.Join(r.Refusals, "\n")
	if r.Admitted() || !strings.Contains(got, "overflows int64 nanoseconds: term") {
		t.Fatalf("refusals %q, want an overflow naming its term", got)
	}
	in = inputs(nil, admission.BrokerHealth{Mode: admission.BrokerHealthOff})
	in.Timing.RenewCallTimeout = math.MaxInt64 / 4
	in.Timing.LeaseTTL = math.MaxInt64
	in.Timing.RenewInterval = math.MaxInt64 / 8
	in.Timing.AcquirePollInterval = time.Millisecond
	r = admission.Evaluate(in)
	if got := strings.Join(r.Refusals, "\n"); r.Admitted() || !strings.Contains(got, "term observation_calls") {
		t.Fatalf("refusals %q, want observation_calls overflow", got)
	}
}

func TestFormatSeconds(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 1097500 * time.Millisecond: "1097.5s", 75555555555: "75.555555555s", -1500 * time.Millisecond: "-1.5s", 1: "0.000000001s",
		// Finer than a millisecond: all nine decimals, so the standalone
		// profile's derived renew_interval and jitter show even digits.
		18888888890: "18.888888890s", 45 * time.Millisecond: "0.045s", 1500 * time.Microsecond: "0.001500000s",
		math.MinInt64: "-9223372036.854775808s",
	} {
		if got := admission.FormatSeconds(d); got != want {
			t.Errorf("FormatSeconds(%d) = %s, want %s", d, got, want)
		}
	}
	if got := admission.FormatSecondsShort(75555555555); got != "75.56s" {
		t.Errorf("FormatSecondsShort = %s", got)
	}
}

// Spread adds the takeover deferral to the owner-death budget as its own
// term, and to nothing else; without spread the report is unchanged.
func TestSpreadAddsTakeoverDeferral(t *testing.T) {
	in := inputs(nil, admission.BrokerHealth{Mode: admission.BrokerHealthOff})
	off := admission.Evaluate(in)
	in.Spread = true
	on := admission.Evaluate(in)
	if !off.Admitted() || !on.Admitted() {
		t.Fatalf("refused: %v %v", off.Refusals, on.Refusals)
	}
	d, err := admission.TakeoverDeferral(in.Timing)
	if err != nil {
		t.Fatal(err)
	}
	pb, _ := admission.PollBoundary(in.Timing.AcquirePollInterval)
	if d != 2*pb+3*in.Timing.RenewCallTimeout || on.TakeoverDeferral != d || off.TakeoverDeferral != 0 {
		t.Fatalf("takeover deferral %s, report %s (off: %s)", d, on.TakeoverDeferral, off.TakeoverDeferral)
	}
	last := on.OwnerDeath.Terms[len(on.OwnerDeath.Terms)-1]
	if on.OwnerDeath.Total != off.OwnerDeath.Total+d || last.Name != "takeover_deferral" || last.Value != d {
		t.Fatalf("owner death with spread %+v, without %+v", on.OwnerDeath, off.OwnerDeath)
	}
	for _, term := range off.OwnerDeath.Terms {
		if term.Name == "takeover_deferral" {
			t.Fatalf("owner death without spread has a takeover deferral: %+v", off.OwnerDeath)
		}
	}
}

// A takeover deferral that overflows is refused, naming the term.
func TestTakeoverDeferralOverflowRefused(t *testing.T) {
	tm := explicit(time.Hour, time.Minute, 0, time.Duration(math.MaxInt64/2), time.Minute, time.Minute)
	if _, err := admission.TakeoverDeferral(tm); err == nil || !strings.Contains(err.Error(), "takeover_deferral") {
		t.Fatalf("overflowing deferral: %v", err)
	}
}
