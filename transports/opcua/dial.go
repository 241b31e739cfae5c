package opcua

import (
	"context"
	"sync"
	"syscall"

	"github.com/gopcua/opcua"
)

// abortableDial lets a context end a connect that gopcua cannot stop: its
// HEL/ACK handshake honours only a context's deadline, not its
// cancellation, so a Close or an owner cancellation would otherwise leave a
// connection being made until connect_timeout. The dialer keeps a duplicate
// of each socket's descriptor while the connect runs; ending the context
// shuts the socket down, which fails every read and write on it at once.
// The duplicate is ours, so no descriptor number gopcua has released can be
// hit.
type abortableDial struct {
	mu   sync.Mutex
	fds  []int
	done bool
}

// option is the gopcua dialer option that records the sockets.
func (a *abortableDial) option() opcua.Option {
	d := opcua.DefaultDialer()
	d.Dialer.Control = func(_, _ string, rc syscall.RawConn) error {
		var derr error
		err := rc.Control(func(fd uintptr) {
			nfd, err := syscall.Dup(int(fd))
			if err != nil {
				derr = err
				return
			}
			a.mu.Lock()
			defer a.mu.Unlock()
			if a.done {
				_ = syscall.Close(nfd)
				return
			}
			a.fds = append(a.fds, nfd)
		})
		if err != nil {
			return err
		}
		return derr
	}
	return opcua.Dialer(d)
}

// watch shuts the recorded sockets down when ctx ends before finish.
func (a *abortableDial) watch(ctx context.Context) (stop func() bool) {
	return context.AfterFunc(ctx, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.done {
			return
		}
		for _, fd := range a.fds {
			_ = syscall.Shutdown(fd, syscall.SHUT_RDWR)
		}
	})
}

// finish releases the duplicates once the connect is over; from then on
// the client's own Close owns the socket.
func (a *abortableDial) finish() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.done = true
	for _, fd := range a.fds {
		_ = syscall.Close(fd)
	}
	a.fds = nil
}
