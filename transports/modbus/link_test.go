package modbus

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// TestTCPLinkFraming feeds tcpLink.Send replies in one segment, split
// anywhere, followed by stray bytes, and with impossible lengths.
func TestTCPLinkFraming(t *testing.T) {
	// A reply to read holding registers: transaction 1, protocol 0,
	// length 7 (unit, function, byte count, two registers), unit 1.
	reply := []byte{0, 1, 0, 0, 0, 7, 1, 3, 4, 0x12, 0x34, 0x56, 0x78}
	request := []byte{0, 1, 0, 0, 0, 6, 1, 3, 0, 0, 0, 2}
	for _, tc := range []struct {
		name    string
		chunks  [][]byte
		want    []byte
		wantErr error
	}{
		{"one segment", [][]byte{reply}, reply, nil},
		{"header, then the PDU", [][]byte{reply[:7], reply[7:]}, reply, nil},
		{"byte by byte", split1(reply), reply, nil},
		{"part of the header", [][]byte{reply[:3], reply[3:9], reply[9:]}, reply, nil},
		{"stray bytes after the reply", [][]byte{append(append([]byte(nil), reply...), 0, 2)}, nil, ErrFrame},
		{"length 1", [][]byte{{0, 1, 0, 0, 0, 1, 1}}, nil, ErrFrame},
		{"length 255", [][]byte{{0, 1, 0, 0, 0, 255, 1}}, nil, ErrFrame},
		{"cut short", [][]byte{reply[:10]}, nil, io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer client.Close()
			go func() {
				defer server.Close()
				got := make([]byte, len(request))
				if _, err := io.ReadFull(server, got); err != nil {
					return
				}
				for _, c := range tc.chunks {
					if _, err := server.Write(c); err != nil {
						return
					}
				}
			}()
			l := &tcpLink{conn: client, deadline: time.Now().Add(5 * time.Second)}
			got, err := l.Send(request)
			switch {
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Send: %x %v, want %v", got, err, tc.wantErr)
				}
			case err != nil || string(got) != string(tc.want):
				t.Fatalf("Send: %x %v, want %x", got, err, tc.want)
			}
			if err == nil && &got[0] == &l.buf[0] {
				t.Fatal("the reply aliases the link's buffer")
			}
		})
	}
}

func split1(b []byte) [][]byte {
	out := make([][]byte, len(b))
	for i := range b {
		out[i] = b[i : i+1]
	}
	return out
}
