package testmqtt

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

const waitTimeout = 10 * time.Second

func connect(t *testing.T, url, id string, tweak func(*paho.ClientOptions)) (paho.Client, error) {
	t.Helper()
	o := paho.NewClientOptions().AddBroker(url).SetClientID(id).SetProtocolVersion(4).
		SetConnectTimeout(5 * time.Second).SetAutoReconnect(false)
	if tweak != nil {
		tweak(o)
	}
	c := paho.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(waitTimeout) {
		t.Fatalf("connect to %s timed out", url)
	}
	if tok.Error() == nil {
		t.Cleanup(func() { c.Disconnect(0) })
	}
	return c, tok.Error()
}

func roundTrip(t *testing.T, url string, tweak func(*paho.ClientOptions)) {
	t.Helper()
	c, err := connect(t, url, "rt", tweak)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	got := make(chan string, 1)
	if tok := c.Subscribe("t/x", 1, func(_ paho.Client, m paho.Message) { got <- string(m.Payload()) }); !tok.WaitTimeout(waitTimeout) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	if tok := c.Publish("t/x", 1, false, "ping"); !tok.WaitTimeout(waitTimeout) || tok.Error() != nil {
		t.Fatalf("publish: %v", tok.Error())
	}
	select {
	case s := <-got:
		if s != "ping" {
			t.Fatalf("got %q", s)
		}
	case <-time.After(waitTimeout):
		t.Fatal("no message")
	}
}

func TestMochiCountsClients(t *testing.T) {
	m := StartMochi(t)
	a, err := connect(t, m.URL, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := connect(t, m.URL, "b", nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := m.WaitConnected(ctx, func(n int) bool { return n == 2 }); err != nil {
		t.Fatal(err)
	}
	a.Disconnect(100)
	if err := m.WaitConnected(ctx, func(n int) bool { return n == 1 }); err != nil {
		t.Fatal(err)
	}
	// A takeover with the same client id replaces, never adds.
	if _, err := connect(t, m.URL, "b", nil); err != nil {
		t.Fatal(err)
	}
	// The count stays 1 across the replacement, so wait for the third
	// session to be counted rather than for the count.
	for m.Sessions() < 3 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	if err := m.WaitConnected(ctx, func(n int) bool { return n == 1 }); err != nil {
		t.Fatal(err)
	}
	if m.PeakConnected() != 2 || m.Sessions() != 3 {
		t.Fatalf("peak %d sessions %d", m.PeakConnected(), m.Sessions())
	}
	if ids := m.ConnectedIDs(); len(ids) != 1 || ids[0] != "b" {
		t.Fatalf("ids %v", ids)
	}
	roundTrip(t, m.URL, nil)
}

func TestMosquittoAnonymousAndRestart(t *testing.T) {
	m := StartMosquitto(t, MosquittoConfig{})
	roundTrip(t, m.URL, nil)
	m.Kill()
	if _, err := connect(t, m.URL, "down", nil); err == nil {
		t.Fatal("connected to a killed broker")
	}
	m.Restart()
	roundTrip(t, m.URL, nil)
}

func TestMosquittoPassword(t *testing.T) {
	m := StartMosquitto(t, MosquittoConfig{Users: map[string]string{"alice": "s3cret"}})
	roundTrip(t, m.URL, func(o *paho.ClientOptions) { o.SetUsername("alice").SetPassword("s3cret") })
	_, err := connect(t, m.URL, "bad", func(o *paho.ClientOptions) { o.SetUsername("alice").SetPassword("wrong") })
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "not authorized") && !strings.Contains(strings.ToLower(err.Error()), "bad user name") {
		t.Fatalf("wrong password: %v", err)
	}
	if _, err := connect(t, m.URL, "anon", nil); err == nil {
		t.Fatal("anonymous client accepted with a password file")
	}
}

func TestMosquittoTLSClientCert(t *testing.T) {
	pki := NewPKI(t)
	m := StartMosquitto(t, MosquittoConfig{PKI: pki, RequireClientCert: true})
	if !strings.HasPrefix(m.URL, "ssl://") {
		t.Fatalf("url %s", m.URL)
	}
	pool := func(file string) *x509.CertPool {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		p := x509.NewCertPool()
		if !p.AppendCertsFromPEM(b) {
			t.Fatal("bad pem")
		}
		return p
	}
	cert, err := tls.LoadX509KeyPair(pki.ClientCert, pki.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, m.URL, func(o *paho.ClientOptions) {
		o.SetTLSConfig(&tls.Config{RootCAs: pool(pki.CAFile), Certificates: []tls.Certificate{cert}})
	})
	if _, err := connect(t, m.URL, "nocert", func(o *paho.ClientOptions) {
		o.SetTLSConfig(&tls.Config{RootCAs: pool(pki.CAFile)})
	}); err == nil {
		t.Fatal("client without certificate accepted")
	}
	if _, err := connect(t, m.URL, "othrca", func(o *paho.ClientOptions) {
		o.SetTLSConfig(&tls.Config{RootCAs: pool(pki.OtherCAFile), Certificates: []tls.Certificate{cert}})
	}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("server verified against an unrelated CA: %v", err)
	}
}

func TestMochiWebsocket(t *testing.T) {
	m := StartMochiWebsocket(t)
	if !strings.HasPrefix(m.URL, "ws://") {
		t.Fatalf("url %s", m.URL)
	}
	roundTrip(t, m.URL, nil)
	if m.PeakConnected() != 1 {
		t.Fatalf("peak %d", m.PeakConnected())
	}
}

// fatalRecorder records the Fatalf of the code under test instead of
// failing this test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// Without the binary the test fails, naming the fix; it never skips.
func TestMissingMosquittoFails(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	saved := fallbackPaths
	fallbackPaths = nil
	defer func() { fallbackPaths = saved }()
	r := &fatalRecorder{TB: t}
	done := make(chan string)
	go func() {
		defer func() { done <- r.msg }()
		LookMosquitto(r)
	}()
	if msg := <-done; !strings.Contains(msg, "install mosquitto (scripts/test does)") {
		t.Fatalf("missing binary reported as %q", msg)
	}
}
