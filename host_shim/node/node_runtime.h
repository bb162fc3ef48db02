/* node_runtime.h -- a running node: segment, cold tier, data server, and the
 * control loop that registers with the master and carries out its tasks.
 *
 * The same code is the store_node program and the node embedded in
 * store_master (node.embedded). It opens (or reopens) its shm-backed segment
 * file and its cold directory, starts its data server on its own libuv loop
 * thread, and runs a control thread that registers with the master -- data
 * address, segment, the key the master signs this node's tickets with (and
 * its id; rotated by node_runtime_rotate_ticket_key), whether its data port
 * speaks TLS (data_tls_cert / data_tls_key), and an inventory of verified
 * cold files -- and then polls: each poll
 * is a heartbeat, says how full the cold directory's file system is and
 * how many cold writes failed (as the registration does too: ColdTierUsage,
 * master_cold_usage.h), returns the results of finished tasks, and brings new
 * ones (persist a range to a cold file, load one back, delete one, verify a
 * range; for fsck, list every cold file and the non-zero blocks of the
 * segment ranges the master says nothing occupies, and zero such ranges).
 * A segment configured larger than its file is grown at start; one
 * configured smaller is registered at the smaller size and cut only once
 * the master agreed that nothing lies past it (a refusal names the bytes
 * in use and is retried every 2 s). When the master goes away the control
 * thread reconnects and registers again. Why it cannot connect or
 * register -- a refused token or role, a TLS port reached without TLS, a
 * master that is down -- is logged once per cause (with a reminder and a
 * count every minute while it lasts); a refusal that will not change by
 * itself (credentials, protocol) is retried ever more slowly, up to every
 * 10 s. Of an HA cluster the node is given every master (a
 * list, master_list.h): it registers with the leader, following a
 * standby's NOT_LEADER answer, and registers again with the new leader when
 * its poll is answered by another master or its connection drops -- no
 * restart; the new leader reconciles the inventory it reports. A node
 * dedicated to a tenant registers with it and serves its local socket
 * (node_local.h) for as long as it runs. */
#ifndef HOST_NODE_RUNTIME_H
#define HOST_NODE_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "node_local.h"

typedef struct node_runtime node_runtime;

typedef struct node_runtime_options {
    const char *master;        /* the master's RPC endpoint (host:port or socket path),
                                * or the list "a,b,c" of an HA cluster's masters */
    const char *node_id;       /* also the segment id */
    const char *segment_dir;
    uint64_t segment_bytes;
    const char *cold_dir;
    const char *data_listen;   /* "host:port"; port 0 picks one */
    const char *advertise_host;/* host in the data address sent to the master; NULL: from data_listen */
    int cold_verify_from_device; /* re-read persisted files from the device, not the page cache */
    int allow_unticketed_reads;  /* INSECURE: serve reads without a master's ticket */
    const char *tls_ca;        /* TLS to the master's TCP port (rpcc_options); NULL: the */
    const char *tls_cert;      /* environment's WM_TLS_*, else plaintext */
    const char *tls_key;
    const char *token;         /* presented to the master (auth.HELLO); NULL: WEIGHT_TOKEN */
    const char *tenant;        /* dedicated to this tenant (node_local.h); NULL: shared */
    const char *local_socket;  /* dedicated: where the segment is handed to local peers */
    const node_local_peers *local_peers; /* dedicated: who gets it (copied) */
    const char *data_tls_cert; /* TLS 1.3 on the data port with this PEM certificate */
    const char *data_tls_key;  /* and its key (both or neither; NULL: plaintext) */
    const char *data_tls_key_prefix; /* how errors name the two: NULL "--data-tls-" */
    int segment_prefault;      /* touch the segment's pages in the background at start
                                  (seg_options.prefault; node.segment_prefault) */
} node_runtime_options;

/* Open the segment and cold tier, start the data server and the control
 * thread. Returns 0 or a negative SMP_E* code with err naming the cause;
 * nothing keeps running on failure. */
int node_runtime_start(const node_runtime_options *opt,
                       node_runtime **out,
                       char *err,
                       size_t errlen);

/* The bound data server port. */
int node_runtime_data_port(const node_runtime *n);

/* Ask the threads to stop without waiting (safe from the master's loop
 * thread, which must keep running until the control thread let go). */
void node_runtime_signal_stop(node_runtime *n);

/* Rotate the node's ticket key: a fresh key with the next id becomes
 * current, the current one stays accepted as the previous one (the key
 * previous before is forgotten), and the master is told in the next poll
 * once the data server checks the new key (it signs with it from then on).
 * The first rotation since the start forgets nothing and is always
 * allowed. A later one is refused with SMP_EBUSY and err naming the wait
 * while the previous key may still sign live tickets: the master has not
 * acknowledged the current key (it still signs with the previous one), or
 * less than the master's ticket life (plus a second of margin) has passed
 * since it did. Any thread. SMP_OK, SMP_EBUSY, SMP_EIO (no random bytes). */
int node_runtime_rotate_ticket_key(node_runtime *n, char *err, size_t errlen);

/* Read the data port's certificate and key again from the files it
 * started with (data_tls_cert / data_tls_key) and serve them from the
 * next connection on; connections already accepted keep their sessions.
 * Files that do not load (missing, not PEM, a key not matching) leave the
 * certificate served before, with err naming the cause as at start. Into
 * what (may be NULL): rpc_tls_describe of the new certificate. Any thread.
 * 1 reloaded, 0 the data port is plaintext (nothing to reload), or a
 * negative SMP_E* code. */
int node_runtime_reload_tls(node_runtime *n, char *what, size_t whatlen, char *err, size_t errlen);

/* The id of the key the master acknowledged (0 before the first
 * registration). */
uint32_t node_runtime_ticket_key_id(node_runtime *n);

/* The call timeout of a registration naming n_cold_files cold files: the
 * 10 s of every call plus NODE_REGISTER_US_PER_FILE for each file (the
 * master checks each against its replicas before it answers, on a loop that
 * may still be busy after its own start: 40,000 files got no answer within
 * 10 s at 100,000 revisions), at most NODE_REGISTER_CALL_MAX_MS. */
#define NODE_REGISTER_US_PER_FILE 500
#define NODE_REGISTER_CALL_MAX_MS 600000
uint32_t node_register_call_ms(size_t n_cold_files);

/* An inventory larger than this (encoded) is sent before the registration
 * in NODE_INVENTORY pages of about this size, each as soon as the scan of
 * the cold tier has found its files; a smaller one rides in the
 * registration itself. */
#define NODE_INVENTORY_PAGE_BYTES (256u << 10)

/* The call timeout of an inventory page once n_files_sent files went in
 * this and earlier pages: that of a registration naming them
 * (node_register_call_ms). The master answers pages from a loop that may
 * still be busy with its own start, more so the larger the store. */
uint32_t node_inventory_page_call_ms(size_t n_files_sent);

/* Stop the threads, close everything (the segment file stays). NULL ok. */
void node_runtime_stop(node_runtime *n);

#endif /* HOST_NODE_RUNTIME_H */
