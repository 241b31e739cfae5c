package lease

import (
	"sync"
	"sync/atomic"
	"time"
)

var clockStart = time.Now()

// fallbackNow is Go's monotonic clock as a duration since process start,
// offset by one hour so it never reads as the zero instant.
func fallbackNow() time.Duration { return time.Since(clockStart) + time.Hour }

// watchSlice is the period of the process's one clock watcher. Go's timers
// run on a clock that stops during suspend, Now does not: a manager or
// fence watchdog sleeping until an instant on Now wakes late by the time
// the machine was suspended. The watcher ticks every slice and, when Now
// advanced more than Go's monotonic clock since its previous tick, wakes
// every manager and re-checks every owner's deadline, so a deadline that
// passed during a suspend is acted on within one slice of resuming. Device
// I/O never waits for it: every request checks the deadline itself
// (transports.Guard).
const watchSlice = 500 * time.Millisecond

// suspendTolerance is how far Now may run ahead of Go's monotonic clock
// between two ticks before the watcher calls it a suspend: both are read
// one after the other, not at one instant. A shorter suspend delays a
// timer by less than this.
const suspendTolerance = 20 * time.Millisecond

// bootShift is added to Now where the watcher reads it: tests simulate a
// suspend by shifting it (and their managers' clocks) forward.
var bootShift atomic.Int64

func bootNow() time.Duration { return Now() + time.Duration(bootShift.Load()) }

var resume struct {
	once   sync.Once
	ch     atomic.Pointer[chan struct{}]
	mu     sync.Mutex
	owners map[*Owner]struct{}
}

// resumed returns a channel closed at the next resume from suspend,
// starting the process's clock watcher on first use.
func resumed() <-chan struct{} {
	resume.once.Do(func() {
		ch := make(chan struct{})
		resume.ch.Store(&ch)
		resume.owners = map[*Owner]struct{}{}
		go watchClock(bootNow(), time.Now())
	})
	return *resume.ch.Load()
}

func watchOwner(o *Owner) {
	resumed()
	resume.mu.Lock()
	defer resume.mu.Unlock()
	resume.owners[o] = struct{}{}
}

func unwatchOwner(o *Owner) {
	resume.mu.Lock()
	defer resume.mu.Unlock()
	delete(resume.owners, o)
}

// watchClock is the clock watcher: one ticker for the whole process.
func watchClock(lastBoot time.Duration, lastMono time.Time) {
	t := time.NewTicker(watchSlice)
	defer t.Stop()
	for range t.C {
		b, m := bootNow(), time.Now()
		if (b-lastBoot)-m.Sub(lastMono) > suspendTolerance {
			wakeAll()
		}
		lastBoot, lastMono = b, m
	}
}

// wakeAll wakes every manager (they re-read Now and act on what is due)
// and re-checks every owner's fence deadline.
func wakeAll() {
	ch := make(chan struct{})
	close(*resume.ch.Swap(&ch))
	resume.mu.Lock()
	owners := make([]*Owner, 0, len(resume.owners))
	for o := range resume.owners {
		owners = append(owners, o)
	}
	resume.mu.Unlock()
	for _, o := range owners {
		o.watch()
	}
}
