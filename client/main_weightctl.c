/* main_weightctl.c -- weightctl, the operator's and user's command line.
 *
 * The weight commands go through libweightclient (weightclient.h, linked as
 * libweightclient.so) and nothing else: `put` publishes safetensors files
 * as a revision (whole tensors, or with --tp one file per tensor-parallel
 * rank, shards joined by the same --split / --replicate rules `get` uses),
 * `ls` pages through revisions, `info` / `exists` / `size`
 * query one, `get` loads this rank's shards (resharded from whatever layout
 * was written) and writes them as one safetensors file, `policy`, `migrate`,
 * `op` and `rm` manage it. An identity on the command line is
 * NAMESPACE/RESOURCE/REVISION@GENERATION (the tenant comes from --tenant),
 * components percent-encoded where they hold '/', '@' or '%'; without
 * "@GENERATION" the newest live generation of that revision is taken. The
 * plain object store commands (`kv put KEY FILE`, `kv get KEY FILE`,
 * `kv ls [PREFIX]`, `kv rm KEY`) and `status` talk to the master's object
 * service directly. The master address defaults to the one
 * config/embedded.yaml listens on, so `make run` and then `weightctl status`
 * need no flags; --master or $WEIGHTCTL_MASTER override it (one master, or
 * the list a,b,c of an HA cluster's masters). put and get draw
 * a progress bar (bytes, rate, ETA) when stderr is a terminal; `--json`
 * prints machine-readable output. A failure prints the RFC's error name and
 * the cause on stderr and exits 1 (2 for usage errors; `exists` exits 1
 * when the revision is not READY and readable). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include <fnmatch.h>
#include <signal.h>
#include <inttypes.h>
#include <time.h>

#include "kv_client.h"
#include "wc_safetensors.h"
#include "weightclient.h"
#include "weightctl_master.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: weightctl [--master ADDR] [--tenant T] [--json] COMMAND ...\n"
            "  put --namespace NS --resource R --revision V [--generation G]\n"
            "      [--policy hot|cold|mixed[:RATIO]] [--mode pinned|manual|auto]\n"
            "      [--tie NAME=TARGET]... [--payload-bytes N] FILE...\n"
            "                         publish safetensors files as one revision\n"
            "      [--tp N [--split PATTERN=DIM]... [--replicate PATTERN]...] RANK0 ... RANK<N-1>\n"
            "                         or N files holding one TP rank's shards each (as get\n"
            "                         --tp writes them), split and replicated by the rules below\n"
            "  ls [--namespace NS [--resource R]] [--limit N] [--page-token T] [--all]\n"
            "                         list revisions (--all: tombstones too)\n"
            "  info ID                identity, state, policy, operation, bytes, manifest\n"
            "  exists ID              exit 0 only when READY and readable\n"
            "  size ID                logical payload bytes\n"
            "  get ID --out DIR [--tp N --rank R] [--split PATTERN=DIM]... [--replicate PATTERN]...\n"
            "                         write this rank's tensors as DIR/rank<R>-of-<N>.safetensors;\n"
            "                         the first rule whose glob matches (and, for --split, whose\n"
            "                         DIM the tensor has) decides, else >= 2 dims split along 0\n"
            "  policy ID [--preferred hot|cold|mixed[:RATIO]] [--mode M] [--expect GEN]\n"
            "  migrate ID --to hot|cold|mixed[:RATIO] [--expect GEN]\n"
            "  op OPID [--wait]       an operation's progress (--wait: until it ends)\n"
            "  rm ID [--expect GEN] [--wait]   delete the revision, keep a tombstone\n"
            "  upsert BASE_ID --generation G [--mode put-first|delete-first] [--request-id X]\n"
            "      [--expect-generation M] [--policy P] [--tie N=T]... [--wait] FILE...\n"
            "                         replace BASE_ID by generation G of its lineage (one claim\n"
            "                         per lineage; --wait: until COMMITTED or ABORTED)\n"
            "  status                 the master's role, nodes, segments, capacity and use; of\n"
            "                         an HA cluster every master's role, applied seq and lag,\n"
            "                         and each capability gate, confirmed or what blocks it\n"
            "  gate confirm GATE      open a capability gate (HA) once every master can replay\n"
            "                         its record types; durable, kept across failovers\n"
            "  kv put KEY FILE        store FILE's bytes as object KEY\n"
            "  kv get KEY FILE        write object KEY's bytes (checked) to FILE\n"
            "  kv ls [PREFIX]         list object keys\n"
            "  kv rm KEY              remove an object\n"
            "ID is NAMESPACE/RESOURCE/REVISION[@GENERATION], components percent-encoded where\n"
            "they hold '/', '@' or '%%'. ADDR is host:port or a Unix socket path, or the\n"
            "masters of an HA cluster as a list a,b,c (the leader is found and followed)\n"
            "(default %s, or $WEIGHTCTL_MASTER)\n",
            WEIGHTCTL_DEFAULT_MASTER);
}

static int connect_master(ctl *x)
{
    return wctl_connect_master(x);
}

static void json_str(const char *s)
{
    wctl_json_str(s);
}

static int cmd_kv_ls(ctl *x, const char *prefix)
{
    char cursor[2048] = "";
    int first = 1;
    if (x->json) printf("[");
    for (;;) {
        char **keys = NULL, *next = NULL;
        size_t n = 0;
        if (kvc_list(x->c, prefix, cursor, 1000, &keys, &n, &next) < 0) {
            if (x->json) printf("]\n");
            fprintf(stderr, "weightctl: kv ls: %s\n", kvc_error(x->c));
            return 1;
        }
        for (size_t i = 0; i < n; i++) {
            if (x->json) {
                if (!first) putchar(',');
                json_str(keys[i]);
            } else {
                puts(keys[i]);
            }
            first = 0;
        }
        snprintf(cursor, sizeof(cursor), "%s", next);
        kvc_list_free(keys, n, next);
        if (cursor[0] == '\0') break;
    }
    if (x->json) printf("]\n");
    return 0;
}

static int cmd_kv_put(ctl *x, const char *key, const char *path)
{
    struct stat st;
    int fd = open(path, O_RDONLY);
    if (fd < 0 || fstat(fd, &st) < 0) {
        perror(path);
        if (fd >= 0) close(fd);
        return 1;
    }
    size_t len = (size_t)st.st_size;
    void *data = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : (void *)"";
    close(fd);
    if (data == MAP_FAILED) {
        perror(path);
        return 1;
    }
    int rc = kvc_put_bytes(x->c, key, data, len, SMP_DATA_KV, NULL, 0, NULL);
    if (len) munmap(data, len);
    if (rc < 0) {
        fprintf(stderr, "weightctl: kv put %s: %s\n", key, kvc_error(x->c));
        return 1;
    }
    if (x->json) printf("{\"key\":\"%s\",\"bytes\":%zu}\n", key, len);
    return 0;
}

static int cmd_kv_get(ctl *x, const char *key, const char *path)
{
    kvc_object obj;
    uint64_t len = 0;
    if (kvc_get(x->c, key, &obj) < 0) {
        fprintf(stderr, "weightctl: kv get %s: %s\n", key, kvc_error(x->c));
        return 1;
    }
    void *buf = malloc(obj.size ? obj.size : 1);
    if (buf == NULL) {
        fprintf(stderr, "weightctl: kv get %s: out of memory\n", key);
        return 1;
    }
    int rc = kvc_get_into(x->c, key, buf, obj.size, &len, 1);
    if (rc < 0) {
        fprintf(stderr, "weightctl: kv get %s: %s\n", key, kvc_error(x->c));
        free(buf);
        return 1;
    }
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(buf, 1, len, f) == len;
    if (f && fclose(f) != 0) ok = 0;
    free(buf);
    if (!ok) {
        perror(path);
        return 1;
    }
    if (x->json) printf("{\"key\":\"%s\",\"bytes\":%llu}\n", key, (unsigned long long)len);
    return 0;
}

static int cmd_kv_rm(ctl *x, const char *key)
{
    if (kvc_remove(x->c, key) < 0) {
        fprintf(stderr, "weightctl: kv rm %s: %s\n", key, kvc_error(x->c));
        return 1;
    }
    if (x->json) printf("{\"removed\":true}\n");
    return 0;
}

/* ======================================================================== */
/* The weight commands                                                      */
/* ======================================================================== */

static int open_weights(ctl *x)
{
    char err[512];
    int rc = weight_store_open(x->master, x->tenant, NULL, &x->ws, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "weightctl: cannot reach the master at %s: %s: %s\n", x->master,
                weight_error_name(rc), err);
        return -1;
    }
    return 0;
}

/* Print "weightctl: WHAT: NAME: cause" and return 1. */
static int weight_failed(ctl *x, const char *what, int rc)
{
    fprintf(stderr, "weightctl: %s: %s: %s\n", what, weight_error_name(rc),
            weight_store_last_error(x->ws));
    return 1;
}

/* -- progress bar -------------------------------------------------------- */

typedef struct progress {
    int on;
    const char *label;
    double t0;
    uint64_t last_done;
    int drawn;
} progress;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void human(double v, char *out, size_t cap)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (v >= 1024 && i < 4) {
        v /= 1024;
        i++;
    }
    snprintf(out, cap, i ? "%.1f %s" : "%.0f %s", v, u[i]);
}

static void progress_cb(void *ctx, uint64_t done, uint64_t total)
{
    progress *p = ctx;
    char d[32], t[32], r[32];
    if (!p->on) return;
    double el = now_s() - p->t0;
    double rate = el > 0 ? (double)done / el : 0;
    int width = 30, fill = total ? (int)((double)width * (double)done / (double)total) : width;
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '-';
    bar[width] = '\0';
    human((double)done, d, sizeof d);
    human((double)total, t, sizeof t);
    human(rate, r, sizeof r);
    double eta = rate > 0 && total > done ? (double)(total - done) / rate : 0;
    fprintf(stderr, "\r%s [%s] %s / %s  %s/s  ETA %02d:%02d\x1b[K", p->label, bar, d, t, r,
            (int)(eta / 60), (int)eta % 60);
    p->drawn = 1;
}

static void progress_end(progress *p)
{
    if (p->on && p->drawn) fputc('\n', stderr);
}

/* -- identities ------------------------------------------------------------ */

/* Parse an ID; without "@GEN" take the newest live generation of it. */
static int parse_id(ctl *x, const char *text, weight_identity *id)
{
    int has_gen = 0;
    if (weight_identity_parse(text, x->tenant, id, &has_gen) < 0) {
        fprintf(stderr, "weightctl: '%s' is not NAMESPACE/RESOURCE/REVISION[@GENERATION]\n", text);
        return 2;
    }
    if (has_gen) return 0;
    weight_list_query q = {id->namespace_id, id->resource_id, 0, 0};
    char token[1024] = "", next[1024];
    uint64_t best = 0;
    do {
        weight_metadata *list = NULL;
        size_t n = 0;
        int rc = weight_list(x->ws, &q, token, &list, &n, next, sizeof next);
        if (rc < 0) return weight_failed(x, "resolving the generation", rc);
        for (size_t i = 0; i < n; i++)
            if (strcmp(list[i].identity.revision, id->revision) == 0 &&
                list[i].identity.generation > best)
                best = list[i].identity.generation;
        weight_list_free(list);
        snprintf(token, sizeof token, "%s", next);
    } while (token[0]);
    if (best == 0) {
        fprintf(stderr, "weightctl: %s: NOT_FOUND: no live generation of that revision\n", text);
        return 1;
    }
    id->generation = best;
    return 0;
}

static void id_text(const weight_identity *id, char *out, size_t cap)
{
    if (weight_identity_format(id, out, cap) < 0) snprintf(out, cap, "(identity too long)");
}

/* parse_id of arg, then its text into text[tcap] and "CMD TEXT" (what a
 * failure names) into what[wcap]. Returns parse_id's status: 0, or the exit
 * code with the cause already printed. */
static int resolve_id(ctl *x, const char *arg, const char *cmd, weight_identity *id, char *text,
                      size_t tcap, char *what, size_t wcap)
{
    int rc = parse_id(x, arg, id);
    if (rc != 0) return rc;
    id_text(id, text, tcap);
    snprintf(what, wcap, "%s %s", cmd, text);
    return 0;
}

/* "hot", "cold", "mixed" or "mixed:0.3" into a residency and ratio. */
static int parse_residency(const char *s, weight_residency *res, double *ratio)
{
    *ratio = 0;
    if (strcasecmp(s, "hot") == 0) *res = WEIGHT_RES_HOT;
    else if (strcasecmp(s, "cold") == 0) *res = WEIGHT_RES_COLD;
    else if (strncasecmp(s, "mixed", 5) == 0 && (s[5] == '\0' || s[5] == ':')) {
        *res = WEIGHT_RES_MIXED;
        if (s[5] == ':') {
            char *end = NULL;
            *ratio = strtod(s + 6, &end);
            if (end == s + 6 || *end != '\0' || !(*ratio > 0 && *ratio < 1)) return -1;
        }
    } else {
        return -1;
    }
    return 0;
}

static int parse_mode(const char *s, weight_migration_mode *m)
{
    if (strcasecmp(s, "pinned") == 0) *m = WEIGHT_MODE_PINNED;
    else if (strcasecmp(s, "manual") == 0) *m = WEIGHT_MODE_MANUAL;
    else if (strcasecmp(s, "auto") == 0) *m = WEIGHT_MODE_AUTO;
    else return -1;
    return 0;
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end = NULL;
    if (s == NULL || *s < '0' || *s > '9') return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0') return -1;
    *out = (uint64_t)v;
    return 0;
}

/* -- JSON ------------------------------------------------------------------ */

static void json_hex(const uint8_t *b, size_t n)
{
    putchar('"');
    for (size_t i = 0; i < n; i++) printf("%02x", b[i]);
    putchar('"');
}

static void json_identity(const weight_identity *id)
{
    char text[2048];
    id_text(id, text, sizeof text);
    printf("{\"id\":");
    json_str(text);
    printf(",\"tenant\":");
    json_str(id->tenant_id);
    printf(",\"namespace\":");
    json_str(id->namespace_id);
    printf(",\"resource\":");
    json_str(id->resource_id);
    printf(",\"revision\":");
    json_str(id->revision);
    printf(",\"generation\":%" PRIu64 "}", id->generation);
}

static void json_operation(const weight_operation *op)
{
    printf("{\"id\":%" PRIu64 ",\"identity\":", op->id);
    json_identity(&op->identity);
    printf(",\"kind\":\"%s\",\"state\":\"%s\",\"target\":\"%s\",\"target_hot_ratio\":%g,"
           "\"members_done\":%" PRIu64 ",\"members_total\":%" PRIu64 ",\"bytes_done\":%" PRIu64
           ",\"bytes_total\":%" PRIu64 ",\"attempts\":%u,\"error\":",
           weight_operation_kind_name(op->kind), weight_operation_state_name(op->state),
           weight_residency_name(op->target), op->target_hot_ratio, op->members_done,
           op->members_total, op->bytes_done, op->bytes_total, op->attempts);
    json_str(op->error);
    putchar('}');
}

static void json_metadata(const weight_metadata *m, const weight_operation *op)
{
    printf("{\"identity\":");
    json_identity(&m->identity);
    printf(",\"availability\":\"%s\",\"residency\":\"%s\",\"observed_hot_ratio\":%g,"
           "\"policy\":{\"preferred\":\"%s\",\"mixed_hot_ratio\":%g,\"mode\":\"%s\"},"
           "\"metadata_generation\":%" PRIu64 ",\"operation_id\":%" PRIu64
           ",\"logical_bytes\":%" PRIu64 ",\"payload_count\":%" PRIu64
           ",\"affinity_count\":%" PRIu64 ",\"active_leases\":%u,\"manifest_key\":",
           weight_availability_name(m->availability), weight_residency_name(m->residency),
           m->observed_hot_ratio, weight_residency_name(m->policy.preferred),
           m->policy.mixed_hot_ratio, weight_mode_name(m->policy.mode), m->metadata_generation,
           m->operation_id, m->logical_bytes, m->payload_count, m->affinity_count,
           m->active_leases);
    json_str(m->manifest_key);
    printf(",\"manifest_sha256\":");
    json_hex(m->manifest_sha256, 32);
    printf(",\"created_ms\":%" PRIu64 ",\"updated_ms\":%" PRIu64 ",\"last_access_ms\":%" PRIu64,
           m->created_ms, m->updated_ms, m->last_access_ms);
    if (op && op->id) {
        printf(",\"operation\":");
        json_operation(op);
    }
    putchar('}');
}

static void print_operation(const weight_operation *op)
{
    char text[2048];
    id_text(&op->identity, text, sizeof text);
    printf("operation   %" PRIu64 " %s %s", op->id, weight_operation_kind_name(op->kind),
           weight_operation_state_name(op->state));
    if (op->kind == 1) printf(" -> %s", weight_residency_name(op->target));
    if (op->target == WEIGHT_RES_MIXED) printf(" (ratio %.3f)", op->target_hot_ratio);
    printf("\n  revision  %s\n", text);
    printf("  progress  %" PRIu64 "/%" PRIu64 " members, %" PRIu64 "/%" PRIu64
           " bytes, %u attempt(s)\n",
           op->members_done, op->members_total, op->bytes_done, op->bytes_total, op->attempts);
    if (op->error[0]) printf("  error     %s\n", op->error);
}

/* Show an operation (a JSON line with --json, else text) and return the
 * exit code it makes: 1 when it FAILED (state 3), else 0. */
static int show_operation(ctl *x, const weight_operation *op)
{
    if (x->json) {
        json_operation(op);
        putchar('\n');
    } else {
        print_operation(op);
    }
    return op->state == 3 ? 1 : 0;
}

/* -- TP placement rules (get and put) --------------------------------------- */

/* --split PATTERN=DIM and --replicate PATTERN, in command-line order: the
 * first rule whose glob matches a tensor's name (and, for a split, whose DIM
 * the tensor has) decides; without one, tensors of 2 or more dimensions are
 * split along 0 and the rest replicated. */
typedef struct rule {
    const char *pattern;
    int split;            /* 1: split along dim, 0: replicate */
    uint32_t dim;
} rule;

typedef struct rules {
    rule r[128];
    size_t n;
} rules;

/* Add a --split (arg "PATTERN=DIM", cut in place) or --replicate rule. 0, or
 * -1 for a usage error. */
static int rules_add(rules *rs, char *arg, int split)
{
    uint64_t dim = 0;
    if (rs->n == sizeof rs->r / sizeof rs->r[0]) return -1;
    if (split) {
        char *eq = strrchr(arg, '=');
        if (eq == NULL || parse_u64(eq + 1, &dim) < 0 || dim > 7) return -1;
        *eq = '\0';
    }
    rs->r[rs->n++] = (rule){arg, split, (uint32_t)dim};
    return 0;
}

/* 1 with *dim when tensor name (ndim dimensions) is split, 0 when it is
 * replicated. */
static int rules_decide(const rules *rs, const char *name, uint32_t ndim, uint32_t *dim)
{
    for (size_t i = 0; i < rs->n; i++) {
        const rule *r = &rs->r[i];
        if (fnmatch(r->pattern, name, 0) != 0) continue;
        if (r->split && r->dim >= ndim) continue; /* not that rank */
        *dim = r->dim;
        return r->split;
    }
    *dim = 0;
    return ndim >= 2;
}

/* -- put ------------------------------------------------------------------- */

typedef struct tie {
    char *name;
    const char *target;
} tie;

/* Add every tensor of the files to w. Explicit ties become aliases; a
 * tensor byte-identical to an earlier one of the same dtype and shape is
 * stored once (an alias). 0 or the writer's error. */
static int add_files(weight_writer *w, const wc_st_file *files, size_t n_files, const tie *ties,
                     size_t n_ties)
{
    int rc;
    for (size_t i = 0; i < n_files; i++) {
        const wc_st_header *h = &files[i].header;
        for (size_t k = 0; k < h->n_tensors; k++) {
            const wc_st_tensor *t = &h->tensors[k];
            const char *target = NULL;
            for (size_t j = 0; j < n_ties && !target; j++)
                if (strcmp(ties[j].name, t->name) == 0) target = ties[j].target;
            for (size_t fi = 0; fi <= i && !target && t->bytes > 0; fi++) {
                const wc_st_header *h2 = &files[fi].header;
                for (size_t k2 = 0; k2 < h2->n_tensors && !target; k2++) {
                    const wc_st_tensor *u = &h2->tensors[k2];
                    if (fi == i && k2 >= k) break;
                    int tied_u = 0;
                    for (size_t j = 0; j < n_ties; j++)
                        if (strcmp(ties[j].name, u->name) == 0) tied_u = 1;
                    if (!tied_u && u->dtype == t->dtype && u->ndim == t->ndim &&
                        u->bytes == t->bytes &&
                        memcmp(u->shape, t->shape, t->ndim * sizeof *t->shape) == 0 &&
                        memcmp(files[fi].base + u->offset, files[i].base + t->offset, t->bytes) == 0)
                        target = u->name;
                }
            }
            if (target) rc = weight_writer_alias(w, t->name, target);
            else rc = weight_writer_add_tensor(w, t->name, wc_dtype_name(t->dtype), t->ndim,
                                               t->shape, files[i].base + t->offset);
            if (rc < 0) return rc;
        }
    }
    return 0;
}

/* The target of name among the --tie rules, or NULL. */
static const char *tie_target(const tie *ties, size_t n_ties, const char *name)
{
    for (size_t j = 0; j < n_ties; j++)
        if (strcmp(ties[j].name, name) == 0) return ties[j].target;
    return NULL;
}

/* Print why rank files cannot form one revision; INVALID_ARGUMENT. */
static int shard_error(const char *path, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int shard_error(const char *path, const char *name, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "weightctl: put: INVALID_ARGUMENT: %s: tensor %s: ", path, name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return WEIGHT_EINVALID_ARGUMENT;
}

/* Add the tensors of tp rank files (files[r] holds rank r's shards, as
 * `weightctl get --tp` writes them) to w. The rules say which tensors are
 * split and along which dimension -- they must be the ones the shards were
 * cut with, which the files do not record. A split tensor's shards must
 * agree on dtype and every other dimension and hold the parts of an even
 * split (the first size % tp ranks one more); they are added as fragments
 * at their offsets. A replicated one must be byte-identical in every rank
 * and is added once. Every rank must hold the same tensor names. w NULL:
 * only check, so that a bad set is refused before an import begins. 0, the
 * writer's error, or INVALID_ARGUMENT (printed, naming file and tensor). */
static int add_shards(weight_writer *w, const wc_st_file *files, char **paths, uint32_t tp,
                      const rules *rs, const tie *ties, size_t n_ties)
{
    const wc_st_header *h0 = &files[0].header;
    int rc;
    for (uint32_t r = 1; r < tp; r++)
        for (size_t k = 0; k < files[r].header.n_tensors; k++)
            if (wc_st_find(h0, files[r].header.tensors[k].name) < 0)
                return shard_error(paths[r], files[r].header.tensors[k].name,
                                   "not in rank 0's file %s", paths[0]);
    for (size_t k = 0; k < h0->n_tensors; k++) {
        const wc_st_tensor *t0 = &h0->tensors[k];
        const wc_st_tensor *t[4096];
        uint64_t global[WC_MAX_NDIM], offset[WC_MAX_NDIM] = {0};
        uint32_t dim = 0;
        const char *target = tie_target(ties, n_ties, t0->name);
        if (target) {
            if (w && (rc = weight_writer_alias(w, t0->name, target)) < 0) return rc;
            continue;
        }
        int split = rules_decide(rs, t0->name, t0->ndim, &dim);
        for (uint32_t r = 0; r < tp; r++) {
            long i = wc_st_find(&files[r].header, t0->name);
            if (i < 0) return shard_error(paths[r], t0->name, "missing in this rank");
            t[r] = &files[r].header.tensors[i];
            if (t[r]->dtype != t0->dtype || t[r]->ndim != t0->ndim)
                return shard_error(paths[r], t0->name, "dtype or rank differs from rank 0's");
            for (uint32_t d = 0; d < t0->ndim; d++)
                if (t[r]->shape[d] != t0->shape[d] && !(split && d == dim))
                    return shard_error(paths[r], t0->name,
                                       "dimension %u is %" PRIu64 ", rank 0 has %" PRIu64
                                       " (only dimension %u may differ)",
                                       d, t[r]->shape[d], t0->shape[d], dim);
            if (!split && memcmp(files[r].base + t[r]->offset, files[0].base + t0->offset,
                                 t0->bytes) != 0)
                return shard_error(paths[r], t0->name,
                                   "replicated by the rules but its bytes differ from rank 0's "
                                   "(name its split with --split PATTERN=DIM)");
        }
        if (!split) {
            if (w && (rc = weight_writer_add_tensor(w, t0->name, wc_dtype_name(t0->dtype),
                                                    t0->ndim, t0->shape,
                                                    files[0].base + t0->offset)) < 0)
                return rc;
            continue;
        }
        memcpy(global, t0->shape, t0->ndim * sizeof *global);
        global[dim] = 0;
        for (uint32_t r = 0; r < tp; r++) global[dim] += t[r]->shape[dim];
        for (uint32_t r = 0; r < tp; r++) { /* the split get makes: the first rem ranks hold one more */
            uint64_t q = global[dim] / tp, rem = global[dim] % tp;
            if (t[r]->shape[dim] != q + (r < rem))
                return shard_error(paths[r], t0->name,
                                   "rank %u holds %" PRIu64 " of dimension %u's %" PRIu64
                                   "; a %u-way split gives it %" PRIu64
                                   " (files of another --tp, or not in rank order?)",
                                   r, t[r]->shape[dim], dim, global[dim], tp, q + (r < rem));
        }
        for (uint32_t r = 0; r < tp && w; r++) {
            rc = weight_writer_add_fragment(w, t0->name, wc_dtype_name(t0->dtype), t0->ndim,
                                            global, offset, t[r]->shape,
                                            files[r].base + t[r]->offset);
            if (rc < 0) return rc;
            offset[dim] += t[r]->shape[dim];
        }
    }
    return 0;
}

/* One --tie NAME=TARGET into ties[*n_ties] (at most 64; arg is split in
 * place). 0, or -1 for a usage error. */
static int parse_tie(char *arg, tie *ties, size_t *n_ties)
{
    char *eq = strchr(arg, '=');
    if (eq == NULL || *n_ties == 64) return -1;
    *eq = '\0';
    ties[*n_ties].name = arg;
    ties[(*n_ties)++].target = eq + 1;
    return 0;
}

/* Open the safetensors files paths[0..n) into files[] (zeroed by the
 * caller), then apply --payload-bytes (0: the default). 0, or 1 with the
 * cause printed as "weightctl: CMD: ..."; what was opened stays for the
 * caller to close. */
static int open_inputs(ctl *x, const char *cmd, char **paths, size_t n, wc_st_file *files,
                       uint64_t payload)
{
    char err[512];
    int rc;
    for (size_t i = 0; i < n; i++) {
        if (wc_st_open(paths[i], &files[i], err, sizeof err) < 0) {
            fprintf(stderr, "weightctl: %s: %s: %s\n", cmd, paths[i], err);
            return 1;
        }
    }
    if (payload && (rc = weight_store_set_option(x->ws, WEIGHT_OPT_PAYLOAD_BYTES, payload)) < 0)
        return weight_failed(x, cmd, rc);
    return 0;
}

static int cmd_put(ctl *x, int argc, char **argv)
{
    static const struct option opts[] = {
        {"namespace", required_argument, NULL, 'n'}, {"resource", required_argument, NULL, 'r'},
        {"revision", required_argument, NULL, 'v'},  {"generation", required_argument, NULL, 'g'},
        {"policy", required_argument, NULL, 'p'},    {"mode", required_argument, NULL, 'o'},
        {"tie", required_argument, NULL, 't'},       {"payload-bytes", required_argument, NULL, 'b'},
        {"tp", required_argument, NULL, 'T'},        {"split", required_argument, NULL, 's'},
        {"replicate", required_argument, NULL, 'R'}, {NULL, 0, NULL, 0}};
    const char *ns = NULL, *res = NULL, *rev = NULL;
    uint64_t gen = 1, payload = 0, tp = 1;
    rules rs = {.n = 0};
    weight_policy pol = {WEIGHT_RES_UNKNOWN, 0, WEIGHT_MODE_DEFAULT};
    int has_policy = 0, c, status = 1, rc;
    tie ties[64];
    size_t n_ties = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'n': ns = optarg; break;
        case 'r': res = optarg; break;
        case 'v': rev = optarg; break;
        case 'g':
            if (parse_u64(optarg, &gen) < 0 || gen == 0) goto usage;
            break;
        case 'p':
            if (parse_residency(optarg, &pol.preferred, &pol.mixed_hot_ratio) < 0) goto usage;
            has_policy = 1;
            break;
        case 'o':
            if (parse_mode(optarg, &pol.mode) < 0) goto usage;
            has_policy = 1;
            break;
        case 't':
            if (parse_tie(optarg, ties, &n_ties) < 0) goto usage;
            break;
        case 'b':
            if (parse_u64(optarg, &payload) < 0) goto usage;
            break;
        case 'T':
            if (parse_u64(optarg, &tp) < 0 || tp == 0 || tp > 4096) goto usage;
            break;
        case 's':
        case 'R':
            if (rules_add(&rs, optarg, c == 's') < 0) goto usage;
            break;
        default: goto usage;
        }
    }
    if (ns == NULL || res == NULL || rev == NULL || optind >= argc) goto usage;
    if (tp == 1 && rs.n > 0) {
        fprintf(stderr, "weightctl: put: --split and --replicate describe rank files: give --tp N\n");
        return 2;
    }
    if (tp > 1 && (uint64_t)(argc - optind) != tp) {
        fprintf(stderr, "weightctl: put: --tp %" PRIu64 " takes one file per rank, in rank order; "
                "%d given\n", tp, argc - optind);
        return 2;
    }
    weight_identity id;
    if (weight_identity_set(&id, x->tenant, ns, res, rev, gen) < 0) {
        fprintf(stderr, "weightctl: put: INVALID_ARGUMENT: empty or over-long identity component\n");
        return 2;
    }
    size_t n_files = (size_t)(argc - optind);
    wc_st_file *files = calloc(n_files, sizeof *files);
    weight_writer *w = NULL;
    progress pr = {isatty(2) && !x->json, "put", now_s(), 0, 0};
    char text[2048];
    if (files == NULL) return 1;
    if (open_inputs(x, "put", argv + optind, n_files, files, payload) != 0) goto close_files;
    if (tp > 1 && add_shards(NULL, files, argv + optind, (uint32_t)tp, &rs, ties, n_ties) < 0)
        goto close_files; /* refused before anything exists on the master */
    id_text(&id, text, sizeof text);
    if ((rc = weight_put_begin(x->ws, &id, has_policy ? &pol : NULL, &w)) < 0) {
        char what[2100];
        snprintf(what, sizeof what, "put %s", text);
        status = weight_failed(x, what, rc);
        goto close_files;
    }
    rc = tp > 1 ? add_shards(w, files, argv + optind, (uint32_t)tp, &rs, ties, n_ties)
                : add_files(w, files, n_files, ties, n_ties);
    if (rc < 0) {
        status = weight_failed(x, "put", rc);
        weight_writer_abort(w);
        goto close_files;
    }
    weight_metadata md;
    weight_store_set_progress(x->ws, progress_cb, &pr);
    rc = weight_writer_commit(w, &md);
    progress_end(&pr);
    if (rc < 0) {
        char what[2100];
        snprintf(what, sizeof what, "put %s", text);
        status = weight_failed(x, what, rc);
        goto close_files;
    }
    if (x->json) {
        json_metadata(&md, NULL);
        putchar('\n');
    } else {
        char b[32];
        human((double)md.logical_bytes, b, sizeof b);
        printf("published %s: %s (%" PRIu64 " bytes) in %" PRIu64 " payload objects, %s %s%s\n",
               text, b, md.logical_bytes, md.payload_count, weight_availability_name(md.availability),
               weight_residency_name(md.residency),
               md.operation_id ? " (converging to the preferred residency)" : "");
    }
    status = 0;
close_files:
    for (size_t i = 0; i < n_files; i++) wc_st_close(&files[i]);
    free(files);
    return status;
usage:
    usage(stderr);
    return 2;
}

/* -- upsert -------------------------------------------------------------------- */

static int print_claim(ctl *x, const weight_upsert_claim *c)
{
    char b[1200], t[1200];
    id_text(&c->base, b, sizeof b);
    id_text(&c->target, t, sizeof t);
    if (x->json) {
        printf("{\"request_id\":");
        json_str(c->request_id);
        printf(",\"base\":");
        json_identity(&c->base);
        printf(",\"target\":");
        json_identity(&c->target);
        printf(",\"mode\":\"%s\",\"phase\":\"%s\",\"expected_metadata_generation\":%" PRIu64
               ",\"committed_watermark\":%" PRIu64 ",\"error\":",
               c->mode == WEIGHT_UPSERT_DELETE_FIRST ? "DELETE_FIRST" : "PUT_FIRST",
               weight_upsert_phase_name(c->phase), c->expected_metadata_generation,
               c->committed_watermark);
        json_str(c->error);
        printf("}\n");
    } else {
        printf("claim %s: %s -> %s (%s) phase %s, watermark %" PRIu64 "%s%s\n", c->request_id, b, t,
               c->mode == WEIGHT_UPSERT_DELETE_FIRST ? "delete-first" : "put-first",
               weight_upsert_phase_name(c->phase), c->committed_watermark, c->error[0] ? ": " : "",
               c->error);
    }
    return 0;
}

/* upsert BASE_ID --generation G [--mode put-first|delete-first]
 *        [--request-id X] [--expect-generation M] [--policy ..] [--wait] FILE...
 * Without --expect-generation the base's current metadata generation is
 * read first (weight_upsert does it). --wait: until the claim is COMMITTED
 * or ABORTED. Exit 0 on success. */
static int cmd_upsert(ctl *x, int argc, char **argv)
{
    static const struct option opts[] = {
        {"generation", required_argument, NULL, 'g'}, {"mode", required_argument, NULL, 'm'},
        {"request-id", required_argument, NULL, 'q'}, {"expect-generation", required_argument, NULL, 'e'},
        {"policy", required_argument, NULL, 'p'},     {"tie", required_argument, NULL, 't'},
        {"wait", no_argument, NULL, 'w'},             {"payload-bytes", required_argument, NULL, 'b'},
        {NULL, 0, NULL, 0}};
    uint64_t gen = 0, expect = 0, payload = 0;
    weight_upsert_mode mode = WEIGHT_UPSERT_PUT_FIRST;
    const char *request_id = NULL;
    weight_policy pol = {WEIGHT_RES_UNKNOWN, 0, WEIGHT_MODE_DEFAULT};
    int has_policy = 0, wait = 0, c, status = 1, rc;
    tie ties[64];
    size_t n_ties = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'g':
            if (parse_u64(optarg, &gen) < 0 || gen == 0) goto usage;
            break;
        case 'm':
            if (strcmp(optarg, "put-first") == 0) mode = WEIGHT_UPSERT_PUT_FIRST;
            else if (strcmp(optarg, "delete-first") == 0) mode = WEIGHT_UPSERT_DELETE_FIRST;
            else goto usage;
            break;
        case 'q': request_id = optarg; break;
        case 'e':
            if (parse_u64(optarg, &expect) < 0 || expect == 0) goto usage;
            break;
        case 'p':
            if (parse_residency(optarg, &pol.preferred, &pol.mixed_hot_ratio) < 0) goto usage;
            has_policy = 1;
            break;
        case 't':
            if (parse_tie(optarg, ties, &n_ties) < 0) goto usage;
            break;
        case 'w': wait = 1; break;
        case 'b':
            if (parse_u64(optarg, &payload) < 0) goto usage;
            break;
        default: goto usage;
        }
    }
    if (gen == 0 || optind + 1 >= argc) goto usage;
    weight_identity base;
    if ((rc = parse_id(x, argv[optind], &base)) != 0) return rc;
    optind++;
    size_t n_files = (size_t)(argc - optind);
    wc_st_file *files = calloc(n_files, sizeof *files);
    weight_writer *w = NULL;
    weight_upsert_claim claim;
    progress pr = {isatty(2) && !x->json, "upsert", now_s(), 0, 0};
    if (files == NULL) return 1;
    if (open_inputs(x, "upsert", argv + optind, n_files, files, payload) != 0) goto close_files;
    rc = weight_upsert(x->ws, &base, gen, mode, request_id, expect, has_policy ? &pol : NULL, 0,
                       &claim, &w);
    if (rc < 0) {
        status = weight_failed(x, "upsert", rc);
        goto close_files;
    }
    if (w != NULL) {
        if ((rc = add_files(w, files, n_files, ties, n_ties)) < 0) {
            status = weight_failed(x, "upsert", rc);
            weight_writer_abort(w); /* refused by the master for a DELETE_FIRST target */
            goto close_files;
        }
        weight_store_set_progress(x->ws, progress_cb, &pr);
        rc = weight_writer_commit(w, NULL);
        progress_end(&pr);
        if (rc < 0) {
            status = weight_failed(x, "upsert (target import)", rc);
            goto close_files;
        }
    }
    if ((rc = weight_upsert_status(x->ws, &base, &claim)) < 0) {
        status = weight_failed(x, "upsert status", rc);
        goto close_files;
    }
    while (wait && claim.phase != WEIGHT_PHASE_COMMITTED && claim.phase != WEIGHT_PHASE_ABORTED) {
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
        if ((rc = weight_upsert_status(x->ws, &base, &claim)) < 0) {
            status = weight_failed(x, "upsert status", rc);
            goto close_files;
        }
    }
    print_claim(x, &claim);
    status = claim.phase == WEIGHT_PHASE_ABORTED ? 1 : 0;
close_files:
    for (size_t i = 0; i < n_files; i++) wc_st_close(&files[i]);
    free(files);
    return status;
usage:
    usage(stderr);
    return 2;
}

/* -- ls / info / exists / size ------------------------------------------------ */

static void print_row(const weight_metadata *m)
{
    char text[2048], b[32];
    id_text(&m->identity, text, sizeof text);
    human((double)m->logical_bytes, b, sizeof b);
    printf("%-48s %-9s %-7s %10s  %s", text, weight_availability_name(m->availability),
           weight_residency_name(m->residency), b, weight_residency_name(m->policy.preferred));
    if (m->policy.preferred == WEIGHT_RES_MIXED) printf(":%.2f", m->policy.mixed_hot_ratio);
    printf("/%s", weight_mode_name(m->policy.mode));
    if (m->operation_id) printf("  op %" PRIu64, m->operation_id);
    putchar('\n');
}

static int cmd_ls(ctl *x, int argc, char **argv)
{
    static const struct option opts[] = {
        {"namespace", required_argument, NULL, 'n'}, {"resource", required_argument, NULL, 'r'},
        {"limit", required_argument, NULL, 'l'},     {"page-token", required_argument, NULL, 'p'},
        {"all", no_argument, NULL, 'a'},             {NULL, 0, NULL, 0}};
    weight_list_query q = {NULL, NULL, 0, 0};
    const char *page = NULL;
    uint64_t limit = 0;
    int c, first = 1;
    optind = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'n': q.namespace_id = optarg; break;
        case 'r': q.resource_id = optarg; break;
        case 'l':
            if (parse_u64(optarg, &limit) < 0 || limit > UINT32_MAX) goto usage;
            q.limit = (uint32_t)limit;
            break;
        case 'p': page = optarg; break;
        case 'a': q.include_deleted = 1; break;
        default: goto usage;
        }
    }
    if (optind != argc) goto usage;
    char token[1024], next[1024];
    snprintf(token, sizeof token, "%s", page ? page : "");
    if (x->json) printf("{\"revisions\":[");
    else printf("%-48s %-9s %-7s %10s  %s\n", "REVISION", "STATE", "RES", "SIZE", "POLICY");
    for (;;) {
        weight_metadata *list = NULL;
        size_t n = 0;
        int rc = weight_list(x->ws, &q, token, &list, &n, next, sizeof next);
        if (rc < 0) {
            if (x->json) printf("]}\n");
            return weight_failed(x, "ls", rc);
        }
        for (size_t i = 0; i < n; i++) {
            if (x->json) {
                if (!first) putchar(',');
                json_metadata(&list[i], NULL);
            } else {
                print_row(&list[i]);
            }
            first = 0;
        }
        weight_list_free(list);
        snprintf(token, sizeof token, "%s", next);
        if (page != NULL || token[0] == '\0') break; /* --page-token: that page only */
    }
    if (x->json) {
        printf("],\"next_page_token\":");
        json_str(page ? token : "");
        printf("}\n");
    } else if (page != NULL && token[0]) {
        printf("next page: --page-token %s\n", token);
    }
    return 0;
usage:
    usage(stderr);
    return 2;
}

static int cmd_info(ctl *x, const char *arg)
{
    weight_identity id;
    weight_metadata m;
    weight_operation op;
    char text[2048], b[32], what[2100];
    int rc = resolve_id(x, arg, "info", &id, text, sizeof text, what, sizeof what);
    if (rc) return rc;
    if ((rc = weight_get_metadata(x->ws, &id, &m, &op)) < 0) return weight_failed(x, what, rc);
    if (x->json) {
        json_metadata(&m, &op);
        putchar('\n');
        return 0;
    }
    human((double)m.logical_bytes, b, sizeof b);
    printf("revision      %s\n", text);
    printf("tenant        %s\n", m.identity.tenant_id);
    printf("availability  %s\n", weight_availability_name(m.availability));
    printf("residency     %s (observed hot ratio %.3f)\n", weight_residency_name(m.residency),
           m.observed_hot_ratio);
    printf("policy        preferred %s", weight_residency_name(m.policy.preferred));
    if (m.policy.preferred == WEIGHT_RES_MIXED) printf(" (hot ratio %.3f)", m.policy.mixed_hot_ratio);
    printf(", mode %s\n", weight_mode_name(m.policy.mode));
    printf("metadata gen  %" PRIu64 "\n", m.metadata_generation);
    if (op.id) {
        printf("operation     %" PRIu64 " %s %s", op.id, weight_operation_kind_name(op.kind),
               weight_operation_state_name(op.state));
        if (op.kind == 1) printf(" -> %s", weight_residency_name(op.target));
        printf(", %" PRIu64 "/%" PRIu64 " bytes\n", op.bytes_done, op.bytes_total);
    } else {
        printf("operation     none\n");
    }
    printf("logical bytes %" PRIu64 " (%s) in %" PRIu64 " payload objects, %" PRIu64
           " affinity units\n", m.logical_bytes, b, m.payload_count, m.affinity_count);
    printf("leases        %u active\n", m.active_leases);
    printf("manifest      %s\n", m.manifest_key);
    printf("manifest hash ");
    for (int i = 0; i < 32; i++) printf("%02x", m.manifest_sha256[i]);
    printf("\n");
    return 0;
}

static int cmd_exists(ctl *x, const char *arg)
{
    weight_identity id;
    int exists = 0, has_gen = 0;
    if (weight_identity_parse(arg, x->tenant, &id, &has_gen) < 0 || !has_gen) {
        fprintf(stderr, "weightctl: '%s' is not NAMESPACE/RESOURCE/REVISION@GENERATION\n", arg);
        return 2;
    }
    int rc = weight_is_exist(x->ws, &id, &exists);
    if (rc < 0) return weight_failed(x, "exists", rc);
    if (x->json) printf("{\"exists\":%s}\n", exists ? "true" : "false");
    else printf("%s\n", exists ? "yes" : "no");
    return exists ? 0 : 1;
}

static int cmd_size(ctl *x, const char *arg)
{
    weight_identity id;
    uint64_t bytes = 0;
    int rc = parse_id(x, arg, &id);
    if (rc) return rc;
    if ((rc = weight_get_size(x->ws, &id, &bytes)) < 0) return weight_failed(x, "size", rc);
    if (x->json) printf("{\"logical_bytes\":%" PRIu64 "}\n", bytes);
    else printf("%" PRIu64 "\n", bytes);
    return 0;
}

/* -- get ------------------------------------------------------------------- */

typedef struct getcli {
    uint32_t tp, rank;
    const rules *rules;
    /* What came back, in manifest order. */
    struct out_tensor {
        char *name;
        char dtype[16];
        uint32_t ndim;
        uint64_t shape[8];
        void *data;
        uint64_t bytes;
    } *out;
    size_t n_out, cap_out;
} getcli;

static int get_place(void *ctx, const weight_tensor_info *t, weight_tensor_place *out)
{
    getcli *g = ctx;
    uint32_t dim = 0;
    int split = rules_decide(g->rules, t->name, t->ndim, &dim);
    if (g->tp <= 1 || !split) {
        out->kind = WEIGHT_PLACE_REPLICATED;
        return 0;
    }
    out->kind = WEIGHT_PLACE_SPLIT;
    out->dim = dim;
    out->parts = g->tp;
    out->rank = g->rank;
    return 0;
}

static int get_provide(void *ctx, const weight_tensor_info *t, const weight_tensor_place *p,
                       const uint64_t *shape, uint64_t bytes, void **out)
{
    getcli *g = ctx;
    (void)p;
    if (g->n_out == g->cap_out) {
        size_t cap = g->cap_out ? g->cap_out * 2 : 64;
        struct out_tensor *n = realloc(g->out, cap * sizeof *n);
        if (n == NULL) return WEIGHT_ENOMEM;
        g->out = n;
        g->cap_out = cap;
    }
    struct out_tensor *o = &g->out[g->n_out];
    memset(o, 0, sizeof *o);
    if ((o->name = strdup(t->name)) == NULL || (o->data = malloc(bytes ? bytes : 1)) == NULL) {
        free(o->name);
        return WEIGHT_ENOMEM;
    }
    snprintf(o->dtype, sizeof o->dtype, "%s", t->dtype);
    o->ndim = t->ndim;
    for (uint32_t d = 0; d < t->ndim && d < 8; d++) o->shape[d] = shape[d];
    o->bytes = bytes;
    g->n_out++;
    *out = o->data;
    return 0;
}

/* Ctrl-C during get: cancel the load (its lease is released), exit 130. */
static weight_store *volatile g_cancel_store;
static volatile sig_atomic_t g_interrupted;
static void on_sigint(int sig)
{
    (void)sig;
    g_interrupted = 1;
    if (g_cancel_store) weight_store_cancel(g_cancel_store);
}

static int cmd_get(ctl *x, int argc, char **argv)
{
    static const struct option opts[] = {
        {"out", required_argument, NULL, 'o'},     {"tp", required_argument, NULL, 't'},
        {"rank", required_argument, NULL, 'r'},    {"split", required_argument, NULL, 's'},
        {"replicate", required_argument, NULL, 'R'}, {NULL, 0, NULL, 0}};
    const char *dir = NULL;
    uint64_t tp = 1, rank = 0;
    rules rs = {.n = 0};
    getcli g;
    int c, status = 1, rc;
    memset(&g, 0, sizeof g);
    g.rules = &rs;
    optind = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'o': dir = optarg; break;
        case 't':
            if (parse_u64(optarg, &tp) < 0 || tp == 0 || tp > 4096) goto usage;
            break;
        case 'r':
            if (parse_u64(optarg, &rank) < 0) goto usage;
            break;
        case 's':
        case 'R':
            if (rules_add(&rs, optarg, c == 's') < 0) goto usage;
            break;
        default: goto usage;
        }
    }
    if (dir == NULL || optind != argc - 1 || rank >= tp) goto usage;
    g.tp = (uint32_t)tp;
    g.rank = (uint32_t)rank;
    weight_identity id;
    char text[2048], what[2100], path[4096], err[512];
    if ((rc = resolve_id(x, argv[optind], "get", &id, text, sizeof text, what, sizeof what)) != 0)
        return rc;
    progress pr = {isatty(2) && !x->json, "get", now_s(), 0, 0};
    weight_placement pl = {get_place, &g};
    weight_bindings bd = {NULL, 0, get_provide, &g};
    weight_get_stats st;
    weight_store_set_progress(x->ws, progress_cb, &pr);
    g_cancel_store = x->ws;
    struct sigaction sa, old_sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, &old_sa);
    double t0 = now_s();
    rc = weight_get(x->ws, &id, &pl, &bd, &st);
    double dt = now_s() - t0;
    sigaction(SIGINT, &old_sa, NULL);
    g_cancel_store = NULL;
    progress_end(&pr);
    if (rc < 0) {
        status = weight_failed(x, what, rc);
        if (rc == WEIGHT_ECANCELED && g_interrupted) status = 130;
        goto free_out;
    }
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/rank%u-of-%u.safetensors", dir, g.rank, g.tp);
    wc_st_entry *entries = calloc(g.n_out ? g.n_out : 1, sizeof *entries);
    if (entries == NULL) goto free_out;
    for (size_t i = 0; i < g.n_out; i++) {
        entries[i].name = g.out[i].name;
        entries[i].dtype = wc_dtype_from_name(g.out[i].dtype, strlen(g.out[i].dtype));
        entries[i].ndim = g.out[i].ndim;
        entries[i].shape = g.out[i].shape;
        entries[i].data = g.out[i].data;
        entries[i].bytes = g.out[i].bytes;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || wc_st_write_fd(fd, entries, g.n_out, NULL, 0, err, sizeof err) < 0 ||
        fsync(fd) != 0 || close(fd) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "weightctl: %s: %s: %s\n", what, path, fd < 0 ? strerror(errno) : err);
        if (fd >= 0) unlink(tmp);
        free(entries);
        goto free_out;
    }
    fd = -1;
    free(entries);
    if (x->json) {
        printf("{\"file\":");
        json_str(path);
        printf(",\"tensors\":%zu,\"bytes\":%" PRIu64 ",\"objects\":%" PRIu64
               ",\"local_bytes\":%" PRIu64 ",\"seconds\":%.3f}\n",
               g.n_out, st.bytes, st.objects, st.local_bytes, dt);
    } else {
        char b[32], r[32];
        human((double)st.bytes, b, sizeof b);
        human(dt > 0 ? (double)st.bytes / dt : 0, r, sizeof r);
        printf("wrote %s: %zu tensors, %s (rank %u of %u) in %.2f s, %s/s%s\n", path, g.n_out, b,
               g.rank, g.tp, dt, r, st.local_bytes == st.bytes && st.bytes ? ", zero-copy" : "");
    }
    status = 0;
free_out:
    for (size_t i = 0; i < g.n_out; i++) {
        free(g.out[i].name);
        free(g.out[i].data);
    }
    free(g.out);
    return status;
usage:
    usage(stderr);
    return 2;
}

/* -- policy / migrate / op / rm ------------------------------------------------ */

static int cmd_policy(ctl *x, int argc, char **argv)
{
    static const struct option opts[] = {
        {"preferred", required_argument, NULL, 'p'}, {"mode", required_argument, NULL, 'm'},
        {"expect", required_argument, NULL, 'e'},    {NULL, 0, NULL, 0}};
    weight_policy pol = {WEIGHT_RES_UNKNOWN, 0, WEIGHT_MODE_DEFAULT};
    uint64_t expect = 0;
    int c, rc;
    optind = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'p':
            if (parse_residency(optarg, &pol.preferred, &pol.mixed_hot_ratio) < 0) goto usage;
            break;
        case 'm':
            if (parse_mode(optarg, &pol.mode) < 0) goto usage;
            break;
        case 'e':
            if (parse_u64(optarg, &expect) < 0) goto usage;
            break;
        default: goto usage;
        }
    }
    if (optind != argc - 1) goto usage;
    weight_identity id;
    weight_metadata cur, md;
    if ((rc = parse_id(x, argv[optind], &id)) != 0) return rc;
    if ((rc = weight_get_metadata(x->ws, &id, &cur, NULL)) < 0) return weight_failed(x, "policy", rc);
    if (pol.preferred == WEIGHT_RES_UNKNOWN && pol.mode == WEIGHT_MODE_DEFAULT) {
        md = cur; /* nothing to change: show it */
    } else {
        /* The RFC's policy is whole: fill what was not given from the current one. */
        if (pol.preferred == WEIGHT_RES_UNKNOWN) pol.preferred = cur.policy.preferred;
        if (pol.mixed_hot_ratio == 0) pol.mixed_hot_ratio = cur.policy.mixed_hot_ratio;
        if (pol.mode == WEIGHT_MODE_DEFAULT) pol.mode = cur.policy.mode;
        if ((rc = weight_update_policy(x->ws, &id, &pol, expect ? expect : cur.metadata_generation,
                                       &md)) < 0)
            return weight_failed(x, "policy", rc);
    }
    if (x->json) {
        json_metadata(&md, NULL);
        putchar('\n');
    } else {
        printf("policy: preferred %s", weight_residency_name(md.policy.preferred));
        if (md.policy.preferred == WEIGHT_RES_MIXED) printf(" (hot ratio %.3f)", md.policy.mixed_hot_ratio);
        printf(", mode %s; metadata generation %" PRIu64 "\n", weight_mode_name(md.policy.mode),
               md.metadata_generation);
    }
    return 0;
usage:
    usage(stderr);
    return 2;
}

static int wait_operation(ctl *x, uint64_t opid, weight_operation *op)
{
    for (;;) {
        int rc = weight_get_operation(x->ws, opid, op);
        if (rc < 0) return rc;
        if (op->state != 1) return 0;
        struct timespec ts = {0, 200 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static int cmd_migrate(ctl *x, int argc, char **argv)
{
    static const struct option opts[] = {
        {"to", required_argument, NULL, 't'}, {"expect", required_argument, NULL, 'e'},
        {"wait", no_argument, NULL, 'w'},     {NULL, 0, NULL, 0}};
    weight_residency to = WEIGHT_RES_UNKNOWN;
    double ratio = 0;
    uint64_t expect = 0;
    int c, rc, wait = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 't':
            if (parse_residency(optarg, &to, &ratio) < 0) goto usage;
            break;
        case 'e':
            if (parse_u64(optarg, &expect) < 0) goto usage;
            break;
        case 'w': wait = 1; break;
        default: goto usage;
        }
    }
    if (to == WEIGHT_RES_UNKNOWN || optind != argc - 1) goto usage;
    weight_identity id;
    weight_operation op;
    if ((rc = parse_id(x, argv[optind], &id)) != 0) return rc;
    if ((rc = weight_migrate(x->ws, &id, to, ratio, expect, &op)) < 0)
        return weight_failed(x, "migrate", rc);
    if (wait && op.id && (rc = wait_operation(x, op.id, &op)) < 0)
        return weight_failed(x, "migrate", rc);
    return show_operation(x, &op);
usage:
    usage(stderr);
    return 2;
}

static int cmd_op(ctl *x, int argc, char **argv)
{
    static const struct option opts[] = {{"wait", no_argument, NULL, 'w'}, {NULL, 0, NULL, 0}};
    uint64_t opid = 0;
    int c, rc, wait = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c != 'w') goto usage;
        wait = 1;
    }
    if (optind != argc - 1 || parse_u64(argv[optind], &opid) < 0 || opid == 0) goto usage;
    weight_operation op;
    rc = wait ? wait_operation(x, opid, &op) : weight_get_operation(x->ws, opid, &op);
    if (rc < 0) return weight_failed(x, "op", rc);
    return show_operation(x, &op);
usage:
    usage(stderr);
    return 2;
}

static int cmd_rm(ctl *x, int argc, char **argv)
{
    static const struct option opts[] = {
        {"expect", required_argument, NULL, 'e'}, {"wait", no_argument, NULL, 'w'},
        {NULL, 0, NULL, 0}};
    uint64_t expect = 0;
    int c, rc, wait = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'e':
            if (parse_u64(optarg, &expect) < 0) goto usage;
            break;
        case 'w': wait = 1; break;
        default: goto usage;
        }
    }
    if (optind != argc - 1) goto usage;
    weight_identity id;
    weight_metadata md;
    char text[2048], what[2100];
    if ((rc = resolve_id(x, argv[optind], "rm", &id, text, sizeof text, what, sizeof what)) != 0)
        return rc;
    if ((rc = weight_remove(x->ws, &id, expect, &md)) < 0) return weight_failed(x, what, rc);
    if (wait) {
        for (int i = 0; i < 3000 && md.availability != WEIGHT_DELETED; i++) {
            struct timespec ts = {0, 100 * 1000000L};
            nanosleep(&ts, NULL);
            if ((rc = weight_get_metadata(x->ws, &id, &md, NULL)) < 0) return weight_failed(x, what, rc);
        }
    }
    if (x->json) {
        json_metadata(&md, NULL);
        putchar('\n');
    } else {
        printf("%s: %s %s\n", text, weight_availability_name(md.availability),
               weight_residency_name(md.residency));
    }
    return 0;
usage:
    usage(stderr);
    return 2;
}

int main(int argc, char **argv)
{
    ctl x = {0};
    int first = wctl_parse_global(&x, argc, argv);
    if (first == WCTL_HELP) {
        usage(stdout);
        return 0;
    }
    if (first == WCTL_USAGE) {
        usage(stderr);
        return 2;
    }
    if (first == WCTL_BAD_MASTER) return 2;
    int nargs = argc - first;
    char **args = argv + first;
    if (nargs < 1) {
        usage(stderr);
        return 2;
    }
    int status = 2;
    static const char *weight_cmds[] = {"put", "ls", "info", "exists", "size", "get",
                                        "policy", "migrate", "op", "rm", "upsert"};
    int is_weight = 0;
    for (size_t i = 0; i < sizeof weight_cmds / sizeof weight_cmds[0]; i++)
        if (strcmp(args[0], weight_cmds[i]) == 0) is_weight = 1;
    if (is_weight) {
        if (open_weights(&x) < 0) return 1;
        if (strcmp(args[0], "put") == 0) status = cmd_put(&x, nargs, args);
        else if (strcmp(args[0], "ls") == 0) status = cmd_ls(&x, nargs, args);
        else if (strcmp(args[0], "get") == 0) status = cmd_get(&x, nargs, args);
        else if (strcmp(args[0], "policy") == 0) status = cmd_policy(&x, nargs, args);
        else if (strcmp(args[0], "migrate") == 0) status = cmd_migrate(&x, nargs, args);
        else if (strcmp(args[0], "op") == 0) status = cmd_op(&x, nargs, args);
        else if (strcmp(args[0], "rm") == 0) status = cmd_rm(&x, nargs, args);
        else if (strcmp(args[0], "upsert") == 0) status = cmd_upsert(&x, nargs, args);
        else if (nargs != 2) usage(stderr);
        else if (strcmp(args[0], "info") == 0) status = cmd_info(&x, args[1]);
        else if (strcmp(args[0], "exists") == 0) status = cmd_exists(&x, args[1]);
        else if (strcmp(args[0], "size") == 0) status = cmd_size(&x, args[1]);
        weight_store_close(x.ws);
        return status;
    }
    if (strcmp(args[0], "status") == 0 && nargs == 1) {
        status = connect_master(&x) < 0 ? 1 : wctl_cmd_status(&x);
    } else if (strcmp(args[0], "gate") == 0 && nargs == 3 && strcmp(args[1], "confirm") == 0) {
        status = connect_master(&x) < 0 ? 1 : wctl_cmd_gate_confirm(&x, args[2]);
    } else if (strcmp(args[0], "kv") == 0 && nargs >= 2 && strcmp(args[1], "ls") == 0 && nargs <= 3) {
        status = connect_master(&x) < 0 ? 1 : cmd_kv_ls(&x, nargs == 3 ? args[2] : "");
    } else if (strcmp(args[0], "kv") == 0 && nargs == 4 && strcmp(args[1], "put") == 0) {
        status = connect_master(&x) < 0 ? 1 : cmd_kv_put(&x, args[2], args[3]);
    } else if (strcmp(args[0], "kv") == 0 && nargs == 4 && strcmp(args[1], "get") == 0) {
        status = connect_master(&x) < 0 ? 1 : cmd_kv_get(&x, args[2], args[3]);
    } else if (strcmp(args[0], "kv") == 0 && nargs == 3 && strcmp(args[1], "rm") == 0) {
        status = connect_master(&x) < 0 ? 1 : cmd_kv_rm(&x, args[2]);
    } else {
        usage(stderr);
    }
    kvc_close(x.c);
    return status;
}
