package testetcd

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/leasebridge/leasebridge/lease/fleetca"
)

// Fleet is an embedded cluster secured as `leasebridge store` runs a
// fleet's members: peer and client traffic over TLS, each side requiring
// a certificate of the fleet CA in Dir (lease/fleetca's layout). Member i
// is named MemberName(i) and has certificate member-NAME in Dir.
type Fleet struct {
	Dir                  string
	ClientURLs, PeerURLs []string
}

// MemberName is the name of member i of a Fleet.
func MemberName(i int) string { return fmt.Sprintf("gw-%d", i) }

// StartFleet makes a fleet CA and n member certificates and starts the n
// members, waiting until each serves.
func StartFleet(t testing.TB, n int) *Fleet {
	t.Helper()
	f := &Fleet{Dir: filepath.Join(t.TempDir(), "pki")}
	if _, err := fleetca.Init(f.Dir, time.Now()); err != nil {
		t.Fatal(err)
	}
	var initial []string
	for i := range n {
		f.ClientURLs = append(f.ClientURLs, "https://"+freeAddr(t))
		f.PeerURLs = append(f.PeerURLs, "https://"+freeAddr(t))
		initial = append(initial, MemberName(i)+"="+f.PeerURLs[i])
		if _, err := fleetca.Issue(f.Dir, fleetca.Member, MemberName(i), []string{"127.0.0.1"}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	// The first quorum needs a majority started: start all at once.
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = f.start(t, i, strings.Join(initial, ",")) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("testetcd: %v", err)
		}
	}
	return f
}

// start starts member i and waits until it serves.
func (f *Fleet) start(t testing.TB, i int, initial string) error {
	name := MemberName(i)
	files := fleetca.FilesOf(f.Dir, fleetca.Member, name)
	info := transport.TLSInfo{CertFile: files.Cert, KeyFile: files.Key, TrustedCAFile: fleetca.CAFiles(f.Dir).Cert, ClientCertAuth: true}
	cu, err := url.Parse(f.ClientURLs[i])
	if err != nil {
		return err
	}
	pu, err := url.Parse(f.PeerURLs[i])
	if err != nil {
		return err
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = name, t.TempDir()
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.ClientTLSInfo, cfg.PeerTLSInfo = info, info
	cfg.InitialCluster, cfg.InitialClusterToken = initial, "testetcd-fleet"
	cfg.TickMs, cfg.ElectionMs = 10, 100
	cfg.UnsafeNoFsync = true
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
		// Close only a ready member: embed's Close blocks forever on one
		// that never became ready.
		t.Cleanup(e.Close)
		return nil
	case err := <-e.Err():
		return fmt.Errorf("%s: %w", name, err)
	case <-time.After(startTimeout):
		return fmt.Errorf("%s not ready within %s", name, startTimeout)
	}
}
