package mqtt

import (
	"bufio"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// fakeBroker is a raw TCP listener speaking just enough MQTT 3.1.1 to stall
// each activation phase on purpose.
type fakeBroker struct {
	ln net.Listener
	// connack: answer CONNECT; suback / puback: answer SUBSCRIBE /
	// QoS 1 PUBLISH, after the given delay (negative: never).
	connack              bool
	connackAfter         time.Duration
	rejectSubs           bool
	protocolLevels       []byte
	subackAfter          time.Duration
	pubackAfter          time.Duration
	mu                   sync.Mutex
	accepted, connects   int
	subscribes, publishs int
	conns                []net.Conn
}

const never = -1

func startFake(t *testing.T, connack bool, subackAfter, pubackAfter time.Duration) *fakeBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeBroker{ln: ln, connack: connack, subackAfter: subackAfter, pubackAfter: pubackAfter}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.accepted++
			f.conns = append(f.conns, c)
			f.mu.Unlock()
			go f.serve(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, c := range f.conns {
			c.Close()
		}
	})
	return f
}

func (f *fakeBroker) url() string { return "tcp://" + f.ln.Addr().String() }

func (f *fakeBroker) counts() (accepted, connects, subscribes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.accepted, f.connects, f.subscribes
}

func (f *fakeBroker) serve(c net.Conn) {
	r := bufio.NewReader(c)
	var wmu sync.Mutex
	write := func(after time.Duration, b []byte) {
		if after < 0 {
			return
		}
		go func() {
			time.Sleep(after)
			wmu.Lock()
			defer wmu.Unlock()
			_, _ = c.Write(b)
		}()
	}
	for {
		typ, body, err := readPacket(r)
		if err != nil {
			return
		}
		f.mu.Lock()
		switch typ >> 4 {
		case 1:
			f.connects++
			// Protocol name (length-prefixed), then the protocol level.
			if len(body) > 2 {
				if n := int(body[0])<<8 | int(body[1]); len(body) > 2+n {
					f.protocolLevels = append(f.protocolLevels, body[2+n])
				}
			}
		case 8:
			f.subscribes++
		case 3:
			f.publishs++
		}
		f.mu.Unlock()
		switch typ >> 4 {
		case 1: // CONNECT
			if f.connack {
				write(f.connackAfter, []byte{0x20, 0x02, 0x00, 0x00})
			}
		case 8: // SUBSCRIBE: packet id, then (filter, qos) pairs
			id := body[:2]
			var granted []byte
			for p := 2; p+2 <= len(body); {
				n := int(body[p])<<8 | int(body[p+1])
				p += 2 + n
				if p < len(body) {
					g := body[p]
					if f.rejectSubs {
						g = 0x80
					}
					granted = append(granted, g)
				}
				p++
			}
			write(f.subackAfter, append([]byte{0x90, byte(2 + len(granted)), id[0], id[1]}, granted...))
		case 3: // PUBLISH
			if qos := (typ >> 1) & 3; qos == 1 {
				n := int(body[0])<<8 | int(body[1])
				id := body[2+n : 4+n]
				write(f.pubackAfter, []byte{0x40, 0x02, id[0], id[1]})
			}
		case 12: // PINGREQ
			write(0, []byte{0xD0, 0x00})
		case 14: // DISCONNECT
			return
		}
	}
}

func readPacket(r *bufio.Reader) (byte, []byte, error) {
	typ, err := r.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	n, mult := 0, 1
	for {
		b, err := r.ReadByte()
		if err != nil {
			return 0, nil, err
		}
		n += int(b&127) * mult
		if b&128 == 0 {
			break
		}
		mult *= 128
	}
	body := make([]byte, n)
	_, err = io.ReadFull(r, body)
	return typ, body, err
}
