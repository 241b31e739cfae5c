package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/leasebridge/leasebridge/lease/etcdauth"
	"github.com/leasebridge/leasebridge/routes"
)

// rolesCall bounds `store roles`: a handful of small writes.
const rolesCall = 30 * time.Second

const storeRolesAbout = `
Turns on the fleet store's authentication by certificate name: every
--bridge NAME becomes an etcd user that may read and write the rows under
lease_store.key_prefix and the endpoint claims; every --reader NAME one that
may only read them ('leasebridge status'); etcd's root user gets no password,
so only the admin certificate (common name root, 'leasebridge certs admin')
administers the store. A certificate of the fleet with no such name can then
read nothing. It runs again to add a bridge or a reader. The first run may use
any certificate of the fleet (the file's lease_store.tls); later runs need
the admin certificate (--cert, --key). Exit %[1]d when done, %[2]d when the
store refused (authentication is on and the certificate is not the admin's),
%[3]d for an invalid file or command line, 3 when no member answered.
`

const storeRolesExamples = `  # once the members run: each gateway's bridge, and a SCADA server reading
  leasebridge store roles -c /etc/leasebridge/config.yaml --bridge edge-gw-1 --bridge edge-gw-2 --bridge edge-gw-3 --reader scada
  # later, to add a reader, as the administrator
  leasebridge store roles -c /etc/leasebridge/config.yaml --bridge edge-gw-1 --bridge edge-gw-2 --bridge edge-gw-3 --reader ops --cert pki/admin.crt --key pki/admin.key
`

// storeRoles is `leasebridge store roles -c FILE --bridge NAME...
// [--reader NAME...] [--cert FILE --key FILE]`.
func storeRoles(args []string, stdout, stderr io.Writer) int {
	fl := newFlags("store", stdout, stderr)
	// Its own help and usage lines, whatever store's are.
	fl.cmd = command{name: "store roles", synopsis: "-c FILE --bridge NAME... [--reader NAME...] [--cert FILE --key FILE]",
		about: storeRolesAbout, examples: storeRolesExamples}
	file := fl.String("c", "", "configuration file: the members (or endpoints), key_prefix and CA")
	var bridges, readers hostList
	fl.Var(&bridges, "bridge", "a bridge's certificate name: read and write (repeatable)")
	fl.Var(&readers, "reader", "a reader's certificate name: read only (repeatable)")
	cert := fl.String("cert", "", "the certificate to act with (default lease_store.tls cert_file); the admin's once authentication is on")
	key := fl.String("key", "", "its key (default lease_store.tls key_file)")
	if err := fl.parse(args); err != nil {
		return flagStatus(err)
	}
	switch {
	case *file == "":
		return fl.usageError("-c FILE is required")
	case len(bridges) == 0:
		return fl.usageError("give at least one --bridge NAME: with no bridge user, no bridge could write a row")
	case (*cert == "") != (*key == ""):
		return fl.usageError("--cert and --key go together")
	}
	cfg, err := routes.Load(*file)
	if err != nil {
		fmt.Fprintf(stderr, "leasebridge store roles: %s: invalid configuration:\n  %v\n", *file, err)
		return exitInvalid
	}
	ac, problem := rolesConfig(cfg, *cert, *key)
	if problem != "" {
		fmt.Fprintf(stderr, "leasebridge store roles: %s: %s\n", *file, problem)
		return exitInvalid
	}
	err = etcdauth.Apply(context.Background(), ac, cfg.LeaseStore.KeyPrefix, bridges, readers)
	switch {
	case errors.Is(err, etcdauth.ErrIdentity):
		fmt.Fprintf(stderr, "leasebridge store roles: %v\n", err)
		return exitInvalid
	case errors.Is(err, etcdauth.ErrUnreachable):
		fmt.Fprintf(stderr, "leasebridge store roles: %v\n", err)
		return exitStoreDown
	case err != nil:
		fmt.Fprintf(stderr, "leasebridge store roles: %v\n", err)
		return exitRefused
	}
	spaces := strings.Join(etcdauth.KeySpaces(cfg.LeaseStore.KeyPrefix), " and ")
	fmt.Fprintf(stdout, "role %s (read and write %s): %s\n", etcdauth.BridgeRole, spaces, strings.Join(bridges, ", "))
	fmt.Fprintf(stdout, "role %s (read %s): %s\n", etcdauth.ReaderRole, spaces, orDash(strings.Join(readers, ", ")))
	fmt.Fprintf(stdout, "authentication is on: a certificate acts as the user of its common name; root (admin.crt) administers\n")
	return exitOK
}

// rolesConfig is where and as whom `store roles` connects: the members'
// client URLs (or lease_store.endpoints) with the file's CA and client
// certificate, or cert and key when given; problem says what is missing.
func rolesConfig(cfg *routes.Config, cert, key string) (ac etcdauth.Config, problem string) {
	ls := cfg.LeaseStore
	ac.Endpoints, ac.Timeout = ls.Endpoints, rolesCall
	for _, m := range ls.Members {
		ac.Endpoints = append(ac.Endpoints, m.ClientURL)
	}
	if len(ac.Endpoints) == 0 {
		return ac, "no lease_store.members or endpoints: roles belong to a shared store"
	}
	if ls.TLS != nil {
		ac.CAFile, ac.CertFile, ac.KeyFile = ls.TLS.CAFile, ls.TLS.CertFile, ls.TLS.KeyFile
	}
	if cert != "" {
		ac.CertFile, ac.KeyFile = cert, key
	}
	if ac.CAFile == "" || ac.CertFile == "" || ac.KeyFile == "" {
		return ac, "lease_store.tls needs ca_file, cert_file and key_file (or give --cert and --key): the store knows a client only by its certificate"
	}
	return ac, ""
}
