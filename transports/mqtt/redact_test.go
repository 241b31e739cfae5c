package mqtt

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasebridge/leasebridge/internal/testmqtt"
	"github.com/leasebridge/leasebridge/routes"
)

// Credentials written into the broker URL reach mosquitto (paho reads the
// URL's userinfo), while the URL the client shows, and every error it
// returns, carries the password redacted.
func TestURLPasswordUsedButNeverShown(t *testing.T) {
	const good, bad = "correct horse", "wrong-s3cret"
	mq := testmqtt.StartMosquitto(t, testmqtt.MosquittoConfig{Users: map[string]string{"bridge": good}})
	withPassword := func(pw string) string {
		return "tcp://" + url.UserPassword("bridge", pw).String() + "@" + mq.Addr
	}
	c := newClient(t, testBroker(withPassword(good)), "url-good")
	if _, err := open(t, c); err != nil {
		t.Fatalf("credentials in the URL: %v", err)
	}
	if got, want := c.URL(), "tcp://bridge:xxxxx@"+mq.Addr; got != want {
		t.Errorf("URL() = %q, want %q", got, want)
	}

	refused := newClient(t, testBroker(withPassword(bad)), "url-bad")
	_, err := open(t, refused)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "tcp://bridge:xxxxx@"+mq.Addr) || strings.Contains(err.Error(), bad) {
		t.Errorf("wrong password in the URL: %v; want ErrRefused naming the redacted URL", err)
	}

	b := testBroker(withPassword(bad))
	b.KeepAlive = routes.Duration(1500 * time.Millisecond)
	if _, err := New("mqtt:test", Config{Broker: b, Session: "s"}); err == nil || strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "bridge:xxxxx@") {
		t.Errorf("configuration error: %v; want the URL redacted", err)
	}
	b = testBroker("mqtt://bridge:" + bad + "@" + mq.Addr + "x") // the port does not parse
	if _, err := New("mqtt:test", Config{Broker: b, Session: "s"}); err == nil || strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "bridge:xxxxx@") {
		t.Errorf("unparsable URL: %v; want it redacted", err)
	}
}
