package modbus

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goburrow/serial"

	"github.com/leasebridge/leasebridge/routes"
	"github.com/leasebridge/leasebridge/transports"
)

// crc16 is the Modbus RTU CRC, written out here independently of goburrow.
func crc16(b []byte) uint16 {
	crc := uint16(0xFFFF)
	for _, x := range b {
		crc ^= uint16(x)
		for i := 0; i < 8; i++ {
			if crc&1 != 0 {
				crc = crc>>1 ^ 0xA001
			} else {
				crc >>= 1
			}
		}
	}
	return crc
}

func withCRC(b []byte) []byte {
	c := crc16(b)
	return append(b, byte(c), byte(c>>8))
}

// rtuDevice answers RTU frames on one end of an in-memory serial line.
type rtuDevice struct {
	unit   byte
	regs   [256]uint16
	mu     sync.Mutex
	frames [][]byte
	silent atomic.Bool // swallow requests, as a device that is off
	bad    uint16      // register answered with exception 2
}

func (d *rtuDevice) serve(conn io.ReadWriteCloser) {
	defer conn.Close()
	for {
		hdr := make([]byte, 7)
		if _, err := io.ReadFull(conn, hdr[:6]); err != nil {
			return
		}
		var frame []byte
		switch hdr[1] {
		case 3, 4, 5, 6:
			frame = append(hdr[:6:6], 0, 0)
			if _, err := io.ReadFull(conn, frame[6:]); err != nil {
				return
			}
		case 16:
			if _, err := io.ReadFull(conn, hdr[6:7]); err != nil {
				return
			}
			frame = append(hdr, make([]byte, int(hdr[6])+2)...)
			if _, err := io.ReadFull(conn, frame[7:]); err != nil {
				return
			}
		default:
			return
		}
		d.mu.Lock()
		d.frames = append(d.frames, frame)
		d.mu.Unlock()
		if binary.LittleEndian.Uint16(frame[len(frame)-2:]) != crc16(frame[:len(frame)-2]) || frame[0] != d.unit || d.silent.Load() {
			continue
		}
		addr := binary.BigEndian.Uint16(frame[2:])
		n := binary.BigEndian.Uint16(frame[4:])
		var reply []byte
		switch {
		case (frame[1] == 3 || frame[1] == 4) && addr <= d.bad && d.bad < addr+n:
			reply = []byte{d.unit, frame[1] | 0x80, 2}
		case frame[1] == 3 || frame[1] == 4:
			reply = []byte{d.unit, frame[1], byte(2 * n)}
			d.mu.Lock()
			for i := uint16(0); i < n; i++ {
				reply = binary.BigEndian.AppendUint16(reply, d.regs[addr+i])
			}
			d.mu.Unlock()
		case frame[1] == 6:
			d.mu.Lock()
			d.regs[addr] = n
			d.mu.Unlock()
			reply = frame[:6]
		case frame[1] == 16:
			d.mu.Lock()
			for i := uint16(0); i < n; i++ {
				d.regs[addr+i] = binary.BigEndian.Uint16(frame[7+2*i:])
			}
			d.mu.Unlock()
			reply = frame[:6]
		}
		// Answer in two pieces, as a serial line delivers bytes.
		out := withCRC(append([]byte(nil), reply...))
		if _, err := conn.Write(out[:2]); err != nil {
			return
		}
		if _, err := conn.Write(out[2:]); err != nil {
			return
		}
	}
}

func (d *rtuDevice) lastFrame() []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.frames[len(d.frames)-1]
}

// pipePort gives one end of an in-memory line the read semantics of
// goburrow/serial: a read with nothing to read times out after a slice.
type pipePort struct{ net.Conn }

func (p pipePort) Read(b []byte) (int, error) {
	_ = p.SetReadDeadline(time.Now().Add(rtuReadSlice))
	n, err := p.Conn.Read(b)
	if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		return 0, serial.ErrTimeout
	}
	return n, err
}

// newRTU builds an RTU transport whose serial port is an in-memory line to
// dev; dials counts how often the port was (re)opened.
func newRTU(t *testing.T, dev *rtuDevice, cfg *routes.Device) (*Transport, *atomic.Int32) {
	t.Helper()
	cfg.Kind = KindRTU
	cfg.Address = "/dev/ttyFAKE0"
	tr, err := New("rtu1", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var dials atomic.Int32
	tr.dial = func(ctx context.Context) (link, error) {
		dials.Add(1)
		a, b := net.Pipe()
		go dev.serve(b)
		return &rtuLink{port: pipePort{a}, frameDelay: rtuFrameDelay(tr.serial.BaudRate)}, nil
	}
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	return tr, &dials
}

func TestRTUFrames(t *testing.T) {
	dev := &rtuDevice{unit: 1, bad: 200}
	dev.regs[0], dev.regs[1] = 0x4049, 0x0FDB // float32 pi, ABCD
	dev.regs[9] = 0xFFFF
	tr, dials := newRTU(t, dev, &routes.Device{Settings: &RTUConfig{Serial: Serial{BaudRate: 115200}}, RequestTimeout: routes.Duration(200 * time.Millisecond), Groups: []*routes.PollGroup{
		{Name: "g", Tags: []*routes.Tag{{Name: "pi", Address: "0", Type: "float32", Writable: true}}},
		{Name: "bad", Tags: []*routes.Tag{{Name: "b", Address: "200"}}},
		{Name: "w", Tags: []*routes.Tag{{Name: "s", Address: "9", Type: "int16", Writable: true}}},
	}})
	owner, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := tr.Open(owner); err != nil {
		t.Fatal(err)
	}
	// The specification's example frame: unit 1, read holding 0, count 2.
	if got, want := fmt.Sprintf("% x", dev.lastFrame()), "01 03 00 00 00 02 c4 0b"; got != want {
		t.Errorf("request frame %s, want %s", got, want)
	}
	vals, err := tr.Poll(context.Background(), "g")
	if err != nil || vals[0].Quality != transports.Good || vals[0].Value != float32(3.1415927) {
		t.Fatalf("poll: %+v %v", vals, err)
	}
	// An exception reply is five bytes; goburrow's own RTU reader gets this
	// wrong, which would leave bytes on the line or time out.
	vals, err = tr.Poll(context.Background(), "bad")
	var ex *ExceptionError
	if err != nil || !errors.As(vals[0].Err, &ex) || ex.Code != 2 || ex.Function&0x7f != 3 {
		t.Fatalf("exception: %+v %v", vals, err)
	}
	if err := tr.Write(context.Background(), "pi", 2.5); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprintf("% x", dev.lastFrame()), fmt.Sprintf("% x", withCRC([]byte{1, 16, 0, 0, 0, 2, 4, 0x40, 0x20, 0, 0})); got != want {
		t.Errorf("write frame %s, want %s", got, want)
	}
	if err := tr.Write(context.Background(), "s", -2); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprintf("% x", dev.lastFrame()), fmt.Sprintf("% x", withCRC([]byte{1, 6, 0, 9, 0xFF, 0xFE})); got != want {
		t.Errorf("write frame %s, want %s", got, want)
	}
	if dials.Load() != 1 {
		t.Errorf("port opened %d times, want once", dials.Load())
	}

	// A silent device times out; the port is closed and reopened later.
	dev.silent.Store(true)
	if _, err := tr.Poll(context.Background(), "g"); !errors.Is(err, ErrTimeout) {
		t.Fatalf("silent device: %v, want ErrTimeout", err)
	}
	dev.silent.Store(false)
	if _, err := tr.Poll(context.Background(), "g"); err != nil {
		t.Fatal(err)
	}
	if dials.Load() != 2 {
		t.Errorf("port opened %d times, want twice", dials.Load())
	}
}

// TestRTUSerialized polls from several goroutines: the line carries one
// frame at a time, so every reply must reach the request that asked for it.
func TestRTUSerialized(t *testing.T) {
	dev := &rtuDevice{unit: 5, bad: 255}
	var groups []*routes.PollGroup
	for i := 0; i < 4; i++ {
		dev.regs[10*i] = uint16(1000 + i)
		groups = append(groups, &routes.PollGroup{Name: fmt.Sprint(i), Tags: []*routes.Tag{{Name: fmt.Sprint("t", i), Address: fmt.Sprint(10 * i)}}})
	}
	tr, _ := newRTU(t, dev, &routes.Device{Settings: &RTUConfig{Config: Config{UnitID: ptr(5)}}, RequestTimeout: routes.Duration(time.Second), Groups: groups})
	if err := tr.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 20; k++ {
				vals, err := tr.Poll(context.Background(), fmt.Sprint(i))
				if err != nil {
					t.Error(err)
					return
				}
				if vals[0].Value != uint16(1000+i) {
					t.Errorf("group %d read %v", i, vals[0].Value)
					return
				}
			}
		}()
	}
	wg.Wait()
}
