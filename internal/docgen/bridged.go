package main

import (
	"fmt"
	"math"
	"time"

	"github.com/leasebridge/leasebridge/admission"
	"github.com/leasebridge/leasebridge/internal/report"
	"github.com/leasebridge/leasebridge/transports/mqtt"
)

// mosquittoDefaultQueue is mosquitto's default max_queued_messages (see
// mosquitto.conf(5)).
const mosquittoDefaultQueue = 1000

// bridgeRates are the message rates the queue-sizing table shows.
var bridgeRates = []float64{10, 50, 200}

// queueNeed is the per-client queue a broker needs to hold rate messages
// per second for gap: ceil(rate x gap).
func queueNeed(rate float64, gap time.Duration) int64 {
	return int64(math.Ceil(rate * gap.Seconds()))
}

func bridgedData(profiles ...report.Profile) ([]byte, error) {
	type row struct {
		Profile admission.Mode
		Budget  string
		Need    []string
	}
	var rows []row
	for _, p := range profiles {
		r := row{Profile: p.Mode, Budget: admission.FormatSeconds(p.OwnerDeath.Total)}
		for _, rate := range bridgeRates {
			r.Need = append(r.Need, fmt.Sprintf("%d", queueNeed(rate, p.OwnerDeath.Total)))
		}
		rows = append(rows, r)
	}
	cover := time.Duration(float64(mosquittoDefaultQueue) / bridgeRates[1] * float64(time.Second))
	return execute(bridgedDataTmpl, map[string]any{
		"QueueDepth":       mqtt.BridgeQueueDepth,
		"Queues":           rows,
		"MosquittoDefault": mosquittoDefaultQueue,
		"MosquittoCover":   admission.FormatSeconds(cover),
	})
}
