package fleetstore

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// identityFile, in a member's data directory, records whose directory it
// is: the member, its cluster and the member list the cluster was
// bootstrapped from. etcd's own files do not name the cluster in a way a
// start can check before it writes.
const identityFile = "leasebridge-member.json"

// identity is identityFile's content.
type identity struct {
	// Member is the member's name.
	Member string `json:"member"`
	// ClusterID and MemberID are etcd's, in hex.
	ClusterID string `json:"cluster_id"`
	MemberID  string `json:"member_id"`
	// Members are the cluster's members, name=peer_url, sorted.
	Members []string `json:"members"`
}

// listOf is members as sorted name=peer_url pairs: what two lists must
// agree on (client URLs may move without touching raft).
func listOf(members []Member) []string {
	out := make([]string, len(members))
	for i, m := range members {
		out[i] = m.Name + "=" + m.PeerURL
	}
	slices.Sort(out)
	return out
}

// clusterToken is etcd's initial cluster token: the same on every member
// of one configured list, different for another list, so two fleets
// bootstrapped from different lists never accept each other's members.
func clusterToken(members []Member) string {
	sum := sha256.Sum256([]byte(strings.Join(listOf(members), ",")))
	return "leasebridge-" + hex.EncodeToString(sum[:8])
}

// hasData reports whether dir holds an etcd member's data.
func hasData(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "member", "wal"))
	return err == nil
}

// readIdentity reads dir's identity file; ok is false when there is none.
func readIdentity(dir string) (id identity, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, identityFile))
	if errors.Is(err, fs.ErrNotExist) {
		return identity{}, false, nil
	}
	if err != nil {
		return identity{}, false, fmt.Errorf("fleetstore: read %s: %w", filepath.Join(dir, identityFile), err)
	}
	if err := json.Unmarshal(b, &id); err != nil {
		return identity{}, false, fmt.Errorf("%w: %s is not a member record: %w", ErrForeignDir, filepath.Join(dir, identityFile), err)
	}
	return id, true, nil
}

// writeIdentity writes dir's identity file atomically.
func writeIdentity(dir string, id identity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(dir, identityFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("fleetstore: write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("fleetstore: write %s: %w", path, err)
	}
	return nil
}

// checkDir refuses a data directory that holds another member's or
// another cluster's data, before anything is written to it.
func checkDir(o Options) error {
	if !hasData(o.Dir) {
		return nil
	}
	id, ok, err := readIdentity(o.Dir)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %s holds etcd data but no %s: it was not written by `leasebridge store`; move it away or point data_dir elsewhere",
			ErrForeignDir, o.Dir, identityFile)
	}
	if id.Member != o.Name {
		return fmt.Errorf("%w: %s belongs to member %q (cluster %s), not %q: fix node or data_dir",
			ErrForeignDir, o.Dir, id.Member, id.ClusterID, o.Name)
	}
	if want := listOf(o.Members); !slices.Equal(id.Members, want) {
		return fmt.Errorf("%w: the configured members [%s] differ from the members [%s] of cluster %s recorded in %s",
			ErrMismatch, strings.Join(want, " "), strings.Join(id.Members, " "), id.ClusterID, o.Dir)
	}
	return nil
}

// checkCluster refuses a data directory of an earlier cluster than the
// one running (rebuilt after a quorum loss while this member was away):
// its peers would refuse it forever.
func checkCluster(o Options, live *liveCluster) error {
	if live == nil || !hasData(o.Dir) {
		return nil
	}
	id, ok, err := readIdentity(o.Dir)
	if err != nil || !ok || id.ClusterID == "" || id.ClusterID == live.clusterID {
		return err
	}
	return fmt.Errorf("%w: %s holds member %s of cluster %s, but cluster %s runs at %s: move the directory away, run `leasebridge store replace %s -c FILE` on another member's node, then start this one again",
		ErrForeignDir, o.Dir, id.Member, id.ClusterID, live.clusterID, live.endpoint, o.Name)
}
