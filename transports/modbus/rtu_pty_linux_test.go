package modbus

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasebridge/leasebridge/routes"
)

// openPTY opens a pseudo-terminal pair: the master end plays the device,
// the slave path is the serial port the transport opens with goburrow's
// serial package, termios and all.
func openPTY(t *testing.T) (*os.File, string) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	fd := int(m.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	return m, fmt.Sprintf("/dev/pts/%d", n)
}

// TestRTUOverPTY runs the real serial path: goburrow/serial opens a
// pseudo-terminal, the device answers on its master end.
func TestRTUOverPTY(t *testing.T) {
	master, path := openPTY(t)
	dev := &rtuDevice{unit: 3, bad: 200}
	dev.regs[4] = 0xFF85 // int16 -123
	go dev.serve(master)
	tr, err := New("rtu-pty", &routes.Device{Kind: KindRTU, Address: path,
		RequestTimeout: routes.Duration(300 * time.Millisecond), CloseTimeout: routes.Duration(200 * time.Millisecond),
		Settings: &RTUConfig{Config: Config{UnitID: ptr(3)}, Serial: Serial{BaudRate: 115200, DataBits: 8, Parity: "N", StopBits: 1}},
		Groups: []*routes.PollGroup{{Name: "g", Tags: []*routes.Tag{
			{Name: "v", Address: "4", Type: "int16", Writable: true},
			{Name: "b", Address: "200"},
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	owner, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := tr.Open(owner); err != nil {
		t.Fatal(err)
	}
	vals, err := tr.Poll(context.Background(), "g")
	if err != nil || vals[0].Value != int16(-123) || !errors.Is(vals[1].Err, ErrException) {
		t.Fatalf("poll over the pty: %+v %v", vals, err)
	}
	if err := tr.Write(context.Background(), "v", 77); err != nil {
		t.Fatal(err)
	}
	dev.mu.Lock()
	got := dev.regs[4]
	dev.mu.Unlock()
	if got != 77 {
		t.Errorf("register after write: %d", got)
	}
	// A silent device: the poll in flight ends within the close bound once
	// the owner context is cancelled, and nothing reopens the port.
	dev.silent.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := tr.Poll(context.Background(), "g")
		done <- err
	}()
	for {
		dev.mu.Lock()
		n := len(dev.frames)
		dev.mu.Unlock()
		if n >= 5 { // activation read, two poll reads, the write, the silent poll
			break
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	cancel()
	err = <-done
	if took := time.Since(start); took > tr.CloseBound() {
		t.Errorf("poll ended %v after the owner context, beyond the close bound %v", took, tr.CloseBound())
	}
	if !errors.Is(err, ErrClosed) {
		t.Errorf("poll in flight: %v, want ErrClosed", err)
	}
	if _, err := tr.Poll(context.Background(), "g"); !errors.Is(err, ErrClosed) {
		t.Errorf("poll after the owner context ended: %v", err)
	}
}
