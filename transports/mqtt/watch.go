package mqtt

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// WatchClientIDPrefix starts the client id of a StatusWatch; the node
// name follows. It differs from every session's client id, so a watch
// never takes a session's connection over.
const WatchClientIDPrefix = "leasebridge-watch-"

// StatusWatch reads the status topics of several sessions on one broker
// over one connection of its own (clean session, QoS 1, retained messages
// included): what that broker says the sessions' owners are doing. It is
// read-only and holds no lease; a standby uses it to tell whether its
// broker sees the owner at all (docs/bridged-data.md).
type StatusWatch struct {
	name   string
	s      *settings
	topics map[string]string // status topic -> session

	mu     sync.Mutex
	latest map[string]StatusMessage // by session
}

// NewStatusWatch prepares a watch of sessions' status topics on broker
// cfg.Broker (cfg.Session is ignored); node names this process.
func NewStatusWatch(name string, cfg Config, sessions []string) (*StatusWatch, error) {
	w := &StatusWatch{name: name, topics: map[string]string{}, latest: map[string]StatusMessage{}}
	for _, sess := range sessions {
		c := cfg
		c.Session, c.CleanSession = sess, true
		s, err := resolve(c)
		if err != nil {
			return nil, fmt.Errorf("status watch %s: %w", name, err)
		}
		w.s = s
		w.topics[s.statusTopic] = sess
	}
	if w.s == nil {
		return nil, fmt.Errorf("%w: status watch %s: no sessions", ErrConfig, name)
	}
	w.s.clientID = WatchClientIDPrefix + cfg.Node
	return w, nil
}

// Latest is the last status message the broker delivered for session.
func (w *StatusWatch) Latest(session string) (StatusMessage, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m, ok := w.latest[session]
	return m, ok
}

// Run keeps the connection (reconnecting as paho does) and the
// subscriptions until ctx ends.
func (w *StatusWatch) Run(ctx context.Context) error {
	pw, err := w.s.password()
	if err != nil {
		return fmt.Errorf("status watch %s: %w", w.name, err)
	}
	subs := map[string]byte{}
	for t := range w.topics {
		subs[t] = 1
	}
	o := paho.NewClientOptions().AddBroker(w.s.url.String()).SetClientID(w.s.clientID).SetCleanSession(true).
		SetProtocolVersion(w.s.protocol).SetKeepAlive(w.s.keepAlive).SetPingTimeout(pingTimeout(w.s.keepAlive)).
		SetConnectTimeout(w.s.connect).SetAutoReconnect(true).SetConnectRetry(true).
		SetConnectRetryInterval(w.s.connect).SetMaxReconnectInterval(10 * w.s.connect).
		SetUsername(w.s.creds.Username).SetPassword(pw)
	if w.s.tls != nil {
		o.SetTLSConfig(w.s.tls)
	}
	o.SetOnConnectHandler(func(pc paho.Client) {
		// A refused subscription leaves the watch blind: nothing is seen,
		// which reads as "not seen", the cautious answer.
		pc.SubscribeMultiple(subs, w.receive)
	})
	pc := paho.NewClient(o)
	pc.Connect()
	<-ctx.Done()
	pc.Disconnect(uint(w.s.close / time.Millisecond))
	return nil
}

func (w *StatusWatch) receive(_ paho.Client, m paho.Message) {
	sess, ok := w.topics[m.Topic()]
	if !ok {
		return
	}
	var st StatusMessage
	if len(m.Payload()) == 0 || json.Unmarshal(m.Payload(), &st) != nil {
		return
	}
	w.mu.Lock()
	w.latest[sess] = st
	w.mu.Unlock()
}
