package transporttest

import (
	"context"
	"errors"
	"time"

	"github.com/leasebridge/leasebridge/transports"
)

// Stub is a transport that reports the bounds it is given and never
// opens: preflight builds it, admission sums its bounds. Tests of
// admission and building register a kind that returns one.
type Stub struct {
	// Device is the name the transport reports.
	Device string
	// Bound and Closing are its activation and close bounds.
	Bound, Closing time.Duration
}

// Name implements transports.Transport.
func (p *Stub) Name() string { return p.Device }

// ActivationBound implements transports.Transport.
func (p *Stub) ActivationBound() time.Duration { return p.Bound }

// CloseBound implements transports.Transport.
func (p *Stub) CloseBound() time.Duration { return p.Closing }

// Open implements transports.Transport: a stub is never opened.
func (p *Stub) Open(context.Context) error { return errors.New("transporttest: stub never opened") }

// Close implements transports.Transport.
func (p *Stub) Close(context.Context) error { return nil }

// State implements transports.Transport.
func (p *Stub) State() transports.State { return transports.State{} }
