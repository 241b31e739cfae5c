package main

// The help of the fleet commands (docs/status-json.md); formats as in
// help.go.

const statusAbout = `
Reads the lease store the file names, with its credentials and TLS, and
prints every session of the file: owner node, epoch, row age, the owner's
lease timing, service level, pinning, the live nodes that could take it, and
any timing mismatch or standing handover; then every node row. It opens no
device and no broker. Exit %[1]d when every session is owned, %[2]d when one
is unowned or stale (its owner is gone and no eligible node took it), %[3]d
for an invalid file or command line, 3 when the store cannot be read.
`

const statusExamples = `  # the fleet at a glance
  leasebridge status -c /etc/leasebridge/bridge.yaml
  # for scripts and monitoring (docs/status-json.md)
  leasebridge status -c /etc/leasebridge/bridge.yaml --json
`

const handoverAbout = `
Asks the owner of SESSION, through the lease store, to hand it over: to NODE,
or to any other live eligible node. The owner closes its transports, releases
the row and does not compete again until another node owns it or the
handover budget has passed; the target takes the row at once. Prints the
budget (close + release + standby_pickup + activation) and waits for the row
to change hands. No process restarts. Exit %[1]d when it changed hands within
the budget, %[2]d when refused (no owner, NODE not eligible, not live,
draining or already the owner) or late, %[3]d for an invalid file, command
line or session, 3 when the store cannot be reached.
`

const handoverExamples = `  # move press-1 to the gateway cabled to it
  leasebridge handover press-1 --to edge-gw-1 -c /etc/leasebridge/bridge.yaml
  # move it anywhere else
  leasebridge handover press-1 -c /etc/leasebridge/bridge.yaml
`

const drainAbout = `
Writes a drain request for NODE into the lease store. The node stops
competing for the sessions it does not own and hands the owned ones over, one
at a time, each after the previous one has a new owner or its handover
budget has passed; drained, it takes nothing until undrained. Exit %[1]d when
the request is written, %[3]d for an invalid file or command line, 3 when the
store cannot be written. 'leasebridge status' shows the progress.
`

const drainExamples = `  # before maintenance on edge-gw-1
  leasebridge drain edge-gw-1 -c /etc/leasebridge/bridge.yaml
`

const undrainAbout = `
Deletes the drain request of NODE: it competes for its sessions again at
once. Exit %[1]d when the request is deleted, %[3]d for an invalid file or
command line, 3 when the store cannot be written.
`

const undrainExamples = `  # after maintenance
  leasebridge undrain edge-gw-1 -c /etc/leasebridge/bridge.yaml
`

const storeAbout = `
With lease_store.members the fleet is its own lease store: one etcd member
per listed node, each in its own process, so a bridge that exits never takes
a member with it. "store -c FILE" runs the member of the file's node until
SIGTERM or SIGINT (exit %[1]d), in data_dir/store. The first start of every
member bootstraps the cluster from the list; a restarted member rejoins with
its data. A start is refused (exit %[3]d, nothing written) when the node is
not a member, when its member list differs from the running cluster's (both
are named), when its data directory belongs to another member or cluster,
and when its data was lost while its cluster runs: then run
"store replace NAME" on another node and start it again. A file with members
and no routes is a witness's: it runs "store" only. An even member count is
warned about: two members cannot survive the loss of either. After a quorum
loss that lost a majority's data, every member is started empty once with
--new-cluster-token (docs/operations.md, quorum loss).

Subcommands, each with --json, exit 3 when no member answers:
  members         each member: reachable, leader, raft term and index,
                  database size, alarms; exit %[2]d unless all are healthy
  replace NAME    remove the lost member NAME and add it back empty (refused,
                  exit %[2]d, while it answers); prints what to do next
  snapshot OUT    every session row, to the file OUT
  restore IN      every row of IN and of the store released, each epoch
                  raised above both by max(1e9, 1e6/s x age of IN), so no
                  epoch stamped before is handed out again
  roles           authentication on: the members' and --bridge certificate
                  names read and write the rows, --reader names only read
                  them, any other name nothing; afterwards only a
                  certificate named root changes members or roles
docs/operations.md and docs/fleet-store.md walk through each.
`

const storeExamples = `  # the member of this gateway (its own systemd unit, beside run's)
  leasebridge store -c /etc/leasebridge/bridge.yaml
  # the members' health, for scripts
  leasebridge store members -c /etc/leasebridge/bridge.yaml --json
  # gw-2 lost its disk: replace it, then start its store with an empty data_dir
  leasebridge store replace gw-2 -c /etc/leasebridge/bridge.yaml
  # nightly backup, and a restore after a rebuild
  leasebridge store snapshot /var/backups/leases.json -c /etc/leasebridge/bridge.yaml
  leasebridge store restore /var/backups/leases.json -c /etc/leasebridge/bridge.yaml
  # once: bridges write, the monitor's certificate only reads (run with a root certificate in lease_store.tls)
  leasebridge store roles --reader monitor -c /etc/leasebridge/admin.yaml
`
