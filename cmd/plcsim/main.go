// Command plcsim is a simulated Modbus TCP PLC for hand trials and
// walkthroughs: a counter register that moves on its own, a writable
// setpoint, and a request log on standard output with each request's
// client and time, so an operator can watch that the device sees one
// client at a time. It is not part of the leasebridge binary.
//
//	plcsim [--listen 127.0.0.1:5020] [--tick 1s] [--log text|json|none]
//
// Register map: holding 0 counts ticks, holding 1 is a writable setpoint,
// holdings 2-63 are writable and keep what was written, coil 0 is true
// (running), coils 1-15 are writable. Input registers and discrete inputs
// mirror them. SIGINT or SIGTERM stops it with exit status 0; a bad flag
// or a busy address exits 2.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/leasebridge/leasebridge/internal/plcsim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without the process: it serves until ctx ends.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("plcsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:5020", "the Modbus TCP server's host:port")
	tick := fs.Duration("tick", time.Second, "period of the counter in holding register 0")
	format := fs.String("log", "text", "request log on stdout: text, json or none")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "plcsim: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	logf, err := requestLog(*format, stdout)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	p, err := plcsim.StartWith(ctx, plcsim.Options{Listen: *listen, Tick: *tick, OnRequest: logf})
	if err != nil {
		fmt.Fprintf(stderr, "plcsim: %v\n", err)
		return 2
	}
	defer p.Close()
	fmt.Fprintf(stderr, "plcsim: Modbus TCP on %s (unit id any); holding %d counts every %v, holding %d is the setpoint; stop with Ctrl-C\n",
		p.ServerAddr(), plcsim.CounterRegister, *tick, plcsim.SetpointRegister)
	<-ctx.Done()
	fmt.Fprintln(stderr, "plcsim: stopped")
	return 0
}

// requestLog returns the OnRequest that prints each request in format.
func requestLog(format string, w io.Writer) (func(plcsim.Request), error) {
	var mu sync.Mutex
	switch format {
	case "none":
		return nil, nil
	case "text":
		return func(r plcsim.Request) {
			mu.Lock()
			defer mu.Unlock()
			line := fmt.Sprintf("%s client=%s %s addr=%d qty=%d values=%v", r.At.UTC().Format(time.RFC3339Nano), r.Client, r.Func, r.Addr, r.Quantity, r.Values)
			if r.Err != "" {
				line += " error=" + fmt.Sprintf("%q", r.Err)
			}
			fmt.Fprintln(w, line)
		}, nil
	case "json":
		enc := json.NewEncoder(w)
		return func(r plcsim.Request) {
			mu.Lock()
			defer mu.Unlock()
			_ = enc.Encode(struct {
				At     time.Time `json:"at"`
				Client string    `json:"client"`
				Func   string    `json:"func"`
				Addr   uint16    `json:"addr"`
				Qty    uint16    `json:"qty"`
				Values []uint16  `json:"values"`
				Err    string    `json:"error,omitempty"`
			}{r.At.UTC(), r.Client, r.Func, r.Addr, r.Quantity, r.Values, r.Err})
		}, nil
	}
	return nil, fmt.Errorf("plcsim: --log %q: want text, json or none", format)
}
