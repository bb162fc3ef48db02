/* ha_cluster_fixture.h -- a real HA cluster for tests and benchmarks: one
 * etcd (etcd_fixture.c, 1 or 3 members), three store_master processes in HA
 * mode (harness.c: their own Unix sockets and data dirs, one shared snapshot
 * directory, a key prefix of their own in etcd, no embedded node) and, when
 * asked, one store_node given the list of all three masters.
 *
 * Calls return 0 or -1 (never fail a cmocka test themselves), so that a
 * benchmark can use them too; a wait that times out prints the logs that
 * explain it. hc_cleanup kills and removes everything, and may be called
 * after a failure at any point. */
#ifndef TEST_HA_CLUSTER_FIXTURE_H
#define TEST_HA_CLUSTER_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "etcd_fixture.h"
#include "harness.h"

#define HC_MASTERS 3

typedef struct hc_cluster {
    etcd_fixture etcd;
    char snapdir[300];        /* ha.snapshot_dir of every master */
    char prefix[64];          /* ha.prefix: unique to this cluster */
    char masters[320];        /* every master's socket, comma-separated */
    hx_master m[HC_MASTERS];  /* master i has ha.id "m<i>" */
    hx_node node;             /* pid 0 until hc_node_start */
    unsigned lease_ttl_s;     /* ha.lease_ttl_s written by hc_configure; 0: 1 s */
    const char *etcd_endpoints[HC_MASTERS]; /* master i's ha.etcd_endpoints; NULL: etcd's own */
} hc_cluster;

/* Start etcd (etcd_members: 1 or 3) and prepare the three masters' dirs
 * (name tags them); nothing of the masters runs yet. On failure (-1)
 * everything it made is stopped and removed. */
int hc_init(hc_cluster *c, const char *name, size_t etcd_members);

/* The same with TLS on etcd's client port (etcd_fixture_start_tls: the
 * certificates in c->etcd.certs); the masters' configs must then name
 * them (ha.etcd_tls_*), through hc_configure's extra. */
int hc_init_tls(hc_cluster *c, const char *name, size_t etcd_members, int client_cert_auth);

/* Write master i's config: HA on the cluster's etcd (hx_ha_yaml), then
 * `extra` (YAML appended verbatim; it may continue the ha: mapping with
 * indented keys first; may be NULL), then no embedded node unless extra
 * has a `node:` mapping of its own (which must then say so). Without a
 * `plugins:` in extra, the harness adds the weight plugin. */
int hc_configure(hc_cluster *c, int i, const char *extra);

/* *view becomes a copy of master 0 whose socket is the list of all three
 * (clients given it follow the leader) and which is not running (pid 0):
 * what a test hands to code that takes one hx_master. 0, or -1 when the
 * list does not fit. */
int hc_list_view(const hc_cluster *c, hx_master *view);

/* Master i's /role, first line (caller frees); NULL when it does not answer. */
char *hc_role(const hx_master *m);

/* Wait until exactly one running master other than `skip` (-1: none) says
 * "leader"; its index, or -1 after timeout_ms (0: one look, silently). */
int hc_wait_leader(hc_cluster *c, int skip, int timeout_ms);

/* Wait until master i's /role starts with want. 0, or -1 (role and log named). */
int hc_wait_role(hc_cluster *c, int i, const char *want, int timeout_ms);

/* Start the store_node (id, segment_bytes) on the list of all masters; its
 * files live in master 0's directory. */
int hc_node_start(hc_cluster *c, const char *id, unsigned long long segment_bytes);

/* Wait until master i has the node registered. 0, or -1 (the node's and
 * the master's log tails printed). */
int hc_wait_node(hc_cluster *c, int i, int timeout_ms);

/* The last lines of a log file on stderr. */
void hc_print_tail(const char *path);

/* Write the leader key as master i's campaign would have left it: its
 * registry entry as the value, under its lease -- what a create that etcd
 * applied but whose answer was lost leaves behind. Waits up to 10 s for
 * the entry (a master answers "standby" before its first registry write).
 * 0, or -1 (why printed). */
int hc_leader_key_of(hc_cluster *c, int i);

/* Kill node, masters (continuing paused ones first) and etcd, and remove
 * every directory. Safe on a partly initialised cluster. */
void hc_cleanup(hc_cluster *c);

#endif /* TEST_HA_CLUSTER_FIXTURE_H */
