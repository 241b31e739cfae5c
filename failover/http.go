package failover

import (
	"encoding/json"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Readiness is the JSON body of /readyz.
type Readiness struct {
	// Ready is true when the process can do its job (Supervisor.Ready).
	Ready bool `json:"ready"`
	// LeaseStoreUp is true while the lease store answers the probe.
	LeaseStoreUp bool `json:"lease_store_up"`
	// NotReady lists why Ready is false.
	NotReady []string `json:"not_ready,omitempty"`
	// Sessions is every session's status, as on /sessions.
	Sessions []SessionStatus `json:"sessions"`
}

// Handler serves /metrics (Prometheus), /healthz (the process runs),
// /readyz (200 when the process can do its job: lease store reachable,
// every lease manager running, not shutting down or stepping down; 503
// otherwise), /sessions (every session's status as a JSON array) and
// /fleet (the fleet view read from the lease store, fleetHandler). A
// session's service level is on /sessions and in the metrics, never in the
// readiness: a PLC that is off must not take a sidecar's pod out of its
// Service.
func Handler(sv *Supervisor, gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /fleet", fleetHandler(sv))
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
