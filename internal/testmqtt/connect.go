package testmqtt

import (
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// Connect connects a clean-session client id to the broker at url,
// failing tb if it is not connected within 10 s; it disconnects when tb
// ends.
func Connect(tb testing.TB, url, id string) paho.Client {
	tb.Helper()
	c := paho.NewClient(paho.NewClientOptions().AddBroker(url).SetClientID(id).SetCleanSession(true))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		tb.Fatalf("testmqtt: %s connect %s: %v", id, url, tok.Error())
	}
	tb.Cleanup(func() { c.Disconnect(100) })
	return c
}
