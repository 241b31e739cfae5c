package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/leasebridge/leasebridge/lease/fleetca"
	"github.com/leasebridge/leasebridge/routes"
)

const certsAbout = `
Makes the certificates of a fleet that is its own lease store, in DIR:
'init' the fleet's CA (ca.crt, ca.key); 'member NAME' the certificate of the
store member on node NAME, for server and client use, naming the hosts of its
peer_url and client_url (from -c FILE's lease_store.members) and every
--host; 'bridge NAME' a bridge's client certificate; 'reader NAME' a
read-only client's ('leasebridge status'); 'admin' the store administrator's
(etcd's root user). The common name is NAME: with the store's roles on, etcd
takes it as the user name, so bridges write rows and readers only read them.
Keys are written 0600 and nothing that exists is overwritten: a second CA
would split the fleet. Keep ca.key off the gateways once every certificate
is made. Exit %[1]d when written, %[2]d when a file exists or the CA cannot
be read, %[3]d for an invalid command line, file or name.
`

const certsExamples = `  # on an operator's machine: the CA, then a certificate per member and bridge
  leasebridge certs init --dir pki
  leasebridge certs member edge-gw-1 --dir pki -c edge-fleet-store.yaml
  leasebridge certs bridge edge-gw-1 --dir pki
  # a SCADA server that only runs 'leasebridge status'
  leasebridge certs reader scada --dir pki
  # the administrator: roles, member changes, snapshots
  leasebridge certs admin --dir pki
  # a member without a file: its hosts given
  leasebridge certs member witness --dir pki --host 10.0.0.9 --host witness.plant
`

// hostList is a repeatable --host flag.
type hostList []string

func (h *hostList) String() string { return strings.Join(*h, ",") }

func (h *hostList) Set(v string) error {
	if v == "" {
		return errors.New("empty host")
	}
	*h = append(*h, v)
	return nil
}

// certs is `leasebridge certs init|member NAME|bridge NAME|reader NAME|admin
// --dir DIR [-c FILE] [--host HOST]...`.
func certs(args []string, stdout, stderr io.Writer) int {
	fl := newFlags("certs", stdout, stderr)
	dir := fl.String("dir", "", "the directory of the fleet's CA and certificates")
	file := fl.String("c", "", "configuration file: member takes its hosts from lease_store.members")
	var hosts hostList
	fl.Var(&hosts, "host", "a host name or IP address the member certificate also names (repeatable)")
	pos, err := fl.parseWithPositionals(args)
	if err != nil {
		return flagStatus(err)
	}
	if *dir == "" {
		return fl.usageError("--dir DIR is required")
	}
	kind, name, code := certsTarget(fl, pos)
	if code != exitOK {
		return code
	}
	if kind == "" {
		f, err := fleetca.Init(*dir, time.Now())
		if err != nil {
			fmt.Fprintf(stderr, "leasebridge certs init: %v\n", err)
			return exitRefused
		}
		fmt.Fprintf(stdout, "wrote %s and %s (keep the key off the gateways once every certificate is made)\n", f.Cert, f.Key)
		return exitOK
	}
	if kind == fleetca.Member && *file != "" {
		fromFile, code := memberHosts(*file, name, stderr)
		if code != exitOK {
			return code
		}
		hosts = append(fromFile, hosts...)
	}
	if kind == fleetca.Member && len(hosts) == 0 {
		return fl.usageError("member %s: give -c FILE (its peer_url and client_url) or --host", name)
	}
	return issue(*dir, kind, name, hosts, stdout, stderr)
}

// certsTarget reads the subcommand and its name from the positional
// arguments; kind is empty for init.
func certsTarget(fl *flagSet, pos []string) (fleetca.Kind, string, int) {
	if len(pos) == 0 {
		return "", "", fl.usageError("want init, member NAME, bridge NAME, reader NAME or admin")
	}
	switch sub := pos[0]; sub {
	case "init", "admin":
		if len(pos) != 1 {
			return "", "", fl.usageError("%s takes no name, got %q", sub, pos[1:])
		}
		if sub == "admin" {
			return fleetca.Admin, fleetca.AdminName, exitOK
		}
		return "", "", exitOK
	case "member", "bridge", "reader":
		if len(pos) != 2 {
			return "", "", fl.usageError("%s takes one NAME, got %d", sub, len(pos)-1)
		}
		if err := fleetca.CheckName(pos[1]); err != nil {
			return "", "", fl.usageError("%v", err)
		}
		return fleetca.Kind(sub), pos[1], exitOK
	default:
		return "", "", fl.usageError("unknown subcommand %q: want init, member, bridge, reader or admin", sub)
	}
}

// memberHosts returns the hosts of member name's URLs in file.
func memberHosts(file, name string, stderr io.Writer) ([]string, int) {
	cfg, err := routes.Load(file)
	if err != nil {
		fmt.Fprintf(stderr, "leasebridge certs: %s: invalid configuration:\n  %v\n", file, err)
		return nil, exitInvalid
	}
	var names []string
	for _, m := range cfg.LeaseStore.Members {
		if m.Name == name {
			hosts, err := fleetca.HostsOf(m.PeerURL, m.ClientURL)
			if err != nil {
				fmt.Fprintf(stderr, "leasebridge certs: %s: member %s: %v\n", file, name, err)
				return nil, exitInvalid
			}
			return hosts, exitOK
		}
		names = append(names, m.Name)
	}
	fmt.Fprintf(stderr, "leasebridge certs: %s: no member %q in lease_store.members (%s)\n", file, name, strings.Join(names, ", "))
	return nil, exitInvalid
}

func issue(dir string, kind fleetca.Kind, name string, hosts []string, stdout, stderr io.Writer) int {
	f, err := fleetca.Issue(dir, kind, name, hosts, time.Now())
	if err != nil {
		fmt.Fprintf(stderr, "leasebridge certs %s: %v\n", kind, err)
		if errors.Is(err, fleetca.ErrName) || errors.Is(err, fleetca.ErrNoHosts) {
			return exitInvalid
		}
		return exitRefused
	}
	fmt.Fprintf(stdout, "wrote %s and %s (%s %s", f.Cert, f.Key, kind, name)
	if len(hosts) > 0 {
		fmt.Fprintf(stdout, ", hosts %s", strings.Join(hosts, ", "))
	}
	fmt.Fprintln(stdout, ")")
	return exitOK
}

// parseWithPositionals parses flags anywhere among positional arguments
// and returns the positional ones: `certs member gw-1 --dir pki` and
// `certs --dir pki member gw-1`.
func (f *flagSet) parseWithPositionals(args []string) ([]string, error) {
	var pos []string
	for {
		err := f.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			f.writeHelp(f.stdout)
			return nil, err
		}
		if err != nil {
			// parse prints the error and the usage hint once.
			return nil, f.parse(args)
		}
		if f.NArg() == 0 {
			return pos, nil
		}
		pos, args = append(pos, f.Arg(0)), f.Args()[1:]
	}
}
