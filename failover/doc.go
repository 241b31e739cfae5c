// Package failover is the control plane: who owns what. It runs each
// session's lease manager and takes it through standby, owner, activation
// and service, one ownership term after another; it keeps the node's fleet
// row, spreads sessions over the nodes, hands them over on request, claims
// device endpoints, steps the whole process down when its broker path
// stays lost, and releases one session when its device path does.
//
// What runs inside a term (polling, writes, bridges) is package dataplane;
// the transports a term opens are built as package preflight builds them
// for admission; the fleet view behind `status` is package fleetview.
package failover
