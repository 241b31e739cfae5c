// Package httpapi is the HTTP side of `leasebridge run`: metrics, health,
// readiness, the sessions this process runs and the fleet view. It only
// reads what the supervisor (failover) and the lease store report.
package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leasebridge/leasebridge/cmd/leasebridge/httpapi/fleetpage"
	"github.com/leasebridge/leasebridge/failover"
)

// Readiness is the JSON body of /readyz.
type Readiness struct {
	// Ready is true when the process can do its job (failover.Supervisor.Ready).
	Ready bool `json:"ready"`
	// LeaseStoreUp is true while the lease store answers the probe.
	LeaseStoreUp bool `json:"lease_store_up"`
	// NotReady lists why Ready is false.
	NotReady []string `json:"not_ready,omitempty"`
	// Sessions is every session's status, as on /sessions.
	Sessions []failover.SessionStatus `json:"sessions"`
}

// Handler serves /metrics (Prometheus), /healthz (the process runs),
// /readyz (200 when the process can do its job: lease store reachable,
// every lease manager running, not shutting down or stepping down; 503
// otherwise), /sessions (every session's status as a JSON array), /fleet
// (the fleet view read from the lease store, fleetHandler) and / (the
// fleet page of both, package fleetpage). A session's service level is
// on /sessions and in the metrics, never in the readiness: a PLC that is
// off must not take a sidecar's pod out of its Service.
func Handler(sv *failover.Supervisor, gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /fleet", fleetHandler(sv))
	mux.HandleFunc("GET /{$}", fleetpage.Handler(sv))
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		why := sv.NotReady()
		body := Readiness{Ready: len(why) == 0, LeaseStoreUp: sv.StoreUp(), NotReady: why, Sessions: sv.Status()}
		code := http.StatusOK
		if !body.Ready {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, body)
	})
	mux.HandleFunc("GET /sessions", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, sv.Status())
	})
	return mux
}

// writeJSON writes v as the JSON body of a response with status code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// fleetHandler serves GET /fleet: the fleet view read from the store by
// this node, the same JSON as `leasebridge status --json`. It is read
// only; every change goes through the store.
func fleetHandler(sv *failover.Supervisor) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		st, err := sv.FleetStatus(r.Context(), time.Now())
		switch {
		case errors.Is(err, failover.ErrNoFleet):
			http.Error(w, "no fleet rows: the lease store does not support them", http.StatusNotFound)
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		default:
			writeJSON(w, http.StatusOK, st)
		}
	}
}
