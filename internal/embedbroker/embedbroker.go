// Package embedbroker runs an MQTT broker (mochi-mqtt) inside the process
// on a loopback port: the broker of cmd/leasebridge-demo.
package embedbroker

import (
	"fmt"
	"io"
	"log/slog"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
)

// Broker is a running embedded broker.
type Broker struct {
	// Server is the broker; its inline client can publish and subscribe.
	Server *mochi.Server
	// URL is tcp://127.0.0.1:port.
	URL string
}

// Start listens on addr ("127.0.0.1:0" for a free port) and allows every
// client.
func Start(addr string) (*Broker, error) {
	s := mochi.New(&mochi.Options{InlineClient: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := s.AddHook(new(auth.AllowHook), nil); err != nil {
		return nil, fmt.Errorf("embedbroker: allow hook: %w", err)
	}
	ln := listeners.NewTCP(listeners.Config{ID: "tcp", Address: addr})
	if err := s.AddListener(ln); err != nil {
		return nil, fmt.Errorf("embedbroker: listen on %s: %w", addr, err)
	}
	if err := s.Serve(); err != nil {
		return nil, fmt.Errorf("embedbroker: serve: %w", err)
	}
	return &Broker{Server: s, URL: "tcp://" + ln.Address()}, nil
}

// Close stops the broker.
func (b *Broker) Close() error { return b.Server.Close() }
