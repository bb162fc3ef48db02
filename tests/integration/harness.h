/* harness.h -- real store_master processes for integration tests.
 *
 * A test asks for a fresh directory, writes a config into it (the caller's
 * YAML body appended to a base that points the master's RPC at a Unix socket
 * in that directory, its data_dir inside it and the admin HTTP on an
 * ephemeral loopback port), starts build/bin/store_master as a child process, waits until
 * the socket answers a status call, and later stops it with SIGTERM or kills
 * it with SIGKILL. Everything lives under one mkdtemp directory that
 * hx_cleanup() removes. Nothing here is mocked: the master is the real
 * binary with the real plugin. */
#ifndef TEST_HARNESS_H
#define TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kv_client.h"

typedef struct hx_master {
    char dir[256];        /* the test's directory */
    char config[320];     /* its config file */
    /* The master's Unix socket; set to "" after hx_init, then hx_reconfigure:
     * none, and the harness reaches the master at listen_tcp (over TLS with
     * the environment's WM_TLS_CA, as rpcc_connect). */
    char socket[320];
    char log[320];        /* the master's stderr */
    pid_t pid;            /* 0 when not running */
    int admin_port;       /* the admin HTTP port of the running master */
    int expect_nodes;     /* hx_start waits until this many nodes are up */
    /* YAML lines written under the base `listen:` block (indented by two
     * spaces, e.g. "  max_frame_bytes: 65536\n"); set after hx_init, then
     * hx_reconfigure. Empty: none. */
    char listen_extra[256];
    /* A command the master runs under (e.g. valgrind and its options),
     * NULL-terminated, set after hx_init. NULL: the master runs directly. */
    const char *const *wrap;
    /* The store_master program to run, set after hx_init: a variant a test
     * builds (e.g. the old side of an upgrade). NULL: BUILD_DIR/bin/store_master. */
    const char *binary;
    /* listen.tcp of the base config ("" when empty: no TCP port); set after
     * hx_init, then hx_reconfigure. */
    char listen_tcp[64];
    /* listen.admin of the base config ("" when empty: "127.0.0.1:0"); set
     * after hx_init, then hx_reconfigure. */
    char listen_admin[64];
    /* The PEM CA of the admin endpoint's certificate, for a master with
     * tls.cert: hx_http_get and hx_metric then speak HTTPS verifying against
     * it (admin_https.h). "": plain HTTP. */
    char admin_ca[320];
    /* A client certificate and key hx_http_get presents over HTTPS (for a
     * master with tls.verify_clients). "": none. */
    char admin_cert[320];
    char admin_key[320];
} hx_master;

/* Make a directory under /tmp and write config.yaml: the base settings plus
 * `extra` (YAML appended verbatim; may be NULL). Returns 0 or -1. */
int hx_init(hx_master *m, const char *name, const char *extra);

/* The monotonic clock in milliseconds. Every wait of the harness measures
 * its timeout with it: counting the rounds of a poll instead undercounts,
 * since each round's calls take time too (a status call to a master that
 * accepts but does not answer takes its whole call timeout), so a 20 s wait
 * could run for hours and end as the test's CTest timeout, with no log. */
long long hx_now_ms(void);

/* Start the master and wait (up to timeout_ms) until it answers. Returns 0,
 * or -1 if it exited or never answered (its log is printed). */
int hx_start(hx_master *m, int timeout_ms);

/* Start the master and wait for it to exit by itself (a refused startup):
 * returns its exit status, or -1 if it was still running after timeout_ms. */
int hx_run_to_exit(hx_master *m, int timeout_ms);

/* Start the master and return at once (m->pid set), not waiting for it
 * to serve: one that waits for something first (etcd, say). 0 or -1;
 * stop it with hx_stop or hx_kill. */
int hx_spawn(hx_master *m);

/* 1 when the started master is still running (not exited, not reaped). */
int hx_alive(hx_master *m);

/* Wait up to timeout_ms for the started master to exit by itself (after a
 * signal the test sent): its exit status, or -1 when it was still running
 * (then it is killed). Either way it is reaped. */
int hx_wait_exit(hx_master *m, int timeout_ms);

/* SIGTERM and wait: returns the exit status (0 after a clean shutdown), or
 * -1 when it did not exit within HX_STOP_MS (then it is killed and its log
 * printed, so a master that hangs in its shutdown fails the test). */
#define HX_STOP_MS 60000
int hx_stop(hx_master *m);

/* SIGKILL and reap. */
void hx_kill(hx_master *m);

/* The YAML that makes m one master of an HA cluster (appended to a config
 * with hx_init / hx_reconfigure): the etcd OpLog under prefix on the etcd
 * members at etcd_endpoints, id as its name, its Unix socket advertised
 * (its listen_tcp instead when set: clients of a TLS port are sent there),
 * snapshots in snapdir (NULL: <m->dir>/shared-snapshots), a lease of ttl_s
 * seconds (0: 1 s, which the fixture's etcd allows: it runs with a 500 ms
 * election timeout). It ends inside the ha: mapping. Returns the length
 * written to out, or -1 when cap is too small. */
int hx_ha_yaml(const hx_master *m, const char *id, const char *etcd_endpoints,
               const char *prefix, const char *snapdir, unsigned ttl_s, char *out, size_t cap);

/* A client connected to the running master (timeout 10 s); NULL on failure. */
kvc *hx_client(const hx_master *m);

/* 0 when key reads back through c (a verified read) as exactly the len
 * bytes of want; -1 otherwise, what it read or the client's error on
 * stderr. */
int hx_reads_back(kvc *c, const char *key, const void *want, size_t len);

/* Write len bytes of data at offset of the segment file path, as a
 * co-located writer copies into its mapping. 0, or -1 (why on stderr). */
int hx_write_segment(const char *path, uint64_t offset, const void *data, size_t len);

/* 1 when w's range of len bytes shares a byte with where's (same segment). */
int hx_ranges_meet(const kvc_replica *w, const kvc_replica *where, size_t len);

/* What a master that took over a handed-on put (PUT_HANDOFF) must do, asked
 * through c: key's put (len bytes of a; its first half already written at
 * *where) keeps its range from a new put of other (b), which is written and
 * ended; then the rest of a is written, key's put end is taken, and both
 * objects read back byte for byte. 0, or -1 with why. */
int hx_finish_handed_put(kvc *c, const char *key, const kvc_replica *where, const uint8_t *a,
                         const char *other, const uint8_t *b, size_t len, char *why, size_t cap);

/* What a master that never heard of key's put (under 1 MiB, started by the
 * master before it, which died) must do, asked through c: a new put of
 * other (len bytes of b) is not placed over key's range *where (its write
 * zone is held back), and is written and ended; key's writer then copies
 * the rest of a late into its old range, which damages nothing: key's put
 * end is refused SMP_ENOTFOUND, and other reads back byte for byte. 0, or
 * -1 with why. */
int hx_finish_unknown_put(kvc *c, const char *key, const kvc_replica *where, const uint8_t *a,
                          const char *other, const uint8_t *b, size_t len, char *why,
                          size_t cap);

/* GET path from the running master's admin HTTP endpoint (HTTPS when
 * admin_ca is set). Returns the HTTP status and a malloc'd body (caller
 * frees), or -1 (no HTTP answer, none within 10 s included). */
int hx_http_get(const hx_master *m, const char *path, char **body);

/* The value of the /metrics line `series` (name and labels, as printed)
 * of the running master; -1 when the line or the endpoint is missing. */
double hx_metric(const hx_master *m, const char *series);
/* Poll hx_metric every 50 ms until series reads want: 0, or -1 after
 * timeout_ms (the last reading said on stderr). */
int hx_wait_metric(const hx_master *m, const char *series, double want, int timeout_ms);

/* Copy the master's log to stderr (to explain a failure). */
void hx_print_log(const hx_master *m);

/* 1 when the master's log contains needle. */
int hx_log_contains(const hx_master *m, const char *needle);

/* How many times needle occurs in the file at path (a log; 0 when it cannot
 * be read). */
int hx_file_count(const char *path, const char *needle);
/* 1 once the master's log contains needle, polled every 10 ms for up to
 * timeout_ms; 0 when it never did. */
int hx_wait_log(const hx_master *m, const char *needle, int timeout_ms);
/* The text of the file at path into text[cap] ("" when it cannot be
 * read; cut at cap - 1 bytes). */
void hx_read_text(const char *path, char *text, size_t cap);
/* The cold files the k-th (from 1) background fsck that ended in the
 * master's log read (0: no such run). */
unsigned long long hx_background_fsck_files(const hx_master *m, unsigned k);

/* 1 when text contains needle; otherwise 0 and both are printed (for
 * assert_true(hx_says(error_message, "expected cause"))). */
int hx_says(const char *text, const char *needle);

/* Write text to the file at path through a rename of path.tmp, as an
 * operator's tool renews a file: a reader sees the old file or the new
 * one, never part of one. 0, or -1 with the cause on stderr. */
int hx_replace_file(const char *path, const char *text);

/* 1 when the file at path (a log, read whole) contains needle. */
int hx_file_contains(const char *path, const char *needle);

/* Remove dir and the files directly in it (a test's own directory outside
 * its master's, e.g. cold files in /dev/shm); a missing dir is fine. */
void hx_remove_dir(const char *dir);

/* Leftovers of test processes killed before their cleanup (hx_leftovers.c).
 * hx_own_dir marks dir (made by this process) as this process's: once the
 * process is gone, the next hx_sweep_leftovers removes it. 0 or -1.
 * hx_disown_dir takes the mark away (data kept on purpose, e.g. a
 * benchmark's WM_BENCH_KEEP). hx_sweep_leftovers removes the marked wm-*
 * directories of TMPDIR (/tmp) and /dev/shm whose process is gone; it runs
 * once per process, from the first hx_init (and the etcd fixture). */
int hx_own_dir(const char *dir);
/* Make dir (0700; it must not exist) and hx_own_dir it: a directory of
 * this process's outside its master's (a benchmark's segment in /dev/shm)
 * that a kill before its cleanup leaves to the next sweep. 0, or -1 with
 * errno set. */
int hx_own_new_dir(const char *dir);
void hx_disown_dir(const char *dir);
void hx_sweep_leftovers(void);

/* Rewrite config.yaml with another `extra` (the base stays). */
int hx_reconfigure(hx_master *m, const char *extra);

/* Kill a running master and remove the directory. */
void hx_cleanup(hx_master *m);

/* A framed RpcRequest as a client sends it (4-byte big-endian length, then
 * the message); *len its size. malloc'd (caller frees), NULL when out of
 * memory. For tests that write frames by hand. */
uint8_t *hx_frame_request(uint64_t request_id, uint32_t service, uint32_t method,
                          const uint8_t *body, size_t body_len, size_t *len);

/* The whole file at path, malloc'd with a NUL after its bytes, so a text
 * file reads as a string (caller frees); *len its size. NULL when it
 * cannot be read. */
uint8_t *hx_read_file(const char *path, size_t *len);

/* One line per file of the master's data/oplog and data/snapshots: name,
 * size and SHA-256, in name order (malloc'd, caller frees; NULL when a
 * file cannot be read). Equal fingerprints: nothing was written, created
 * or deleted there. */
char *hx_data_fingerprint(const hx_master *m);

/* Run the master's start, which must be refused: 1 when it exits with
 * status 1 within timeout_ms, its log says needle (and also, if given) and
 * not never (if given), holds no sanitizer report, and not a byte of
 * data/oplog or data/snapshots changed; otherwise 0 with the log and the
 * reason printed. */
int hx_start_refused(hx_master *m, int timeout_ms, const char *needle, const char *also,
                     const char *never);

/* In a child between fork and exec of a server the test starts: killed
 * when the test dies, stdout and stderr appended to log (kept as they are
 * when it does not open), and every other descriptor of the test closed. A
 * socket the test or one of its threads (fault_proxy) holds open would
 * otherwise live on in the server as long as it runs: a peer of that
 * socket would never see it closed. */
void hx_child_setup(const char *log);

/* SHA-256 of a string, for checksums in tests. */
void hx_sha256(const void *data, size_t len, unsigned char out[32]);

/* Fill the cold directory dir with n files of 64 bytes under keys no
 * master knows: "<prefix>/<i, 5 digits>/" padded with 'k' to key_bytes
 * bytes (key_bytes at most 1024 and longer than the prefix and number).
 * 0, or -1 with the cause on stderr. */
int hx_cold_fill(const char *dir, const char *prefix, int n, int key_bytes);

/* Make TLS keys and certificates in dir with the openssl CLI (P-256, valid
 * two days): ca.pem (+ ca.key), server.pem / server.key signed by it for
 * IP 127.0.0.1 and DNS localhost, client.pem / client.key signed by it, and
 * other-ca.pem / other.key, a CA nothing is signed by. The CLI's output goes
 * to dir/certs.log. 0, or -1. */
int hx_make_certs(const char *dir);

/* A store_node process attached to a master. */
typedef struct hx_node {
    char id[64];
    char cold_dir[320];
    char segment_dir[320];
    char log[320];
    pid_t pid;
} hx_node;

/* Start build/bin/store_node for the master (segment under <dir>/nodes,
 * cold files in <dir>/cold-<id>), with a segment of segment_bytes. The node
 * registers by itself; use hx_wait_nodes. Returns 0 or -1. */
int hx_node_start(const hx_master *m, hx_node *n, const char *id, unsigned long long segment_bytes);
/* The same with more store_node arguments (extra: NULL-terminated, at most
 * 16; NULL: none), e.g. --tenant and its --local-socket and --local-peer. */
int hx_node_start_args(const hx_master *m, hx_node *n, const char *id,
                       unsigned long long segment_bytes, const char *const *extra);
void hx_node_kill(hx_node *n);
/* SIGTERM and wait, as hx_stop (-1 and killed after HX_STOP_MS). */
int hx_node_stop(hx_node *n);

/* Call a method of the replica_probe test plugin (RPC service 42: 1
 * ensure_cold, 2 ensure_memory, 3 release_memory, 4 the count of
 * replica-lost events seen for key) for key, on a connection of its own,
 * so from any thread. 0 with *status the call's status and *answer its
 * 4-byte answer (0 when none), or -1 when the call could not be made
 * (*status -1). */
int hx_replica_probe(const hx_master *m, uint32_t method, const char *key, int *status,
                     unsigned *answer);

/* Wait until the master reports exactly `count` nodes up. 0 or -1. */
int hx_wait_nodes(const hx_master *m, unsigned count, int timeout_ms);

#endif /* TEST_HARNESS_H */
