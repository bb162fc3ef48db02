/* weightctl_manage.c -- the commands that read and manage revisions that
 * exist: `ls` (pages of revisions), `info`, `exists`, `size`, `policy`,
 * `migrate`, `op` (an operation, optionally waited for), `rm` and `abort`
 * (of an import never committed). */
#include <getopt.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "weightctl.h"

/* -- ls / info / exists / size ------------------------------------------------ */

static void print_row(const weight_metadata *m)
{
    char text[2048], b[32];
    wctl_id_text(&m->identity, text, sizeof text);
    wctl_human((double)m->logical_bytes, b, sizeof b);
    printf("%-48s %-9s %-7s %10s  %s", text, weight_availability_name(m->availability),
           weight_residency_name(m->residency), b, weight_residency_name(m->policy.preferred));
    if (m->policy.preferred == WEIGHT_RES_MIXED) printf(":%.2f", m->policy.mixed_hot_ratio);
    printf("/%s", weight_mode_name(m->policy.mode));
    if (m->operation_id) printf("  op %" PRIu64, m->operation_id);
    putchar('\n');
}

/* ls: every revision (page by page), at most --limit N rows, or the page
 * that starts at --page-token (with --limit: N rows from it). When rows
 * were left because of the limit (or after a --page-token page), the token
 * to go on from is printed ("next page: ..." / next_page_token). The
 * header (or the JSON's start) comes with the first page's answer: a
 * refused first page prints nothing on stdout. */
int wctl_cmd_ls(ctl *x, int argc, char **argv)
{
    static const struct option opts[] = {
        {"namespace", required_argument, NULL, 'n'}, {"resource", required_argument, NULL, 'r'},
        {"limit", required_argument, NULL, 'l'},     {"page-token", required_argument, NULL, 'p'},
        {"all", no_argument, NULL, 'a'},             {NULL, 0, NULL, 0}};
    weight_list_query q = {NULL, NULL, 0, 0};
    const char *page = NULL;
    uint64_t limit = 0, shown = 0;
    int c, rc;
    optind = 0;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case 'n': q.namespace_id = optarg; break;
        case 'r': q.resource_id = optarg; break;
        case 'l':
            if (wctl_parse_u64(optarg, &limit) < 0 || limit == 0 || limit > UINT32_MAX)
                return wctl_bad_value("ls", "--limit", optarg, "a positive number of rows");
            break;
        case 'p': page = optarg; break;
        case 'a': q.include_deleted = WEIGHT_LIST_DELETED | WEIGHT_LIST_IMPORTING; break;
        default: return wctl_opt_error("ls", c, argv);
        }
    }
    if (optind != argc) return wctl_bad_usage("ls", "takes no positional arguments");
    if (q.resource_id && !q.namespace_id) return wctl_bad_usage("ls", "--resource needs --namespace");
    if (wctl_open_weights(x) < 0) return 1;
    char token[1024], next[1024];
    int opened = 0; /* the header is printed with the first page's answer, not before */
    snprintf(token, sizeof token, "%s", page ? page : "");
    for (;;) {
        weight_metadata *list = NULL;
        size_t n = 0;
        q.limit = limit ? (uint32_t)(limit - shown) : 0;
        if ((rc = weight_list(x->ws, &q, token, &list, &n, next, sizeof next)) < 0) {
            if (x->json && opened) printf("]}\n");
            return wctl_failed(x, "ls", rc);
        }
        if (!opened && x->json)
            printf("{\"revisions\":[");
        else if (!opened)
            printf("%-48s %-9s %-7s %10s  %s\n", "REVISION", "STATE", "RES", "SIZE", "POLICY");
        opened = 1;
        for (size_t i = 0; i < n && (!limit || shown < limit); i++, shown++) {
            if (x->json) {
                if (shown) putchar(',');
                wctl_json_metadata(&list[i], NULL);
            } else {
                print_row(&list[i]);
            }
        }
        weight_list_free(list);
        snprintf(token, sizeof token, "%s", next);
        if (token[0] == '\0' || (limit && shown >= limit) || (page != NULL && !limit)) break;
    }
    if (x->json) {
        printf("],\"next_page_token\":");
        wctl_json_str(token);
        printf("}\n");
    } else if (token[0]) {
        printf("next page: --page-token %s\n", token);
    }
    return 0;
}

int wctl_cmd_info(ctl *x, const char *arg)
{
    weight_identity id;
    weight_metadata m;
    weight_operation op;
    weight_metadata_more more = {.struct_size = sizeof(more)};
    char text[2048], b[32], what[2100];
    if (wctl_open_weights(x) < 0) return 1;
    int rc = wctl_resolve_id(x, arg, "info", &id, text, sizeof text, what, sizeof what);
    if (rc) return rc;
    if ((rc = weight_get_metadata_more(x->ws, &id, &m, &op, &more)) < 0) return wctl_failed(x, what, rc);
    if (x->json) {
        wctl_json_metadata_more(&m, &op, &more);
        putchar('\n');
        return 0;
    }
    wctl_human((double)m.logical_bytes, b, sizeof b);
    printf("revision      %s\n", text);
    printf("tenant        %s\n", m.identity.tenant_id);
    printf("availability  %s\n", weight_availability_name(m.availability));
    printf("residency     %s (observed hot ratio %.3f)\n", weight_residency_name(m.residency),
           m.observed_hot_ratio);
    if (more.degraded_from != WEIGHT_RES_UNKNOWN) {
        printf("goes back to  %s", weight_residency_name(more.degraded_from));
        if (more.degraded_from == WEIGHT_RES_MIXED)
            printf(" (hot ratio %.3f)", more.degraded_from_hot_ratio);
        printf(" once its manifest and members are readable\n");
    }
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

/* exists ID: as info, without @GENERATION the newest live generation (none:
 * "no", exit 1, as for a generation that is not READY; one retired by a
 * replacement meanwhile is followed to the newer one). */
int wctl_cmd_exists(ctl *x, const char *arg)
{
    weight_identity id;
    int exists = 0, has_gen = 0, rc;
    if ((rc = wctl_parse_id_text(x, arg, &id, &has_gen)) != 0) return rc;
    if (wctl_open_weights(x) < 0) return 1;
    int tries = 0;
    rc = has_gen ? 0 : wctl_newest_generation(x, &id);
    if (rc == 0) {
        /* Without @GEN: one retired by a replacement meanwhile is followed. */
        while ((rc = weight_is_exist(x->ws, &id, &exists)) == 0 && !exists && !has_gen &&
               wctl_follow_newest(x, &id, WEIGHT_ENOT_READY, &tries))
            ;
    } else if (rc == WEIGHT_ENOT_FOUND) {
        rc = 0; /* no live generation: it does not exist */
    }
    if (rc < 0) return wctl_failed(x, "exists", rc);
    if (x->json) printf("{\"exists\":%s}\n", exists ? "true" : "false");
    else printf("%s\n", exists ? "yes" : "no");
    return exists ? 0 : 1;
}

int wctl_cmd_size(ctl *x, const char *arg)
{
    weight_identity id;
    uint64_t bytes = 0;
    if (wctl_open_weights(x) < 0) return 1;
    int rc = wctl_parse_id(x, arg, &id);
    if (rc) return rc;
    if ((rc = weight_get_size(x->ws, &id, &bytes)) < 0) return wctl_failed(x, "size", rc);
    if (x->json) printf("{\"logical_bytes\":%" PRIu64 "}\n", bytes);
    else printf("%" PRIu64 "\n", bytes);
    return 0;
}

/* -- policy / migrate / op / rm ------------------------------------------------ */

int wctl_cmd_policy(ctl *x, int argc, char **argv)
{
    static const struct option opts[] = {
        {"preferred", required_argument, NULL, 'p'}, {"mode", required_argument, NULL, 'm'},
        {"expect", required_argument, NULL, 'e'},    {NULL, 0, NULL, 0}};
    weight_policy pol = {WEIGHT_RES_UNKNOWN, 0, WEIGHT_MODE_DEFAULT};
    uint64_t expect = 0;
    int c, rc;
    optind = 0;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case 'p':
            if (wctl_parse_residency(optarg, &pol.preferred, &pol.mixed_hot_ratio) < 0)
                return wctl_bad_value("policy", "--preferred", optarg, WCTL_RESIDENCY_FORMS);
            break;
        case 'm':
            if (wctl_parse_mode(optarg, &pol.mode) < 0)
                return wctl_bad_value("policy", "--mode", optarg, "pinned, manual or auto");
            break;
        case 'e':
            if (wctl_parse_u64(optarg, &expect) < 0)
                return wctl_bad_value("policy", "--expect", optarg, "a metadata generation");
            break;
        default: return wctl_opt_error("policy", c, argv);
        }
    }
    if (optind != argc - 1) return wctl_bad_usage("policy", "takes one ID");
    weight_identity id;
    weight_metadata cur, md;
    if (wctl_open_weights(x) < 0) return 1;
    if ((rc = wctl_parse_id(x, argv[optind], &id)) != 0) return rc;
    if ((rc = weight_get_metadata(x->ws, &id, &cur, NULL)) < 0) return wctl_failed(x, "policy", rc);
    if (pol.preferred == WEIGHT_RES_UNKNOWN && pol.mode == WEIGHT_MODE_DEFAULT) {
        md = cur; /* nothing to change: show it */
    } else {
        /* The RFC's policy is whole: fill what was not given from the current one. */
        if (pol.preferred == WEIGHT_RES_UNKNOWN) pol.preferred = cur.policy.preferred;
        if (pol.mixed_hot_ratio == 0) pol.mixed_hot_ratio = cur.policy.mixed_hot_ratio;
        if (pol.mode == WEIGHT_MODE_DEFAULT) pol.mode = cur.policy.mode;
        if (expect == 0) expect = cur.metadata_generation;
        if ((rc = wctl_fence(x, "policy", &id, &expect)) != 0) return rc;
        if ((rc = weight_update_policy(x->ws, &id, &pol, expect, &md)) < 0)
            return wctl_failed(x, "policy", rc);
    }
    if (x->json) {
        wctl_json_metadata(&md, NULL);
        putchar('\n');
    } else {
        printf("policy: preferred %s", weight_residency_name(md.policy.preferred));
        if (md.policy.preferred == WEIGHT_RES_MIXED) printf(" (hot ratio %.3f)", md.policy.mixed_hot_ratio);
        printf(", mode %s; metadata generation %" PRIu64 "\n", weight_mode_name(md.policy.mode),
               md.metadata_generation);
    }
    return 0;
}

/* op's progress as "3/10 members, 1.0 MiB/4.0 MiB, 2 attempt(s)[; last
 * error: ...]" into out[cap] (sizes as --bytes says). */
static void op_progress_text(const ctl *x, const weight_operation *op, char *out, size_t cap)
{
    char d[48], t[48];
    wctl_size_text((double)op->bytes_done, x->bytes, d, sizeof d);
    wctl_size_text((double)op->bytes_total, x->bytes, t, sizeof t);
    snprintf(out, cap, "%" PRIu64 "/%" PRIu64 " members, %s/%s, %u attempt(s)%s%s",
             op->members_done, op->members_total, d, t, op->attempts,
             op->error[0] ? "; last error: " : "", op->error);
}

/* migrate --wait / op --wait: poll operation opid until it ends (*op its
 * last state). With --progress plain (or auto on a terminal, without
 * --json) a line on stderr whenever its members or bytes done, attempt
 * count or last error change. timeout_s 0: no bound; else after timeout_s
 * a TIMEOUT line naming the operation still running, its progress and last
 * error (the operation goes on; waiting changed nothing). 0 when it ended,
 * 1 with the cause printed. */
static int wait_operation(ctl *x, const char *what, uint64_t opid, uint64_t timeout_s,
                          weight_operation *op)
{
    wctl_progress pr;
    weight_operation seen;
    char text[600];
    int have = 0;
    double deadline = wctl_now() + (double)timeout_s;
    wctl_progress_init(x, &pr, what);
    for (;;) {
        int rc = weight_get_operation(x->ws, opid, op);
        if (rc < 0) return wctl_failed(x, what, rc);
        if (pr.on && (!have || op->members_done != seen.members_done ||
                      op->bytes_done != seen.bytes_done || op->attempts != seen.attempts ||
                      strcmp(op->error, seen.error) != 0 || op->state != seen.state)) {
            op_progress_text(x, op, text, sizeof text);
            fprintf(stderr, "weightctl: %s: operation %" PRIu64 " %s %s: %s\n", what, opid,
                    weight_operation_kind_name(op->kind), weight_operation_state_name(op->state),
                    text);
            seen = *op;
            have = 1;
        }
        if (op->state != 1) return 0;
        if (timeout_s && wctl_now() >= deadline) {
            op_progress_text(x, op, text, sizeof text);
            fprintf(stderr, "weightctl: %s: TIMEOUT: after %" PRIu64 " s (--timeout) operation %"
                    PRIu64 " (%s) is still RUNNING: %s; it goes on (weightctl op %" PRIu64
                    " shows it)\n", what, timeout_s, opid, weight_operation_kind_name(op->kind),
                    text, opid);
            return 1;
        }
        struct timespec ts = {0, 200 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* --timeout S of migrate / op / rm: 1..604800 seconds. 0, or the exit code
 * of the refusal printed. */
static int parse_timeout(const char *cmd, const char *arg, uint64_t *out)
{
    if (wctl_parse_u64(arg, out) < 0 || *out == 0 || *out > 86400 * 7)
        return wctl_bad_value(cmd, "--timeout", arg, "a number of seconds from 1 to 604800");
    return 0;
}

int wctl_cmd_migrate(ctl *x, int argc, char **argv)
{
    static const struct option opts[] = {
        {"to", required_argument, NULL, 't'},      {"expect", required_argument, NULL, 'e'},
        {"wait", no_argument, NULL, 'w'},          {"timeout", required_argument, NULL, 'T'},
        {NULL, 0, NULL, 0}};
    weight_residency to = WEIGHT_RES_UNKNOWN;
    double ratio = 0;
    uint64_t expect = 0, timeout_s = 0;
    int c, rc, wait = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case 't':
            if (wctl_parse_residency(optarg, &to, &ratio) < 0)
                return wctl_bad_value("migrate", "--to", optarg, WCTL_RESIDENCY_FORMS);
            break;
        case 'e':
            if (wctl_parse_u64(optarg, &expect) < 0)
                return wctl_bad_value("migrate", "--expect", optarg, "a metadata generation");
            break;
        case 'w': wait = 1; break;
        case 'T':
            if ((rc = parse_timeout("migrate", optarg, &timeout_s)) != 0) return rc;
            break;
        default: return wctl_opt_error("migrate", c, argv);
        }
    }
    if (to == WEIGHT_RES_UNKNOWN) return wctl_bad_usage("migrate", "--to is required");
    if (optind != argc - 1) return wctl_bad_usage("migrate", "takes one ID");
    if (timeout_s && !wait) return wctl_bad_usage("migrate", "--timeout bounds --wait: give both");
    weight_identity id;
    weight_operation op;
    char text[2048], what[2100];
    if (wctl_open_weights(x) < 0) return 1;
    if ((rc = wctl_resolve_id(x, argv[optind], "migrate", &id, text, sizeof text, what,
                              sizeof what)) != 0)
        return rc;
    if ((rc = wctl_fence(x, "migrate", &id, &expect)) != 0) return rc;
    if ((rc = weight_migrate(x->ws, &id, to, ratio, expect, &op)) < 0)
        return wctl_failed(x, "migrate", rc);
    if (wait && op.id && (rc = wait_operation(x, what, op.id, timeout_s, &op)) != 0) return rc;
    return wctl_show_operation(x, &op);
}

int wctl_cmd_op(ctl *x, int argc, char **argv)
{
    static const struct option opts[] = {{"wait", no_argument, NULL, 'w'},
                                         {"timeout", required_argument, NULL, 'T'},
                                         {NULL, 0, NULL, 0}};
    uint64_t opid = 0, timeout_s = 0;
    int c, rc, wait = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == 'w') wait = 1;
        else if (c != 'T') return wctl_opt_error("op", c, argv);
        else if ((rc = parse_timeout("op", optarg, &timeout_s)) != 0) return rc;
    }
    if (optind != argc - 1) return wctl_bad_usage("op", "takes one OPERATION_ID");
    if (wctl_parse_u64(argv[optind], &opid) < 0 || opid == 0)
        return wctl_bad_value("op", "OPERATION_ID", argv[optind], "a positive integer");
    if (timeout_s && !wait) return wctl_bad_usage("op", "--timeout bounds --wait: give both");
    weight_operation op;
    char what[64];
    snprintf(what, sizeof what, "op %" PRIu64, opid);
    if (wctl_open_weights(x) < 0) return 1;
    if (wait) {
        if ((rc = wait_operation(x, what, opid, timeout_s, &op)) != 0) return rc;
    } else if ((rc = weight_get_operation(x->ws, opid, &op)) < 0) {
        return wctl_failed(x, "op", rc);
    }
    return wctl_show_operation(x, &op);
}

/* The metadata's leases and operation as "1 active lease(s) and operation
 * 5 (MIGRATE)" into out[cap]; "" when there are none. */
static void holders_text(ctl *x, const weight_metadata *md, char *out, size_t cap)
{
    weight_operation op;
    size_t n = 0;
    out[0] = '\0';
    if (md->active_leases)
        n += (size_t)snprintf(out, cap, "%u active lease(s)", md->active_leases);
    if (md->operation_id && n < cap) {
        const char *kind = "?";
        if (weight_get_operation(x->ws, md->operation_id, &op) == 0)
            kind = weight_operation_kind_name(op.kind);
        snprintf(out + n, cap - n, "%soperation %" PRIu64 " (%s)", n ? " and " : "",
                 md->operation_id, kind);
    }
}

/* rm --wait: ask weight_remove until it is not BUSY (the revision's leases
 * and operation have ended), then follow the deletion to DELETED; at most
 * until the deadline, then a TIMEOUT line saying what is still there.
 * follow (the user gave no --expect): each retry is fenced on the generation
 * read after the wait, and a STALE_GENERATION answer (the operation waited
 * for ended, or another change came, between that read and the call) reads
 * it again and retries; with an --expect, STALE_GENERATION is the answer.
 * 0, or the exit status with the cause printed. *md is the last metadata. */
static int remove_and_wait(ctl *x, const weight_identity *id, uint64_t expect, int follow,
                           uint64_t timeout_s, const char *what, weight_metadata *md)
{
    double deadline = wctl_now() + (double)timeout_s;
    char holders[256];
    int rc, said = 0;
    for (;;) {
        rc = weight_remove(x->ws, id, expect, md);
        if (rc == WEIGHT_ESTALE_GENERATION && follow) {
            uint64_t was = expect;
            char stale[512];
            snprintf(stale, sizeof stale, "%s", weight_store_last_error(x->ws));
            if ((rc = weight_get_metadata(x->ws, id, md, NULL)) < 0) return wctl_failed(x, what, rc);
            if (md->metadata_generation == was) { /* not moved: no retry would differ */
                fprintf(stderr, "weightctl: %s: STALE_GENERATION: %s\n", what, stale);
                return 1;
            }
            expect = md->metadata_generation;
            if (wctl_now() >= deadline) {
                fprintf(stderr, "weightctl: %s: TIMEOUT: after %" PRIu64 " s (--timeout) the "
                        "metadata generation still moves (%" PRIu64 " -> %" PRIu64 "); nothing "
                        "was removed\n", what, timeout_s, was, expect);
                return 1;
            }
            if (!x->json)
                fprintf(stderr, "weightctl: %s: metadata generation %" PRIu64 " moved to %" PRIu64
                        "; removing at %" PRIu64 "\n", what, was, expect, expect);
            continue;
        }
        if (rc != WEIGHT_EBUSY) break;
        if ((rc = weight_get_metadata(x->ws, id, md, NULL)) < 0) return wctl_failed(x, what, rc);
        if (follow) expect = md->metadata_generation; /* an operation's end moves it */
        holders_text(x, md, holders, sizeof holders);
        if (wctl_now() >= deadline) {
            fprintf(stderr, "weightctl: %s: TIMEOUT: after %" PRIu64 " s (--timeout) %s; "
                    "nothing was removed\n", what, timeout_s, holders[0] ? holders : "still BUSY");
            return 1;
        }
        if (!said && !x->json) {
            fprintf(stderr, "weightctl: %s: waiting for %s to end\n", what,
                    holders[0] ? holders : "the revision to be free");
            said = 1;
        }
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (rc < 0) return wctl_failed(x, what, rc);
    while (md->availability != WEIGHT_DELETED) {
        if (wctl_now() >= deadline) {
            fprintf(stderr, "weightctl: %s: TIMEOUT: after %" PRIu64 " s (--timeout) the deletion "
                    "goes on (%s); weightctl info shows it\n", what, timeout_s,
                    weight_availability_name(md->availability));
            return 1;
        }
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
        if ((rc = weight_get_metadata(x->ws, id, md, NULL)) < 0) return wctl_failed(x, what, rc);
    }
    return 0;
}

int wctl_cmd_rm(ctl *x, int argc, char **argv)
{
    static const struct option opts[] = {
        {"expect", required_argument, NULL, 'e'}, {"wait", no_argument, NULL, 'w'},
        {"timeout", required_argument, NULL, 't'}, {NULL, 0, NULL, 0}};
    uint64_t expect = 0, timeout_s = 300;
    int c, rc, wait = 0, has_timeout = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case 'e':
            if (wctl_parse_u64(optarg, &expect) < 0)
                return wctl_bad_value("rm", "--expect", optarg, "a metadata generation");
            break;
        case 'w': wait = 1; break;
        case 't':
            if ((rc = parse_timeout("rm", optarg, &timeout_s)) != 0) return rc;
            has_timeout = 1;
            break;
        default: return wctl_opt_error("rm", c, argv);
        }
    }
    if (optind != argc - 1) return wctl_bad_usage("rm", "takes one ID");
    if (has_timeout && !wait) return wctl_bad_usage("rm", "--timeout bounds --wait: give both");
    weight_identity id;
    weight_metadata md;
    char text[2048], what[2100];
    if (wctl_open_weights(x) < 0) return 1;
    if ((rc = wctl_resolve_id(x, argv[optind], "rm", &id, text, sizeof text, what, sizeof what)) != 0)
        return rc;
    int follow = expect == 0; /* no --expect: the generation read now, and after each wait */
    if ((rc = wctl_fence(x, "rm", &id, &expect)) != 0) return rc;
    if (wait) {
        if ((rc = remove_and_wait(x, &id, expect, follow, timeout_s, what, &md)) != 0) return rc;
    } else if ((rc = weight_remove(x->ws, &id, expect, &md)) < 0) {
        wctl_failed(x, what, rc);
        if (rc == WEIGHT_ECONFLICT && weight_get_metadata(x->ws, &id, &md, NULL) == 0 &&
            md.availability == WEIGHT_IMPORTING)
            fprintf(stderr, "weightctl: %s: `weightctl abort %s` aborts that import and frees "
                    "what it wrote\n", what, text);
        return 1;
    }
    if (x->json) {
        wctl_json_metadata(&md, NULL);
        putchar('\n');
    } else {
        printf("%s: %s %s\n", text, weight_availability_name(md.availability),
               weight_residency_name(md.residency));
    }
    return 0;
}

/* abort ID [--expect GEN]: abort an import never committed (IMPORTING: a put
 * whose writer died) so the master frees what it wrote; without @GEN the
 * newest IMPORTING generation of the revision. The master refuses any other
 * state (CONFLICT, nothing changed) and answers a DELETING one as it is. */
int wctl_cmd_abort(ctl *x, int argc, char **argv)
{
    static const struct option opts[] = {{"expect", required_argument, NULL, 'e'},
                                         {NULL, 0, NULL, 0}};
    uint64_t expect = 0;
    int c, rc;
    optind = 0;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c != 'e') return wctl_opt_error("abort", c, argv);
        if (wctl_parse_u64(optarg, &expect) < 0)
            return wctl_bad_value("abort", "--expect", optarg, "a metadata generation");
    }
    if (optind != argc - 1) return wctl_bad_usage("abort", "takes one ID");
    weight_identity id;
    weight_metadata md;
    char text[2048], what[2100];
    if (wctl_open_weights(x) < 0) return 1;
    if ((rc = wctl_parse_importing_id(x, argv[optind], &id)) != 0) return rc;
    wctl_id_text(&id, text, sizeof text);
    snprintf(what, sizeof what, "abort %s", text);
    if ((rc = wctl_fence(x, "abort", &id, &expect)) != 0) return rc;
    if ((rc = weight_abort_import(x->ws, &id, expect, &md)) < 0) return wctl_failed(x, what, rc);
    if (x->json) {
        wctl_json_metadata(&md, NULL);
        putchar('\n');
    } else if (md.availability == 0) {
        printf("%s: import aborted; it had written nothing and is forgotten\n", text);
    } else {
        printf("%s: import aborted; %s, its objects are being removed (then it is forgotten)\n",
               text, weight_availability_name(md.availability));
    }
    return 0;
}
