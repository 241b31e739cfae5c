package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/goburrow/modbus"

	"github.com/leasebridge/leasebridge/internal/testbin"
)

// TestRequestLogNamesEveryRequest runs the command on a chosen port, reads
// and writes through a real Modbus client and checks that the JSON request
// log carries each request with its client, in order.
func TestRequestLogNamesEveryRequest(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	addr := testbin.FreeAddr(t)
	var stdout, stderr testbin.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--listen", addr, "--tick", "10ms", "--log", "json"}, &stdout, &stderr)
	}()
	h := modbus.NewTCPClientHandler(addr)
	h.Timeout = 5 * time.Second
	testbin.Observe(t, time.Minute, func() (bool, string) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return true, ""
		}
		return false, err.Error()
	})
	if err := h.Connect(); err != nil {
		t.Fatal(err)
	}
	c := modbus.NewClient(h)
	if _, err := c.WriteSingleRegister(1, 777); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadHoldingRegisters(1, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadHoldingRegisters(63, 5); err == nil {
		t.Fatal("read past the register map succeeded")
	}
	h.Close()

	type entry struct {
		Client, Func, Error string
		Addr                uint16
		Values              []uint16
	}
	testbin.Observe(t, time.Minute, func() (bool, string) {
		return strings.Count(stdout.String(), "\n") >= 3, stdout.String()
	})
	sc := bufio.NewScanner(strings.NewReader(stdout.String()))
	var got []entry
	for len(got) < 3 && sc.Scan() {
		var e entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		got = append(got, e)
	}
	if len(got) < 3 {
		t.Fatalf("request log has %d entries, want 3; stderr: %s", len(got), stderr.String())
	}
	if got[0].Func != "write_holding" || got[0].Values[0] != 777 || got[1].Func != "read_holding" || got[1].Values[0] != 777 {
		t.Fatalf("log = %+v, want the write of 777 then its read", got)
	}
	if got[2].Error == "" || got[2].Addr != 63 {
		t.Fatalf("out-of-range read logged as %+v, want an error at addr 63", got[2])
	}
	for _, e := range got {
		if !strings.HasPrefix(e.Client, "127.0.0.1") {
			t.Fatalf("entry %+v does not name its client", e)
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d after cancel, want 0", code)
	}
}

func TestBadFlagsExit2(t *testing.T) {
	for _, args := range [][]string{{"--log", "xml"}, {"stray"}, {"--tick", "0s", "--listen", "127.0.0.1:0"}} {
		var out, errb strings.Builder
		if code := run(context.Background(), args, &out, &errb); code != 2 {
			t.Fatalf("%v: exit %d, want 2 (stderr %q)", args, code, errb.String())
		}
	}
}
