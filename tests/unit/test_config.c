/* test_config.c -- unit tests of the config loader (host_shim/config.c).
 *
 * Pins the defaults, the shipped config/embedded.yaml, every refusal of the
 * strict schema (one "FILE:LINE: key.path: cause" message and a zeroed config
 * afterwards), the plugin block kept verbatim with its lines, the cluster
 * defaults as plugins see them, and relative path resolution. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"

#define EMBEDDED SOURCE_DIR "/config/embedded.yaml"

static int is_zeroed(const host_config *cfg)
{
    static const host_config zero;
    return memcmp(cfg, &zero, sizeof(zero)) == 0;
}

static int load(const char *yaml, host_config *cfg, char *err, size_t errlen)
{
    return host_config_load_string("x.yaml", yaml, "/etc/wm", cfg, err, errlen);
}

/* Load `yaml` expecting a refusal whose message contains `want`; the
 * config must come back zeroed. */
static void expect_refused(const char *yaml, const char *want)
{
    host_config cfg;
    char err[512];
    memset(&cfg, 0xa5, sizeof(cfg));
    int rc = load(yaml, &cfg, err, sizeof(err));
    if (rc >= 0 || strstr(err, want) == NULL)
        fail_msg("yaml:\n%s\nrc=%d\nmessage: [%s]\nwanted: [%s]", yaml, rc, err, want);
    assert_true(is_zeroed(&cfg));
    host_config_free(&cfg); /* harmless on a zeroed config */
}

/* Load `yaml` expecting exactly the message `want`. */
static void expect_message(const char *yaml, const char *want)
{
    host_config cfg;
    char err[512];
    int rc = load(yaml, &cfg, err, sizeof(err));
    assert_true(rc < 0);
    assert_string_equal(err, want);
    assert_true(is_zeroed(&cfg));
}

static void load_ok(const char *yaml, host_config *cfg)
{
    char err[512] = "";
    int rc = load(yaml, cfg, err, sizeof(err));
    if (rc != 0) fail_msg("yaml:\n%s\nrc=%d message: %s", yaml, rc, err);
}

/* ---------------------------------------------------------------------- */

static void assert_default_values(const host_config *c)
{
    assert_string_equal(c->listen_tcp, "127.0.0.1:7600");
    assert_string_equal(c->listen_unix, "");
    assert_string_equal(c->listen_admin, "127.0.0.1:7680");
    assert_int_equal(c->max_frame_bytes, 67108864);
    assert_int_equal(c->oplog_backend, HOST_OPLOG_FILE);
    assert_int_equal(c->oplog_segment_bytes, 67108864);
    assert_int_equal(c->oplog_max_batch_records, 4096);
    assert_int_equal(c->oplog_preallocate, 1);
    assert_int_equal(c->snapshot_every_records, 100000);
    assert_int_equal(c->snapshot_keep, 2);
    assert_int_equal(c->snapshot_write_timeout_s, 900);
    assert_int_equal(c->fsck_every_s, 604800);
    assert_int_equal(c->fsck_bytes_per_s, 67108864);
    assert_true(c->memory_high_watermark == 0.95);
    assert_true(c->memory_low_watermark == 0.85);
    assert_int_equal(c->memory_evict_without_cold_copy, 0);
    assert_int_equal(c->ha_enabled, 0);
    assert_string_equal(c->ha_id, "");
    assert_string_equal(c->ha_etcd_endpoints, "");
    assert_string_equal(c->ha_prefix, "/weight_mgmt/");
    assert_int_equal(c->ha_lease_ttl_s, 2);
    assert_string_equal(c->ha_advertise, "");
    assert_string_equal(c->ha_snapshot_dir, "");
    assert_int_equal(c->ha_gc_keep_records, 10000);
    assert_int_equal(c->ha_fast_failover, 1);
    assert_int_equal(c->node_embedded, 1);
    assert_string_equal(c->node_segment_dir, "/dev/shm/weight_mgmt");
    assert_int_equal(c->node_segment_bytes, 1073741824);
    assert_int_equal(c->node_segment_prefault, 0);
    assert_int_equal(c->cluster.default_weight_preferred_residency, HOST_RESIDENCY_MIXED);
    assert_true(c->cluster.default_weight_mixed_hot_ratio == 0.5);
    assert_int_equal(c->cluster.default_weight_migration_mode, HOST_MODE_AUTO);
    assert_int_equal(c->cluster.weight_management_oplog_capability_confirmed, 0);
    assert_int_equal(c->cluster.weight_lineage_oplog_capability_confirmed, 0);
    assert_int_equal(c->cluster.weight_migration_cooldown_ms, 30000);
    assert_int_equal(c->cluster.weight_migration_max_members_per_round, 64);
    assert_int_equal(c->cluster.weight_migration_max_bytes_per_round, 1073741824);
}

/* host_config_defaults fills every documented default; paths stay
 * unresolved (there is no file to resolve them against). */
static void test_defaults(void **state)
{
    (void)state;
    host_config c;
    assert_int_equal(host_config_defaults(&c), 0);
    assert_default_values(&c);
    assert_int_equal(c.node_ticket_ttl_ms, 60000);
    assert_int_equal(c.node_put_timeout_ms, 65000);
    assert_int_equal(c.node_require_read_tickets, 1);
    assert_int_equal(c.node_allow_insecure_reads, 0);
    assert_string_equal(c.data_dir, "var/data");
    assert_string_equal(c.node_cold_dir, "var/data/cold");
    assert_null(c.plugins);
    assert_int_equal(c.n_plugins, 0);
    host_config_free(&c);
    assert_true(is_zeroed(&c));
    host_config_free(&c); /* twice is fine */
}

/* An empty document, a comment-only one and a bare "---" are all defaults,
 * with relative defaults resolved against base_dir. */
static void test_empty_file_is_all_defaults(void **state)
{
    (void)state;
    static const char *const texts[] = { "", "# nothing here\n\n", "---\n", "--- ~\n" };
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        host_config c;
        load_ok(texts[i], &c);
        assert_default_values(&c);
        assert_string_equal(c.source, "x.yaml");
        assert_string_equal(c.base_dir, "/etc/wm");
        assert_string_equal(c.data_dir, "/etc/wm/var/data");
        assert_string_equal(c.node_cold_dir, "/etc/wm/var/data/cold");
        assert_int_equal(c.n_plugins, 0);
        host_config_free(&c);
    }
}

/* A real empty file on disk loads too. */
static void test_empty_file_on_disk(void **state)
{
    (void)state;
    char path[] = BUILD_DIR "/test_config_empty_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    host_config c;
    char err[256];
    assert_int_equal(host_config_load(path, &c, err, sizeof(err)), 0);
    assert_default_values(&c);
    assert_string_equal(c.source, path);
    assert_string_equal(c.base_dir, BUILD_DIR);
    assert_string_equal(c.data_dir, BUILD_DIR "/var/data");
    host_config_free(&c);
    unlink(path);
}

/* The shipped default config loads and says what make run expects. */
static void test_embedded_yaml(void **state)
{
    (void)state;
    host_config c;
    char err[256] = "";
    int rc = host_config_load(EMBEDDED, &c, err, sizeof(err));
    if (rc != 0) fail_msg("%s", err);
    assert_default_values(&c);
    assert_string_equal(c.source, EMBEDDED);
    assert_string_equal(c.base_dir, SOURCE_DIR "/config");
    assert_string_equal(c.data_dir, SOURCE_DIR "/config/../var/data");
    assert_string_equal(c.node_cold_dir, SOURCE_DIR "/config/../var/data/cold");
    assert_int_equal(c.n_plugins, 1);
    assert_string_equal(c.plugins[0].path, SOURCE_DIR "/config/../build/lib/weight_mgmt.so");
    assert_int_equal(c.plugins[0].enabled, 1);
    assert_non_null(c.plugins[0].block);
    assert_int_equal(c.plugins[0].block->kind, HOST_CFG_MAP);
    assert_int_equal(c.plugins[0].block->n_items, 0);
    assert_true(c.plugins[0].line > 0);
    host_config_free(&c);
}

/* Loading a relative file name makes base_dir absolute (against the working
 * directory), so paths survive a later chdir. */
static void test_relative_file_name(void **state)
{
    (void)state;
    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    assert_int_equal(chdir(SOURCE_DIR), 0);
    host_config c;
    char err[256] = "";
    int rc = host_config_load("config/embedded.yaml", &c, err, sizeof(err));
    int back = chdir(cwd);
    if (rc != 0) fail_msg("%s", err);
    assert_int_equal(back, 0);
    assert_string_equal(c.source, "config/embedded.yaml");
    assert_string_equal(c.base_dir, SOURCE_DIR "/config");
    assert_string_equal(c.plugins[0].path, SOURCE_DIR "/config/../build/lib/weight_mgmt.so");
    host_config_free(&c);
}

/* Every field set to a non-default value is read back. */
static void test_every_key_is_read(void **state)
{
    (void)state;
    host_config c;
    load_ok("listen:\n"
            "  tcp: \"0.0.0.0:9000\"\n"
            "  unix: /run/wm.sock\n"
            "  admin: \"\"\n"
            "  max_frame_bytes: 1024\n"
            "data_dir: /srv/wm\n"
            "oplog:\n"
            "  backend: etcd\n"
            "  segment_bytes: 4096\n"
            "  max_batch_records: 1\n"
            "  preallocate: false\n"
            "snapshot:\n"
            "  every_records: 0\n"
            "  keep: 1\n"
            "  write_timeout_s: 30\n"
            "fsck:\n"
            "  every_s: 0\n"
            "  bytes_per_s: 1048576\n"
            "memory:\n"
            "  high_watermark: 0.9\n"
            "  low_watermark: 0.1\n"
            "  evict_without_cold_copy: true\n"
            "ha:\n"
            "  enabled: true\n"
            "  id: m-1\n"
            "  etcd_endpoints: \"127.0.0.1:2379,[::1]:2380\"\n"
            "  prefix: /wm/a/\n"
            "  lease_ttl_s: 5\n"
            "  advertise: \"10.0.0.1:7600\"\n"
            "  snapshot_dir: shared/snaps\n"
            "  gc_keep_records: 0\n"
            "  fast_failover: false\n"
            "  etcd_tls_ca: pki/etcd-ca.pem\n"
            "  etcd_tls_cert: pki/m-1.pem\n"
            "  etcd_tls_key: /secret/m-1.key\n"
            "node:\n"
            "  embedded: true\n"
            "  segment_dir: /dev/shm/x\n"
            "  segment_bytes: 1048576\n"
            "  segment_prefault: true\n"
            "  ticket_ttl_ms: 5000\n"
            "  require_read_tickets: false\n"
            "  allow_insecure_reads: true\n"
            "cluster:\n"
            "  default_weight_preferred_residency: hot\n"
            "  default_weight_mixed_hot_ratio: 0.25\n"
            "  default_weight_migration_mode: \"manual\"\n"
            "  weight_management_oplog_capability_confirmed: true\n"
            "  weight_lineage_oplog_capability_confirmed: true\n"
            "  weight_migration_cooldown_ms: 0\n"
            "  weight_migration_max_members_per_round: 1\n"
            "  weight_migration_max_bytes_per_round: 18446744073709551615\n"
            "auth:\n"
            "  enabled: true\n"
            "  allow_insecure: true\n"
            "  node_token_file: keys/node.token\n"
            "  tokens:\n"
            "    - {sha256: \"9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08\", "
            "tenant: team-a, role: writer}\n",
            &c);
    assert_int_equal(c.auth_enabled, 1);
    assert_int_equal(c.auth_allow_insecure, 1);
    assert_string_equal(c.auth_node_token_file, "/etc/wm/keys/node.token");
    assert_int_equal(c.auth_n_tokens, 1);
    assert_string_equal(c.auth_tokens[0].tenant, "team-a");
    assert_int_equal(c.auth_tokens[0].role, SMP_ROLE_WRITER);
    assert_int_equal(c.auth_tokens[0].sha256[0], 0x9f);
    assert_int_equal(c.auth_tokens[0].sha256[31], 0x08);
    assert_string_equal(c.listen_tcp, "0.0.0.0:9000");
    assert_string_equal(c.listen_unix, "/run/wm.sock");
    assert_string_equal(c.listen_admin, "");
    assert_int_equal(c.max_frame_bytes, 1024);
    assert_string_equal(c.data_dir, "/srv/wm");
    assert_string_equal(c.node_cold_dir, "/srv/wm/cold");
    assert_int_equal(c.oplog_backend, HOST_OPLOG_ETCD);
    assert_int_equal(c.oplog_segment_bytes, 4096);
    assert_int_equal(c.oplog_max_batch_records, 1);
    assert_int_equal(c.oplog_preallocate, 0);
    assert_int_equal(c.snapshot_every_records, 0);
    assert_int_equal(c.snapshot_keep, 1);
    assert_int_equal(c.snapshot_write_timeout_s, 30);
    assert_int_equal(c.fsck_every_s, 0);
    assert_int_equal(c.fsck_bytes_per_s, 1048576);
    assert_true(c.memory_high_watermark == 0.9);
    assert_true(c.memory_low_watermark == 0.1);
    assert_int_equal(c.memory_evict_without_cold_copy, 1);
    assert_int_equal(c.ha_enabled, 1);
    assert_string_equal(c.ha_id, "m-1");
    assert_string_equal(c.ha_etcd_endpoints, "127.0.0.1:2379,[::1]:2380");
    assert_string_equal(c.ha_prefix, "/wm/a/");
    assert_int_equal(c.ha_lease_ttl_s, 5);
    assert_string_equal(c.ha_advertise, "10.0.0.1:7600");
    assert_string_equal(c.ha_snapshot_dir, "/etc/wm/shared/snaps");
    assert_int_equal(c.ha_gc_keep_records, 0);
    assert_int_equal(c.ha_fast_failover, 0);
    assert_string_equal(c.ha_etcd_tls_ca, "/etc/wm/pki/etcd-ca.pem");
    assert_string_equal(c.ha_etcd_tls_cert, "/etc/wm/pki/m-1.pem");
    assert_string_equal(c.ha_etcd_tls_key, "/secret/m-1.key");
    assert_int_equal(c.node_embedded, 1);
    assert_string_equal(c.node_segment_dir, "/dev/shm/x");
    assert_int_equal(c.node_segment_bytes, 1048576);
    assert_int_equal(c.node_segment_prefault, 1);
    assert_int_equal(c.node_ticket_ttl_ms, 5000);
    assert_int_equal(c.node_require_read_tickets, 0);
    assert_int_equal(c.node_allow_insecure_reads, 1);
    assert_int_equal(c.cluster.default_weight_preferred_residency, HOST_RESIDENCY_HOT);
    assert_true(c.cluster.default_weight_mixed_hot_ratio == 0.25);
    assert_int_equal(c.cluster.default_weight_migration_mode, HOST_MODE_MANUAL);
    assert_int_equal(c.cluster.weight_management_oplog_capability_confirmed, 1);
    assert_int_equal(c.cluster.weight_lineage_oplog_capability_confirmed, 1);
    assert_int_equal(c.cluster.weight_migration_cooldown_ms, 0);
    assert_int_equal(c.cluster.weight_migration_max_members_per_round, 1);
    assert_true(c.cluster.weight_migration_max_bytes_per_round == UINT64_MAX);
    host_config_free(&c);
}

/* Relative paths resolve against the config's directory; absolute ones are
 * kept; cold_dir follows data_dir unless set, and then resolves on its own. */
static void test_relative_paths(void **state)
{
    (void)state;
    host_config c;
    load_ok("listen: {unix: run/m.sock}\n"
            "data_dir: data\n"
            "node: {segment_dir: seg}\n"
            "plugins:\n"
            "  - path: p.so\n"
            "  - path: /abs/q.so\n",
            &c);
    assert_string_equal(c.listen_unix, "/etc/wm/run/m.sock");
    assert_string_equal(c.data_dir, "/etc/wm/data");
    assert_string_equal(c.node_segment_dir, "/etc/wm/seg");
    assert_string_equal(c.node_cold_dir, "/etc/wm/data/cold");
    assert_string_equal(c.plugins[0].path, "/etc/wm/p.so");
    assert_string_equal(c.plugins[1].path, "/abs/q.so");
    host_config_free(&c);

    load_ok("data_dir: /d\nnode: {cold_dir: cold2}\n", &c);
    assert_string_equal(c.data_dir, "/d");
    assert_string_equal(c.node_cold_dir, "/etc/wm/cold2");
    host_config_free(&c);

    char err[256];
    assert_int_equal(host_config_load_string("y.yaml", "data_dir: d\n", "/", &c, err,
                                             sizeof(err)), 0);
    assert_string_equal(c.data_dir, "/d");
    host_config_free(&c);
    assert_int_equal(host_config_load_string("y.yaml", "data_dir: d\n", "/base/", &c, err,
                                             sizeof(err)), 0);
    assert_string_equal(c.data_dir, "/base/d");
    host_config_free(&c);
}

/* A section left empty ("listen:" and nothing below) keeps its defaults. */
static void test_null_section_keeps_defaults(void **state)
{
    (void)state;
    host_config c;
    load_ok("listen:\noplog: ~\nplugins:\ncluster: null\n", &c);
    assert_default_values(&c);
    assert_int_equal(c.n_plugins, 0);
    host_config_free(&c);
}

/* ---------------------------------------------------------------------- */
/* Refusals                                                                */

static void test_refuses_unknown_keys(void **state)
{
    (void)state;
    expect_message("listen:\n  tcp: \"127.0.0.1:1\"\n  tpc: x\n",
                   "x.yaml:3: listen.tpc: unknown key");
    expect_message("lisen: {}\n", "x.yaml:1: lisen: unknown key");
    expect_message("cluster:\n  default_weight_preferred_residence: hot\n",
                   "x.yaml:2: cluster.default_weight_preferred_residence: unknown key");
    /* the key's line, not its value's */
    expect_message("node:\n  segmnt_dir:\n    a: 1\n", "x.yaml:2: node.segmnt_dir: unknown key");
}

static void test_refuses_out_of_range_ratio(void **state)
{
    (void)state;
    expect_message("cluster:\n  default_weight_mixed_hot_ratio: 1.5\n",
                   "x.yaml:2: cluster.default_weight_mixed_hot_ratio: 1.5 is outside (0, 1)");
    expect_refused("cluster: {default_weight_mixed_hot_ratio: 0}\n",
                   "x.yaml:1: cluster.default_weight_mixed_hot_ratio: 0 is outside (0, 1)");
    expect_refused("cluster: {default_weight_mixed_hot_ratio: 1}\n",
                   "x.yaml:1: cluster.default_weight_mixed_hot_ratio: 1 is outside (0, 1)");
    expect_refused("cluster: {default_weight_mixed_hot_ratio: -0.5}\n", "is outside (0, 1)");
    expect_refused("cluster: {default_weight_mixed_hot_ratio: half}\n",
                   "x.yaml:1: cluster.default_weight_mixed_hot_ratio: \"half\" is not a number");
    expect_refused("cluster: {default_weight_mixed_hot_ratio: .nan}\n", "is not a number");
    expect_refused("cluster: {default_weight_mixed_hot_ratio: 0x1p-1}\n", "is not a number");
    expect_refused("memory: {high_watermark: 1.0}\n",
                   "x.yaml:1: memory.high_watermark: 1.0 is outside (0, 1)");
    expect_refused("memory: {low_watermark: 0}\n",
                   "x.yaml:1: memory.low_watermark: 0 is outside (0, 1)");
    expect_refused("memory: {evict_without_cold_copy: sometimes}\n",
                   "x.yaml:1: memory.evict_without_cold_copy: ");
}

static void test_refuses_zero_batch_limit(void **state)
{
    (void)state;
    expect_message("ha:\n  enabled: false\n\n\noplog: {max_batch_records: 0}\n",
                   "x.yaml:5: oplog.max_batch_records: 0 must be greater than 0");
    expect_refused("cluster:\n  weight_migration_max_members_per_round: 0\n",
                   "x.yaml:2: cluster.weight_migration_max_members_per_round: 0 must be "
                   "greater than 0");
    expect_refused("cluster:\n  weight_migration_max_bytes_per_round: 0\n",
                   "x.yaml:2: cluster.weight_migration_max_bytes_per_round: 0 must be "
                   "greater than 0");
}

static void test_refuses_unknown_enum_names(void **state)
{
    (void)state;
    expect_message("\n\n\n\n\ncluster:\n  default_weight_preferred_residency: \"warm\"\n",
                   "x.yaml:7: cluster.default_weight_preferred_residency: \"warm\" is not one "
                   "of hot, cold, mixed");
    expect_refused("cluster: {default_weight_preferred_residency: MIXED}\n",
                   "\"MIXED\" is not one of hot, cold, mixed");
    expect_refused("cluster: {default_weight_migration_mode: automatic}\n",
                   "x.yaml:1: cluster.default_weight_migration_mode: \"automatic\" is not one of "
                   "pinned, manual, auto");
    expect_refused("oplog: {backend: raft}\n",
                   "x.yaml:1: oplog.backend: \"raft\" is not one of file, etcd");
}

/* Reads without tickets only with the explicit insecure key; ticket life
 * bounded. */
static void test_refuses_unticketed_reads_without_insecure_key(void **state)
{
    (void)state;
    expect_refused("node:\n  require_read_tickets: false\n",
                   "node.require_read_tickets: false lets anyone who reaches the node's data port "
                   "read any range; it needs node.allow_insecure_reads: true");
    expect_refused("node:\n  require_read_tickets: false\n  allow_insecure_reads: false\n",
                   "needs node.allow_insecure_reads: true");
    expect_refused("node: {ticket_ttl_ms: 999}\n", "node.ticket_ttl_ms");
    /* a range is not taken back while a write its ticket allows may start */
    expect_message("node:\n  poll_ms: 100\n  put_timeout_ms: 6000\n  ticket_ttl_ms: 5000\n",
                   "x.yaml:3: node.put_timeout_ms: node.put_timeout_ms (6000) must be at least "
                   "node.ticket_ttl_ms + 2 x node.poll_ms + 1000 (6200): a write may start until "
                   "its ticket expires, and the range must not be taken back before the node "
                   "reports it");
    expect_refused("node: {ticket_ttl_ms: 64000}\n",
                   "node.ticket_ttl_ms: node.put_timeout_ms (65000) must be at least");
    expect_refused("node: {ticket_ttl_ms: 3600001}\n", "node.ticket_ttl_ms");
    /* a node whose poll is held is not silent */
    expect_message("node:\n  poll_ms: 2000\n  timeout_ms: 3999\n",
                   "x.yaml:3: node.timeout_ms: node.timeout_ms (3999) must be at least 2 x "
                   "node.poll_ms (4000): the master holds a poll up to node.poll_ms, and a node "
                   "it did not hear from for node.timeout_ms is marked down");
    expect_refused("node:\n  poll_ms: 1600\n", "x.yaml:2: node.poll_ms: node.timeout_ms (3000)");
    /* the first rule broken by what was written is named, at its line */
    expect_refused("node:\n  poll_ms: 5000\n", "x.yaml:2: node.poll_ms: node.timeout_ms (3000)");
    expect_refused("node:\n  timeout_ms: 60000\n  poll_ms: 3000\n",
                   "x.yaml:3: node.poll_ms: node.put_timeout_ms (65000) must be at least "
                   "node.ticket_ttl_ms + 2 x node.poll_ms + 1000 (67000)");
    host_config ok;
    load_ok("node:\n  poll_ms: 2000\n  timeout_ms: 4000\n", &ok);
    host_config_free(&ok);
}

/* node.tenant dedicates the embedded node: with local_socket and
 * local_peers (relative socket path resolved against the config), each
 * checked like store_node's flags; none of the three alone. */
static void test_node_dedicated_to_a_tenant(void **state)
{
    host_config c;
    (void)state;
    load_ok("node:\n  tenant: team-a\n  local_socket: a.sock\n"
            "  local_peers: [\"uid:1000\", \"gid:44\"]\n", &c);
    assert_string_equal(c.node_tenant, "team-a");
    assert_string_equal(c.node_local_socket, "/etc/wm/a.sock");
    assert_int_equal(c.node_local_peers.n_uids, 1);
    assert_int_equal(c.node_local_peers.uids[0], 1000);
    assert_int_equal(c.node_local_peers.n_gids, 1);
    assert_int_equal(c.node_local_peers.gids[0], 44);
    host_config_free(&c);
    expect_message("node:\n  tenant: a\n  local_socket: a.sock\n",
                   "x.yaml:2: node.tenant: needs node.local_peers: at least one \"uid:N\" or "
                   "\"gid:N\" (who may map the segment)");
    expect_refused("node:\n  tenant: a\n  local_peers: [\"uid:1\"]\n",
                   "node.tenant: needs node.local_socket");
    expect_message("node:\n  local_socket: a.sock\n",
                   "x.yaml:2: node.local_socket: hands the segment to one tenant's processes; it "
                   "needs node.tenant");
    expect_refused("node:\n  local_peers: [\"uid:1\"]\n",
                   "node.local_peers: name who may map one tenant's segment; they need "
                   "node.tenant");
    expect_message("node:\n  tenant: a\n  local_socket: a.sock\n  local_peers: [\"user:1\"]\n",
                   "x.yaml:4: node.local_peers[0]: 'user:1' is not \"uid:N\" or \"gid:N\" (N a "
                   "decimal user or group id)");
    expect_refused("node:\n  tenant: a\n  local_socket: a.sock\n  local_peers: [{uid: 1}]\n",
                   "node.local_peers[0]: expected \"uid:N\" or \"gid:N\", found a mapping");
    expect_refused("node:\n  tenant: a\n  local_socket: a.sock\n  local_peers: \"uid:1\"\n",
                   "node.local_peers: expected a sequence");
    expect_refused("node:\n  tenant: a/b\n  local_socket: a.sock\n  local_peers: [\"uid:1\"]\n",
                   "node.tenant: \"a/b\" is not a tenant (1 to 128 of A-Z a-z 0-9 . _ -");
    expect_refused("node:\n  tenant: weights\n  local_socket: a.sock\n  local_peers: [\"uid:1\"]\n",
                   "node.tenant: \"weights\" cannot be a tenant");
    expect_refused("node:\n  embedded: false\n  tenant: a\n  local_socket: a.sock\n"
                   "  local_peers: [\"uid:1\"]\n",
                   "node.tenant: dedicates the embedded node, and node.embedded is false");
}

/* With node.embedded false, every node.* key only the embedded node reads
 * is refused on its line, naming the store_node flag of the same (it would
 * do nothing); the keys the master applies to every node (poll_ms: how long
 * it holds a poll, the period it gives each node; timeout_ms, ticket_ttl_ms,
 * put_timeout_ms) are still accepted. */
static void test_refuses_embedded_only_keys_without_embedded_node(void **state)
{
    static const struct {
        const char *line, *want;
    } cases[] = {
        {"id: n1", "node.id: names the embedded node, and node.embedded is false: it would do "
                   "nothing (a store_node takes --id)"},
        {"segment_dir: /dev/shm/x", "node.segment_dir: places the embedded node's segment, and "
                                    "node.embedded is false: it would do nothing (a store_node "
                                    "takes --segment-dir)"},
        {"segment_bytes: 2097152", "node.segment_bytes: sizes the embedded node's segment, and "
                                   "node.embedded is false: it would do nothing (a store_node "
                                   "takes --segment-bytes)"},
        {"segment_prefault: false", "node.segment_prefault: prefaults the embedded node's segment"},
        {"cold_dir: /nonexistent/x", "node.cold_dir: places the embedded node's cold files, and "
                                     "node.embedded is false: it would do nothing (a store_node "
                                     "takes --cold-dir)"},
        {"cold_verify_from_device: true", "node.cold_verify_from_device: makes the embedded node "
                                          "re-read what it persists"},
        {"data_listen: \"127.0.0.1:0\"", "node.data_listen: is the embedded node's data port"},
        {"require_read_tickets: true", "node.require_read_tickets: sets whether the embedded "
                                       "node's reads need tickets"},
        {"allow_insecure_reads: true", "node.allow_insecure_reads: lets the embedded node serve "
                                       "reads without tickets"},
        {"tenant: a", "node.tenant: dedicates the embedded node, and node.embedded is false (a "
                      "store_node is dedicated with --tenant)"},
        {"local_socket: a.sock", "node.local_socket: hands out the embedded node's segment, and "
                                 "node.embedded is false: it would do nothing (a store_node takes "
                                 "--local-socket)"},
        {"local_peers: [\"uid:1\"]", "node.local_peers: names who may map the embedded node's "
                                      "segment"},
    };
    char yaml[256], want[512];
    host_config c;
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(yaml, sizeof(yaml), "node:\n  embedded: false\n  %s\n", cases[i].line);
        snprintf(want, sizeof(want), "x.yaml:3: %s", cases[i].want);
        expect_refused(yaml, want);
    }
    /* on its own line, after the keys the master reads */
    expect_message("node:\n  poll_ms: 100\n  cold_dir: /nonexistent/x\n  embedded: false\n",
                   "x.yaml:3: node.cold_dir: places the embedded node's cold files, and "
                   "node.embedded is false: it would do nothing (a store_node takes --cold-dir)");
    load_ok("node:\n  embedded: false\n  poll_ms: 100\n  timeout_ms: 2000\n"
            "  ticket_ttl_ms: 5000\n  put_timeout_ms: 7000\n", &c);
    assert_int_equal(c.node_embedded, 0);
    assert_int_equal(c.node_poll_ms, 100);
    assert_int_equal(c.node_timeout_ms, 2000);
    assert_int_equal(c.node_ticket_ttl_ms, 5000);
    assert_int_equal(c.node_put_timeout_ms, 7000);
    host_config_free(&c);
    /* the same keys with the embedded node are its settings */
    load_ok("node:\n  embedded: true\n  segment_bytes: 2097152\n  cold_dir: /nonexistent/x\n",
            &c);
    assert_int_equal(c.node_segment_bytes, 2097152);
    host_config_free(&c);
}

/* tls: cert and key together; ca and verify_clients only with them;
 * verify_clients needs ca; relative paths resolve against the config. */
static void test_tls_keys(void **state)
{
    host_config c;
    (void)state;
    expect_refused("tls:\n  cert: a.pem\n", "tls.key: tls.cert and tls.key are set together");
    expect_refused("tls:\n  key: a.key\n", "tls.cert: tls.cert and tls.key are set together");
    expect_refused("tls:\n  ca: ca.pem\n", "tls.ca: is used only with tls.cert and tls.key");
    expect_refused("tls:\n  cert: a.pem\n  key: a.key\n  verify_clients: true\n",
                   "tls.verify_clients: true needs tls.cert, tls.key and tls.ca");
    expect_refused("tls:\n  cipher: fast\n", "tls.cipher");
    /* Each on the line of the value it is about, not the section's. */
    expect_message("tls:\n  cert: a.pem\n  key: a.key\n\n  verify_clients: true\n",
                   "x.yaml:5: tls.verify_clients: true needs tls.cert, tls.key and tls.ca "
                   "(the CA of the client certificates)");
    expect_message("tls:\n  verify_clients: false\n  ca: ca.pem\n",
                   "x.yaml:3: tls.ca: is used only with tls.cert and tls.key (TLS is off "
                   "without them)");
    expect_message("tls:\n  verify_clients: false\n  key: a.key\n",
                   "x.yaml:3: tls.cert: tls.cert and tls.key are set together (or neither: "
                   "no TLS)");
    load_ok("tls:\n  cert: a.pem\n  key: /k/a.key\n  ca: ca.pem\n  verify_clients: true\n", &c);
    assert_string_equal(c.tls_cert, "/etc/wm/a.pem");
    assert_string_equal(c.tls_key, "/k/a.key");
    assert_string_equal(c.tls_ca, "/etc/wm/ca.pem");
    assert_int_equal(c.tls_verify_clients, 1);
    /* The lines of the values naming files, for host_config_load_files. */
    assert_int_equal(c.tls_cert_line, 2);
    assert_int_equal(c.tls_key_line, 3);
    assert_int_equal(c.tls_ca_line, 4);
    assert_int_equal(c.auth_node_token_file_line, 0);
    host_config_free(&c);
}

static void test_refuses_non_booleans(void **state)
{
    (void)state;
    expect_message("ha:\n  enabled: \"yes please\"\n",
                   "x.yaml:2: ha.enabled: \"yes please\" is not a boolean (true or false)");
    expect_refused("ha:\n  enabled: yes please\n",
                   "x.yaml:2: ha.enabled: \"yes please\" is not a boolean (true or false)");
    expect_refused("ha: {enabled: yes}\n", "ha.enabled: \"yes\" is not a boolean");
    expect_refused("ha: {enabled: True}\n", "ha.enabled: \"True\" is not a boolean");
    expect_refused("ha: {enabled: 1}\n", "ha.enabled: \"1\" is not a boolean");
    expect_refused("ha: {enabled: \"true\"}\n",
                   "x.yaml:1: ha.enabled: \"true\" is quoted: a string, not a boolean");
    expect_refused("oplog: {preallocate: 2}\n",
                   "x.yaml:1: oplog.preallocate: \"2\" is not a boolean");
    expect_refused("node: {segment_prefault: sometimes}\n",
                   "x.yaml:1: node.segment_prefault: \"sometimes\" is not a boolean");
    /* The key is gone (records of absent plugins are always carried): set
     * to anything, it is refused with the reason, not ignored. */
    expect_refused("oplog: {carry_unknown_types: on}\n",
                   "x.yaml:1: oplog.carry_unknown_types: was removed: records and snapshot "
                   "sections of a plugin that is absent or disabled are always kept verbatim, "
                   "so delete this key");
    expect_refused("oplog:\n  carry_unknown_types: true\n",
                   "x.yaml:2: oplog.carry_unknown_types: was removed");
    expect_refused("cluster: {weight_lineage_oplog_capability_confirmed: maybe}\n",
                   "cluster.weight_lineage_oplog_capability_confirmed: \"maybe\" is not a "
                   "boolean");
}

static void test_refuses_bad_integers(void **state)
{
    (void)state;
    expect_message("\n\n\nsnapshot:\n  keep: two\n", "x.yaml:5: snapshot.keep: \"two\" is not an integer");
    expect_refused("snapshot: {keep: \"two\"}\n", "x.yaml:1: snapshot.keep: \"two\" is not an integer");
    expect_refused("snapshot: {keep: 0x10}\n", "snapshot.keep: \"0x10\" is not an integer");
    expect_refused("snapshot: {keep: 1.5}\n", "snapshot.keep: \"1.5\" is not an integer");
    expect_refused("snapshot: {keep: 1e3}\n", "snapshot.keep: \"1e3\" is not an integer");
    expect_refused("snapshot: {keep: +3}\n", "snapshot.keep: \"+3\" is not an integer");
    expect_refused("snapshot: {keep: \"3\"}\n", "snapshot.keep: \"3\" is quoted");
    expect_refused("snapshot: {keep: -1}\n", "x.yaml:1: snapshot.keep: -1 must not be negative");
    expect_refused("cluster: {weight_migration_cooldown_ms: -30000}\n",
                   "cluster.weight_migration_cooldown_ms: -30000 must not be negative");
    expect_refused("snapshot: {keep: 0}\n", "x.yaml:1: snapshot.keep: 0 must be greater than 0");
    expect_refused("snapshot: {write_timeout_s: 0}\n", "snapshot.write_timeout_s: 0 is outside");
    expect_refused("snapshot: {write_timeout_s: 604801}\n",
                   "snapshot.write_timeout_s: 604801 is outside");
    expect_refused("snapshot: {write_timeout_s: soon}\n",
                   "snapshot.write_timeout_s: \"soon\" is not an integer");
    expect_refused("fsck: {bytes_per_s: 1048575}\n", "fsck.bytes_per_s: 1048575 must be at least 1048576");
    expect_refused("fsck: {every_s: -1}\n", "fsck.every_s: -1 must not be negative");
    expect_refused("fsck: {every_s: 4294967296}\n", "fsck.every_s: 4294967296 is too large");
    expect_refused("fsck: {interval_s: 60}\n", "fsck.interval_s: unknown key");
    /* overflow of the field (u32) and of any integer (u64) */
    expect_refused("oplog: {max_batch_records: 4294967296}\n",
                   "x.yaml:1: oplog.max_batch_records: 4294967296 is too large");
    expect_refused("snapshot: {every_records: 18446744073709551616}\n",
                   "x.yaml:1: snapshot.every_records: 18446744073709551616 is too large");
    expect_refused("snapshot: {every_records: 99999999999999999999999999}\n", "is too large");
    /* documented ranges */
    expect_refused("listen: {max_frame_bytes: 1023}\n",
                   "x.yaml:1: listen.max_frame_bytes: 1023 is outside 1024 .. 1073741824");
    expect_refused("listen: {max_frame_bytes: 1073741825}\n",
                   "listen.max_frame_bytes: 1073741825 is outside 1024 .. 1073741824");
    expect_refused("oplog: {segment_bytes: 4095}\n",
                   "x.yaml:1: oplog.segment_bytes: 4095 must be at least 4096");
    expect_refused("node: {segment_bytes: 1048575}\n",
                   "x.yaml:1: node.segment_bytes: 1048575 must be at least 1048576");
}

/* A map where a scalar belongs, a scalar where a map or sequence belongs. */
static void test_refuses_wrong_node_kind(void **state)
{
    (void)state;
    expect_message("listen: 5\n", "x.yaml:1: listen: expected a mapping, found a scalar");
    expect_message("listen: [a]\n", "x.yaml:1: listen: expected a mapping, found a sequence");
    expect_message("listen:\n  tcp:\n    host: a\n",
                   "x.yaml:3: listen.tcp: expected a string, found a mapping");
    expect_refused("data_dir: [a, b]\n", "x.yaml:1: data_dir: expected a string, found a sequence");
    expect_refused("snapshot: {keep: [1]}\n",
                   "x.yaml:1: snapshot.keep: expected an integer, found a sequence");
    expect_refused("ha: {enabled: {a: 1}}\n",
                   "x.yaml:1: ha.enabled: expected a boolean (true or false), found a mapping");
    expect_refused("plugins: {path: a}\n", "x.yaml:1: plugins: expected a sequence, found a mapping");
    expect_refused("plugins: a.so\n", "x.yaml:1: plugins: expected a sequence, found a scalar");
    expect_refused("plugins:\n  - a.so\n", "x.yaml:2: plugins[0]: expected a mapping, found a scalar");
    expect_refused("plugins:\n  - path: a.so\n    config: [1, 2]\n",
                   "x.yaml:3: plugins[0].config: expected a mapping, found a sequence");
    expect_refused("plugins:\n  - path: a.so\n    config: x\n",
                   "x.yaml:3: plugins[0].config: expected a mapping, found a scalar");
    expect_refused("plugins:\n  - path: {a: 1}\n",
                   "x.yaml:2: plugins[0].path: expected a string, found a mapping");
    expect_refused("plugins:\n  - path: a.so\n    enabled: [true]\n",
                   "x.yaml:3: plugins[0].enabled: expected a boolean");
}

/* A key with nothing after it is refused where a value is required. */
static void test_refuses_missing_values(void **state)
{
    (void)state;
    expect_refused("data_dir:\n", "x.yaml:1: data_dir: has no value");
    expect_refused("snapshot:\n  keep: ~\n", "x.yaml:2: snapshot.keep: has no value");
    expect_refused("data_dir: \"\"\n", "x.yaml:1: data_dir: must not be empty");
    expect_refused("node: {segment_dir: ''}\n", "x.yaml:1: node.segment_dir: must not be empty");
    expect_refused("plugins:\n  - path: \"\"\n", "x.yaml:2: plugins[0].path: must not be empty");
}

static void test_refuses_bad_addresses(void **state)
{
    (void)state;
    expect_refused("listen: {tcp: localhost}\n", "x.yaml:1: listen.tcp: \"localhost\" is not \"host:port\"");
    expect_refused("listen: {admin: \"127.0.0.1:\"}\n", "listen.admin: \"127.0.0.1:\" is not");
    expect_refused("listen: {tcp: \":7600\"}\n", "listen.tcp: \":7600\" is not");
    expect_refused("listen: {tcp: \"h:65536\"}\n", "listen.tcp: \"h:65536\" is not");
    expect_refused("listen: {tcp: \"h:http\"}\n", "listen.tcp: \"h:http\" is not");
    /* Names are not resolved by any listener: refused here, not at the start. */
    expect_refused("listen: {admin: \"example.com:7680\"}\n",
                   "x.yaml:1: listen.admin: \"example.com:7680\" is not \"host:port\" (port 0..65535; "
                   "host a numeric IPv4 or [IPv6] address, localhost, or * for any)");
    expect_refused("node: {data_listen: \"[::1:7691\"}\n", "node.data_listen: \"[::1:7691\" is not");
    host_config c;
    load_ok("listen: {tcp: \"[::1]:0\", admin: \"localhost:65535\"}\n", &c);
    assert_string_equal(c.listen_tcp, "[::1]:0");
    assert_string_equal(c.listen_admin, "localhost:65535");
    host_config_free(&c);
    load_ok("listen: {tcp: \"127.0.0.2:0\", admin: \"[::1]:7680\"}\nnode: {data_listen: \"[::1]:0\"}\n", &c);
    assert_string_equal(c.listen_admin, "[::1]:7680");
    host_config_free(&c);
}

static void test_refuses_duplicate_keys(void **state)
{
    (void)state;
    expect_message("ha: {enabled: true}\nha: {enabled: false}\n", "x.yaml:2: ha: duplicate key (first at line 1)");
    expect_message("listen:\n  tcp: \"a:1\"\n  tcp: \"b:2\"\n", "x.yaml:3: listen.tcp: duplicate key (first at line 2)");
    expect_message("plugins:\n  - path: a\n    config:\n      k: 1\n      k: 2\n",
                   "x.yaml:5: plugins[0].config.k: duplicate key (first at line 4)");
}

static void test_refuses_plugin_entries(void **state)
{
    (void)state;
    expect_message("plugins:\n  - path: a.so\n  - enabled: false\n    config: {}\n",
                   "x.yaml:3: plugins[1].path: missing");
    expect_message("plugins:\n  - path: a.so\n    enabld: false\n",
                   "x.yaml:3: plugins[0].enabld: unknown key");
    expect_refused("plugins:\n  - {}\n", "x.yaml:2: plugins[0].path: missing");
    expect_refused("plugins:\n  - path: a.so\n    enabled: no\n",
                   "x.yaml:3: plugins[0].enabled: \"no\" is not a boolean");
}

static void test_refuses_crossed_watermarks(void **state)
{
    (void)state;
    expect_message("memory:\n  high_watermark: 0.5\n  low_watermark: 0.6\n",
                   "x.yaml:3: memory.low_watermark: 0.6 must be below memory.high_watermark (0.5)");
    expect_refused("memory: {high_watermark: 0.7, low_watermark: 0.7}\n",
                   "x.yaml:1: memory.low_watermark: 0.7 must be below");
    /* only high set, below the default low: reported on high's line */
    expect_message("\nmemory:\n  high_watermark: 0.8\n",
                   "x.yaml:3: memory.high_watermark: 0.8 must be above memory.low_watermark (0.85)");
}

static void test_refuses_yaml_syntax_errors(void **state)
{
    (void)state;
    expect_refused("listen:\n  tcp: \"a:1\"\n   admin: x\n", "x.yaml:3: YAML syntax error: ");
    expect_refused("listen: {tcp: \"a:1\"\n", "x.yaml:2: YAML syntax error: ");
    expect_refused("a: 'unterminated\n", "YAML syntax error: ");
    expect_refused("\tlisten: {}\n", "x.yaml:1: YAML syntax error: ");
}

static void test_refuses_top_level_not_mapping(void **state)
{
    (void)state;
    expect_message("- a\n- b\n", "x.yaml:1: top level: expected a mapping, found a sequence");
    expect_message("\nhello\n", "x.yaml:2: top level: expected a mapping, found a scalar");
    expect_message("\"\"\n", "x.yaml:1: top level: expected a mapping, found a scalar");
}

static void test_refuses_what_the_tree_cannot_hold(void **state)
{
    (void)state;
    expect_message("ha: &h {enabled: true}\nnode: *h\n", "x.yaml:2: node: aliases (*h) are not supported");
    expect_message("data_dir: !!binary aGVsbG8=\n",
                   "x.yaml:1: data_dir: YAML tags (tag:yaml.org,2002:binary) are not supported");
    expect_refused("snapshot: !!map {every_records: 5}\n",
                   "x.yaml:1: snapshot: YAML tags (tag:yaml.org,2002:map) are not supported");
    expect_refused("!custom listen: {}\n", "x.yaml:1: top level: YAML tags (!custom) are not supported");
    expect_refused("plugins:\n  - path: a.so\n    config: {limit: !!int 5}\n",
                   "x.yaml:3: plugins[0].config.limit: YAML tags (tag:yaml.org,2002:int) are not supported");
    expect_refused("listen: {}\n---\nha: {}\n", "x.yaml:2: only one YAML document is allowed");
    expect_refused("? [a, b]\n: 1\n", "x.yaml:1: top level: a key must be a scalar");
    expect_refused("plugins:\n  - path: \"a\\0b.so\"\n",
                   "x.yaml:2: plugins[0].path: contains a NUL character");
    char deep[400];
    size_t n = 0;
    n += (size_t)sprintf(deep + n, "plugins:\n  - path: a\n    config: ");
    for (int i = 0; i < 100; i++) deep[n++] = '[';
    for (int i = 0; i < 100; i++) deep[n++] = ']';
    deep[n++] = '\n';
    deep[n] = '\0';
    expect_refused(deep, "nested deeper than 64 levels");
}

/* A file that cannot be opened or read: the name and strerror. */
static void test_refuses_unreadable_file(void **state)
{
    (void)state;
    host_config c;
    char err[256];
    memset(&c, 0x5a, sizeof(c));
    int rc = host_config_load(SOURCE_DIR "/config/no-such.yaml", &c, err, sizeof(err));
    assert_true(rc < 0);
    assert_string_equal(err, SOURCE_DIR "/config/no-such.yaml: cannot open: No such file or directory");
    assert_true(is_zeroed(&c));
    memset(&c, 0x5a, sizeof(c));
    rc = host_config_load(SOURCE_DIR "/config", &c, err, sizeof(err));
    assert_true(rc < 0);
    assert_non_null(strstr(err, SOURCE_DIR "/config: cannot "));
    assert_true(is_zeroed(&c));
}

/* A refusal in a real file carries that file's name and line. */
static void test_refusal_names_the_file(void **state)
{
    (void)state;
    char path[] = BUILD_DIR "/test_config_bad_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    static const char text[] = "# bad\ncluster:\n  default_weight_mixed_hot_ratio: 1.5\n";
    assert_int_equal(write(fd, text, sizeof(text) - 1), (ssize_t)(sizeof(text) - 1));
    close(fd);
    host_config c;
    char err[512];
    char want[512];
    assert_true(host_config_load(path, &c, err, sizeof(err)) < 0);
    snprintf(want, sizeof(want), "%s:3: cluster.default_weight_mixed_hot_ratio: 1.5 is outside (0, 1)",
             path);
    assert_string_equal(err, want);
    assert_true(is_zeroed(&c));
    unlink(path);
}

/* A failure late in the file (after plugins were filled) leaks nothing and
 * still zeroes the config; a short error buffer is truncated, not overrun. */
static void test_late_failure_and_short_buffer(void **state)
{
    (void)state;
    static const char text[] = "plugins:\n"
                               "  - path: a.so\n"
                               "    config: {k: {deep: [1, 2, {x: y}]}}\n"
                               "  - path: b.so\n"
                               "    config: {q: 1}\n"
                               "cluster: {default_weight_migration_mode: never}\n";
    host_config c;
    char err[16];
    memset(err, 'Z', sizeof(err));
    assert_true(load(text, &c, err, 10) < 0);
    assert_int_equal(strlen(err), 9);
    assert_int_equal(err[10], 'Z');
    assert_true(is_zeroed(&c));
    assert_true(load(text, &c, NULL, 0) < 0);
    assert_true(is_zeroed(&c));
    expect_message(text, "x.yaml:6: cluster.default_weight_migration_mode: \"never\" is not one "
                         "of pinned, manual, auto");
}

/* ---------------------------------------------------------------------- */
/* The plugin block and the cluster view                                   */

/* The "config:" block is kept verbatim: nested lookups by dotted key, types
 * on lookup, keys and lines of every node. */

/* host_config_node_keys visitor: "key@line " appended to text; returns 7
 * (stop) once stop_after keys were seen, when set. */
typedef struct key_list {
    char text[512];
    int n, stop_after;
} key_list;

static int collect_key(void *arg, const char *key, uint32_t line)
{
    key_list *k = arg;
    size_t used = strlen(k->text);
    snprintf(k->text + used, sizeof(k->text) - used, "%s@%u ", key, (unsigned)line);
    return k->stop_after && ++k->n >= k->stop_after ? 7 : 0;
}

static void test_plugin_block_kept(void **state)
{
    (void)state;
    host_config c;
    load_ok("plugins:\n"                           /* 1 */
            "  - path: w.so\n"                     /* 2 */
            "    enabled: false\n"                 /* 3 */
            "    config:\n"                        /* 4 */
            "      reconcile:\n"                   /* 5 */
            "        period_ms: 250\n"             /* 6 */
            "        budget: {members: 8}\n"       /* 7 */
            "      ratio: 0.75\n"                  /* 8 */
            "      strict: true\n"                 /* 9 */
            "      name: \"gen-a\"\n"              /* 10 */
            "      tiers:\n"                       /* 11 */
            "        - hot\n"                      /* 12 */
            "        - {dir: /cold, weight: 2}\n"  /* 13 */
            "      unknown_to_host: anything\n"    /* 14 */
            "  - path: other.so\n",                /* 15 */
            &c);
    assert_int_equal(c.n_plugins, 2);
    host_config_plugin *p = &c.plugins[0];
    assert_string_equal(p->path, "/etc/wm/w.so");
    assert_int_equal(p->enabled, 0);
    assert_int_equal(p->line, 2);
    assert_int_equal(p->path_line, 2);   /* for the host's messages about loading it */
    assert_int_equal(p->config_line, 4); /* and about its init refusing its block */
    assert_non_null(p->block);
    assert_int_equal(p->block->kind, HOST_CFG_MAP);
    assert_null(p->block->key);
    assert_int_equal(p->block->n_items, 6);

    smp_config_value v;
    assert_int_equal(host_config_node_get(p->block, "reconcile.period_ms", &v), SMP_OK);
    assert_int_equal(v.type, SMP_CONFIG_INT);
    assert_int_equal(v.i, 250);
    assert_int_equal(host_config_node_get(p->block, "reconcile.budget.members", &v), SMP_OK);
    assert_int_equal(v.i, 8);
    assert_int_equal(host_config_node_get(p->block, "ratio", &v), SMP_OK);
    assert_int_equal(v.type, SMP_CONFIG_DOUBLE);
    assert_true(v.d == 0.75);
    assert_int_equal(host_config_node_get(p->block, "strict", &v), SMP_OK);
    assert_int_equal(v.type, SMP_CONFIG_BOOL);
    assert_int_equal(v.b, 1);
    assert_int_equal(host_config_node_get(p->block, "name", &v), SMP_OK);
    assert_int_equal(v.type, SMP_CONFIG_STRING);
    assert_string_equal(v.s, "gen-a");
    assert_int_equal(host_config_node_get(p->block, "unknown_to_host", &v), SMP_OK);
    assert_string_equal(v.s, "anything");
    assert_int_equal(host_config_node_get(p->block, "reconcile", &v), SMP_ENOTFOUND);
    assert_int_equal(host_config_node_get(p->block, "tiers", &v), SMP_ENOTFOUND);
    assert_int_equal(host_config_node_get(p->block, "reconcile.nope", &v), SMP_ENOTFOUND);

    /* the keys of a mapping with their lines (what config_keys lists) */
    key_list kl = {0};
    assert_int_equal(host_config_node_keys(p->block, "", collect_key, &kl), SMP_OK);
    assert_string_equal(kl.text, "reconcile@5 ratio@8 strict@9 name@10 tiers@11 unknown_to_host@14 ");
    memset(&kl, 0, sizeof(kl));
    assert_int_equal(host_config_node_keys(p->block, "reconcile", collect_key, &kl), SMP_OK);
    assert_string_equal(kl.text, "period_ms@6 budget@7 ");
    memset(&kl, 0, sizeof(kl));
    assert_int_equal(host_config_node_keys(p->block, "reconcile.budget", collect_key, &kl), SMP_OK);
    assert_string_equal(kl.text, "members@7 ");
    kl.stop_after = 1;
    kl.n = 0;
    assert_int_equal(host_config_node_keys(p->block, "", collect_key, &kl), 7); /* the visitor's stop */
    assert_int_equal(host_config_node_keys(p->block, "nope", collect_key, &kl), SMP_ENOTFOUND);
    assert_int_equal(host_config_node_keys(p->block, "ratio", collect_key, &kl), SMP_EINVAL);
    assert_int_equal(host_config_node_keys(p->block, "tiers", collect_key, &kl), SMP_EINVAL);
    assert_int_equal(host_config_node_keys(NULL, "", collect_key, &kl), SMP_OK); /* no block: empty */
    assert_int_equal(host_config_node_keys(NULL, "x", collect_key, &kl), SMP_ENOTFOUND);

    /* the tree itself: keys, kinds, lines, order */
    const host_config_node *rec = p->block->items[0];
    assert_string_equal(rec->key, "reconcile");
    assert_int_equal(rec->kind, HOST_CFG_MAP);
    assert_int_equal(rec->key_line, 5);
    assert_int_equal(rec->items[0]->line, 6);
    assert_string_equal(rec->items[1]->key, "budget");
    assert_int_equal(rec->items[1]->line, 7);
    const host_config_node *name = p->block->items[3];
    assert_string_equal(name->key, "name");
    assert_int_equal(name->quoted, 1);
    assert_int_equal(p->block->items[2]->quoted, 0);
    const host_config_node *tiers = p->block->items[4];
    assert_string_equal(tiers->key, "tiers");
    assert_int_equal(tiers->kind, HOST_CFG_SEQ);
    assert_int_equal(tiers->n_items, 2);
    assert_null(tiers->items[0]->key);
    assert_string_equal(tiers->items[0]->scalar, "hot");
    assert_int_equal(tiers->items[0]->line, 12);
    assert_int_equal(tiers->items[1]->kind, HOST_CFG_MAP);
    assert_int_equal(tiers->items[1]->line, 13);
    assert_string_equal(tiers->items[1]->items[0]->key, "dir");
    assert_string_equal(tiers->items[1]->items[0]->scalar, "/cold");

    /* absent config: an empty map, enabled by default */
    p = &c.plugins[1];
    assert_string_equal(p->path, "/etc/wm/other.so");
    assert_int_equal(p->enabled, 1);
    assert_int_equal(p->line, 15);
    assert_int_equal(p->path_line, 15);
    assert_int_equal(p->config_line, 0);
    assert_non_null(p->block);
    assert_int_equal(p->block->kind, HOST_CFG_MAP);
    assert_int_equal(p->block->n_items, 0);
    assert_int_equal(host_config_node_get(p->block, "anything", &v), SMP_ENOTFOUND);
    host_config_free(&c);

    /* "config:" with nothing after it is an empty block too */
    load_ok("plugins:\n  - path: a.so\n    config:\n", &c);
    assert_int_equal(c.plugins[0].block->kind, HOST_CFG_MAP);
    assert_int_equal(c.plugins[0].block->n_items, 0);
    host_config_free(&c);
}

/* Each cluster key, looked up by its RFC name, as a plugin sees it. */
static void test_cluster_get_each_key(void **state)
{
    (void)state;
    host_config c;
    smp_config_value v;
    load_ok("cluster:\n"
            "  default_weight_preferred_residency: cold\n"
            "  default_weight_mixed_hot_ratio: 0.3\n"
            "  default_weight_migration_mode: pinned\n"
            "  weight_management_oplog_capability_confirmed: true\n"
            "  weight_lineage_oplog_capability_confirmed: false\n"
            "  weight_migration_cooldown_ms: 5000\n"
            "  weight_migration_max_members_per_round: 7\n"
            "  weight_migration_max_bytes_per_round: 123456789\n",
            &c);
    assert_int_equal(host_config_cluster_get(&c, "default_weight_preferred_residency", &v), SMP_OK);
    assert_int_equal(v.type, SMP_CONFIG_STRING);
    assert_string_equal(v.s, "cold");
    assert_int_equal(host_config_cluster_get(&c, "default_weight_mixed_hot_ratio", &v), SMP_OK);
    assert_int_equal(v.type, SMP_CONFIG_DOUBLE);
    assert_true(v.d == 0.3);
    assert_int_equal(host_config_cluster_get(&c, "default_weight_migration_mode", &v), SMP_OK);
    assert_string_equal(v.s, "pinned");
    assert_int_equal(host_config_cluster_get(&c, "weight_management_oplog_capability_confirmed", &v),
                     SMP_OK);
    assert_int_equal(v.type, SMP_CONFIG_BOOL);
    assert_int_equal(v.b, 1);
    assert_int_equal(host_config_cluster_get(&c, "weight_lineage_oplog_capability_confirmed", &v),
                     SMP_OK);
    assert_int_equal(v.type, SMP_CONFIG_BOOL);
    assert_int_equal(v.b, 0);
    assert_int_equal(host_config_cluster_get(&c, "weight_migration_cooldown_ms", &v), SMP_OK);
    assert_int_equal(v.type, SMP_CONFIG_INT);
    assert_int_equal(v.i, 5000);
    assert_int_equal(host_config_cluster_get(&c, "weight_migration_max_members_per_round", &v), SMP_OK);
    assert_int_equal(v.i, 7);
    assert_int_equal(host_config_cluster_get(&c, "weight_migration_max_bytes_per_round", &v), SMP_OK);
    assert_int_equal(v.i, 123456789);
    assert_int_equal(host_config_cluster_get(&c, "default_weight_residency", &v), SMP_ENOTFOUND);
    assert_int_equal(host_config_cluster_get(&c, "ha.enabled", &v), SMP_ENOTFOUND);
    host_config_free(&c);

    /* and the defaults as written in embedded.yaml */
    char err[256];
    assert_int_equal(host_config_load(EMBEDDED, &c, err, sizeof(err)), 0);
    assert_int_equal(host_config_cluster_get(&c, "default_weight_preferred_residency", &v), SMP_OK);
    assert_string_equal(v.s, "mixed");
    assert_int_equal(host_config_cluster_get(&c, "default_weight_migration_mode", &v), SMP_OK);
    assert_string_equal(v.s, "auto");
    assert_int_equal(host_config_cluster_get(&c, "weight_migration_max_bytes_per_round", &v), SMP_OK);
    assert_int_equal(v.i, 1073741824);
    host_config_free(&c);
}

/* An embedded node registers through the master's RPC: with both listeners
 * off there is nothing to register through, so the config is refused; a
 * master without an embedded node may listen on nothing but its admin port. */
/* HA is all or nothing: the etcd backend and ha.enabled go together, an
 * enabled master names its id, etcd and shared snapshots, and an ha.* key
 * that would do nothing (HA off) is refused on its own line. */
static void test_refuses_incomplete_or_idle_ha_keys(void **state)
{
    (void)state;
    const char *full = "oplog: {backend: etcd}\n"
                       "ha:\n"
                       "  enabled: true\n"
                       "  id: m1\n"
                       "  etcd_endpoints: \"127.0.0.1:2379\"\n"
                       "  snapshot_dir: /srv/snaps\n";
    host_config c;
    load_ok(full, &c);
    host_config_free(&c);
    expect_message("ha:\n  enabled: true\n  id: m1\n  etcd_endpoints: \"a:1\"\n"
                   "  snapshot_dir: /s\n",
                   "x.yaml:2: ha.enabled: true needs oplog.backend: etcd (the masters share "
                   "their OpLog there)");
    expect_message("\noplog: {backend: etcd}\n",
                   "x.yaml:2: oplog.backend: etcd needs ha.enabled: true (a single master logs "
                   "to data_dir)");
    expect_message("oplog: {backend: etcd}\nha:\n  enabled: true\n  etcd_endpoints: \"a:1\"\n"
                   "  snapshot_dir: /s\n",
                   "x.yaml:3: ha.id: missing (needed with ha.enabled: true)");
    expect_message("oplog: {backend: etcd}\nha:\n  enabled: true\n  id: m1\n  snapshot_dir: /s\n",
                   "x.yaml:3: ha.etcd_endpoints: missing (needed with ha.enabled: true)");
    expect_message("oplog: {backend: etcd}\nha:\n  enabled: true\n  id: m1\n"
                   "  etcd_endpoints: \"a:1\"\n",
                   "x.yaml:3: ha.snapshot_dir: missing (needed with ha.enabled: true)");
    expect_message("listen: {tcp: \"\", unix: /run/x.sock}\noplog: {backend: etcd}\nha:\n"
                   "  enabled: true\n  id: m1\n  etcd_endpoints: \"a:1\"\n  snapshot_dir: /s\n",
                   "x.yaml:4: ha.advertise: missing: listen.tcp is off, so say where clients "
                   "reach this master");
    expect_message("listen: {tcp: \"127.0.0.1:0\"}\noplog: {backend: etcd}\nha:\n"
                   "  enabled: true\n  id: m1\n  etcd_endpoints: \"a:1\"\n  snapshot_dir: /s\n",
                   "x.yaml:4: ha.advertise: missing: listen.tcp asks for any free port (0), so "
                   "say where clients reach this master");
    expect_message("ha:\n  enabled: false\n  id: m1\n",
                   "x.yaml:3: ha.id: is set but ha.enabled is false (it would do nothing)");
    expect_message("ha:\n  lease_ttl_s: 3\n",
                   "x.yaml:2: ha.lease_ttl_s: is set but ha.enabled is false (it would do nothing)");
    expect_message("ha:\n  etcd_tls_ca: ca.pem\n",
                   "x.yaml:2: ha.etcd_tls_ca: is set but ha.enabled is false (it would do nothing)");
    /* TLS to etcd: a client certificate comes with its key, and over TLS */
    const char *tls_base = "oplog: {backend: etcd}\nha:\n  enabled: true\n  id: m1\n"
                           "  etcd_endpoints: \"a:1\"\n  snapshot_dir: /s\n";
    char yaml[512];
    snprintf(yaml, sizeof(yaml), "%s  etcd_tls_ca: ca.pem\n  etcd_tls_cert: m1.pem\n", tls_base);
    expect_message(yaml, "x.yaml:8: ha.etcd_tls_key: ha.etcd_tls_cert and ha.etcd_tls_key are set "
                         "together (or neither: no client certificate for etcd)");
    snprintf(yaml, sizeof(yaml), "%s  etcd_tls_ca: ca.pem\n  etcd_tls_key: m1.key\n", tls_base);
    expect_message(yaml, "x.yaml:8: ha.etcd_tls_cert: ha.etcd_tls_cert and ha.etcd_tls_key are set "
                         "together (or neither: no client certificate for etcd)");
    snprintf(yaml, sizeof(yaml), "%s  etcd_tls_cert: m1.pem\n  etcd_tls_key: m1.key\n", tls_base);
    expect_message(yaml, "x.yaml:7: ha.etcd_tls_ca: missing: ha.etcd_tls_cert is presented over "
                         "TLS, which needs the CA of etcd's server certificates");
    /* password auth to etcd: a user with its password file, over TLS */
    snprintf(yaml, sizeof(yaml), "%s  etcd_tls_ca: ca.pem\n  etcd_user: wm\n", tls_base);
    expect_message(yaml, "x.yaml:8: ha.etcd_password_file: ha.etcd_user and ha.etcd_password_file "
                         "are set together (or neither: no password auth to etcd)");
    snprintf(yaml, sizeof(yaml), "%s  etcd_tls_ca: ca.pem\n  etcd_password_file: pw\n", tls_base);
    expect_message(yaml, "x.yaml:8: ha.etcd_user: ha.etcd_user and ha.etcd_password_file are set "
                         "together (or neither: no password auth to etcd)");
    snprintf(yaml, sizeof(yaml), "%s  etcd_user: wm\n  etcd_password_file: pw\n", tls_base);
    expect_message(yaml, "x.yaml:7: ha.etcd_tls_ca: missing: ha.etcd_user's password is sent to "
                         "etcd over TLS only, which needs the CA of etcd's server certificates");
    snprintf(yaml, sizeof(yaml), "%s  etcd_user: \"w m\"\n", tls_base);
    expect_refused(yaml, "ha.etcd_user: \"w m\" is not a name");
    expect_message("ha:\n  etcd_user: wm\n",
                   "x.yaml:2: ha.etcd_user: is set but ha.enabled is false (it would do nothing)");
    snprintf(yaml, sizeof(yaml), "%s  etcd_tls_ca: ca.pem\n  etcd_user: wm\n  etcd_password_file: pw\n",
             tls_base);
    load_ok(yaml, &c);
    assert_string_equal(c.ha_etcd_user, "wm");
    assert_string_equal(c.ha_etcd_password_file, "/etc/wm/pw");
    assert_int_equal(c.ha_etcd_password_file_line, 9);
    host_config_free(&c);
    snprintf(yaml, sizeof(yaml), "%s  etcd_tls_ca: /pki/etcd-ca.pem\n", tls_base);
    load_ok(yaml, &c);
    assert_string_equal(c.ha_etcd_tls_ca, "/pki/etcd-ca.pem");
    assert_string_equal(c.ha_etcd_tls_cert, "");
    assert_int_equal(c.ha_etcd_tls_ca_line, 7);
    host_config_free(&c);
    expect_message("ha: {etcd_endpoints: \"a:1,b\"}\n",
                   "x.yaml:1: ha.etcd_endpoints: item \"b\" is not \"host:port\" (port 1..65535)");
    expect_refused("ha: {etcd_endpoints: \"a:1,,b:2\"}\n", "item \"\" is not");
    expect_refused("ha: {etcd_endpoints: \"a:0\"}\n", "item \"a:0\" is not");
    expect_refused("ha: {etcd_endpoints: \":5\"}\n", "item \":5\" is not");
    /* an https:// (or any) URL is refused, not taken as a host nor as TLS */
    expect_message("ha: {etcd_endpoints: \"127.0.0.1:2379,https://10.0.0.7:2379\"}\n",
                   "x.yaml:1: ha.etcd_endpoints: item \"https://10.0.0.7:2379\" is a URL: give "
                   "etcd's client address as \"host:port\" (TLS to etcd is set with "
                   "ha.etcd_tls_ca, not https://)");
    expect_refused("ha: {etcd_endpoints: \"http://127.0.0.1:2379\"}\n", "is a URL");
    expect_refused("ha: {prefix: wm/}\n", "ha.prefix: \"wm/\" is not a key prefix");
    expect_refused("ha: {prefix: /wm}\n", "ha.prefix: \"/wm\" is not a key prefix");
    expect_refused("ha: {prefix: \"/w m/\"}\n", "is not a key prefix");
    expect_refused("ha: {lease_ttl_s: 0}\n", "ha.lease_ttl_s: 0 is outside");
    expect_refused("ha: {lease_ttl_s: 61}\n", "ha.lease_ttl_s: 61 is outside");
    expect_refused("ha: {id: \"a b\"}\n", "ha.id: \"a b\" is not a name");
    expect_refused("ha: {fast_failover: maybe}\n", "ha.fast_failover: \"maybe\" is not a boolean");
    expect_message("ha:\n  fast_failover: false\n",
                   "x.yaml:2: ha.fast_failover: is set but ha.enabled is false (it would do nothing)");
}

static void test_embedded_node_needs_an_rpc_listener(void **state)
{
    (void)state;
    expect_message("listen:\n  tcp: \"\"\n  unix: \"\"\nnode:\n  embedded: true\n",
                   "x.yaml:5: node.embedded: true needs listen.tcp or listen.unix "
                   "(the node registers through it)");
    expect_refused("listen:\n  tcp: \"\"\n", "node.embedded: true needs listen.tcp or listen.unix");
    host_config c;
    load_ok("listen:\n  tcp: \"\"\nnode:\n  embedded: false\n", &c);
    assert_int_equal(c.node_embedded, 0);
    host_config_free(&c);
    load_ok("listen:\n  tcp: \"\"\n  unix: \"m.sock\"\n", &c);
    assert_string_equal(c.listen_unix, "/etc/wm/m.sock");
    host_config_free(&c);
}

/* Two of the master process's own listeners on one address and port (or
 * one socket path) are refused at load, naming both keys and lines: the
 * second bind would fail at the start, after --check said "ok". Port 0,
 * different hosts, and a data port of no embedded node are no clash. */
static void test_refuses_listeners_sharing_an_address(void **state)
{
    (void)state;
    expect_message("listen:\n  unix: \"\"\n  tcp: \"127.0.0.1:28610\"\n  admin: \"127.0.0.1:28610\"\n",
                   "x.yaml:4: listen.admin: 127.0.0.1:28610 is also listen.tcp's (line 3): two "
                   "listeners cannot share an address");
    expect_message("node:\n  data_listen: \"127.0.0.1:28610\"\nlisten:\n  tcp: \"127.0.0.1:28610\"\n",
                   "x.yaml:4: listen.tcp: 127.0.0.1:28610 is also node.data_listen's (line 2): two "
                   "listeners cannot share an address");
    /* the default listen.admin (127.0.0.1:7680): the key of the file is blamed */
    expect_message("node:\n  data_listen: \"localhost:7680\"\n",
                   "x.yaml:2: node.data_listen: localhost:7680 is also listen.admin's "
                   "127.0.0.1:7680 (its default): two listeners cannot share an address");
    expect_message("listen:\n  tcp: \"127.0.0.1:28610\"\n  admin: \"0.0.0.0:28610\"\n"
                   "auth:\n  allow_insecure: true\n",
                   "x.yaml:3: listen.admin: 0.0.0.0:28610 overlaps listen.tcp's 127.0.0.1:28610 "
                   "(line 2): a listener on any address (0.0.0.0, [::]) holds its port on every "
                   "address, and two listeners cannot share an address");
    expect_refused("listen:\n  tcp: \"*:28610\"\n  admin: \"127.0.0.2:28610\"\n"
                   "auth:\n  allow_insecure: true\n",
                   "listen.admin: 127.0.0.2:28610 overlaps listen.tcp's *:28610 (line 2)");
    expect_refused("listen:\n  tcp: \"[::]:28610\"\n  admin: \"127.0.0.1:28610\"\n"
                   "auth:\n  allow_insecure: true\n",
                   "listen.admin: 127.0.0.1:28610 overlaps listen.tcp's [::]:28610 (line 2)");
    expect_refused("listen:\n  tcp: \"[::1]:28610\"\n  admin: \"[::1]:28610\"\n",
                   "listen.admin: [::1]:28610 is also listen.tcp's (line 2)");
    expect_refused("listen:\n  unix: \"m.sock\"\nnode:\n  tenant: t\n  local_socket: "
                   "\"/etc/wm/m.sock\"\n  local_peers: [\"uid:1\"]\n",
                   "x.yaml:5: node.local_socket: /etc/wm/m.sock is also listen.unix's (line 2): "
                   "two listeners cannot share a socket path");

    host_config c;
    /* port 0, different hosts, IPv4 and IPv6 loopback, and an unopened port */
    load_ok("listen:\n  tcp: \"127.0.0.1:0\"\n  admin: \"127.0.0.1:0\"\nnode:\n  data_listen: "
            "\"0.0.0.0:0\"\n", &c);
    host_config_free(&c);
    load_ok("listen:\n  tcp: \"127.0.0.1:28610\"\n  admin: \"127.0.0.2:28610\"\nnode:\n  "
            "data_listen: \"[::1]:28610\"\n", &c);
    host_config_free(&c);
    load_ok("listen:\n  tcp: \"127.0.0.1:28610\"\n  admin: \"\"\nnode:\n  embedded: false\n", &c);
    host_config_free(&c);
    load_ok("listen:\n  tcp: \"\"\n  unix: \"m.sock\"\n  admin: \"127.0.0.1:28610\"\nnode:\n  "
            "data_listen: \"127.0.0.1:28611\"\n", &c);
    host_config_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refuses_listeners_sharing_an_address),
        cmocka_unit_test(test_embedded_node_needs_an_rpc_listener),
        cmocka_unit_test(test_refuses_incomplete_or_idle_ha_keys),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_empty_file_is_all_defaults),
        cmocka_unit_test(test_empty_file_on_disk),
        cmocka_unit_test(test_embedded_yaml),
        cmocka_unit_test(test_relative_file_name),
        cmocka_unit_test(test_every_key_is_read),
        cmocka_unit_test(test_relative_paths),
        cmocka_unit_test(test_null_section_keeps_defaults),
        cmocka_unit_test(test_refuses_unknown_keys),
        cmocka_unit_test(test_refuses_out_of_range_ratio),
        cmocka_unit_test(test_refuses_zero_batch_limit),
        cmocka_unit_test(test_refuses_unknown_enum_names),
        cmocka_unit_test(test_refuses_non_booleans),
        cmocka_unit_test(test_refuses_unticketed_reads_without_insecure_key),
        cmocka_unit_test(test_node_dedicated_to_a_tenant),
        cmocka_unit_test(test_refuses_embedded_only_keys_without_embedded_node),
        cmocka_unit_test(test_tls_keys),
        cmocka_unit_test(test_refuses_bad_integers),
        cmocka_unit_test(test_refuses_wrong_node_kind),
        cmocka_unit_test(test_refuses_missing_values),
        cmocka_unit_test(test_refuses_bad_addresses),
        cmocka_unit_test(test_refuses_duplicate_keys),
        cmocka_unit_test(test_refuses_plugin_entries),
        cmocka_unit_test(test_refuses_crossed_watermarks),
        cmocka_unit_test(test_refuses_yaml_syntax_errors),
        cmocka_unit_test(test_refuses_top_level_not_mapping),
        cmocka_unit_test(test_refuses_what_the_tree_cannot_hold),
        cmocka_unit_test(test_refuses_unreadable_file),
        cmocka_unit_test(test_refusal_names_the_file),
        cmocka_unit_test(test_late_failure_and_short_buffer),
        cmocka_unit_test(test_plugin_block_kept),
        cmocka_unit_test(test_cluster_get_each_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
