package main

import (
	"fmt"
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
			r.Need = append(r.Need, fmt.Sprintf("%d", mqtt.QueueNeed(rate, p.OwnerDeath.Total)))
		}
		rows = append(rows, r)
	}
	cover := time.Duration(float64(mosquittoDefaultQueue) / bridgeRates[1] * float64(time.Second))
	return execute(bridgedDataTmpl, map[string]any{
		"QueueDepth":       mqtt.BridgeQueueDepth,
		"Queues":           rows,
		"MosquittoDefault": mosquittoDefaultQueue,
		"MosquittoCover":   admission.FormatSeconds(cover),
		"WatchPrefix":      mqtt.WatchClientIDPrefix,
	})
}
