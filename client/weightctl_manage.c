/* weightctl_manage.c -- the commands that read and manage revisions that
 * exist: `ls` (pages of revisions), `info`, `exists`, `size`, `policy`,
 * `migrate`, `op` (an operation, optionally waited for) and `rm`. */
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

int wctl_cmd_ls(ctl *x, int argc, char **argv)
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
            if (wctl_parse_u64(optarg, &limit) < 0 || limit > UINT32_MAX) goto usage;
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
            return wctl_failed(x, "ls", rc);
        }
        for (size_t i = 0; i < n; i++) {
            if (x->json) {
                if (!first) putchar(',');
                wctl_json_metadata(&list[i], NULL);
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
        wctl_json_str(page ? token : "");
        printf("}\n");
    } else if (page != NULL && token[0]) {
        printf("next page: --page-token %s\n", token);
    }
    return 0;
usage:
    wctl_usage(stderr);
    return 2;
}

int wctl_cmd_info(ctl *x, const char *arg)
{
    weight_identity id;
    weight_metadata m;
    weight_operation op;
    char text[2048], b[32], what[2100];
    int rc = wctl_resolve_id(x, arg, "info", &id, text, sizeof text, what, sizeof what);
    if (rc) return rc;
    if ((rc = weight_get_metadata(x->ws, &id, &m, &op)) < 0) return wctl_failed(x, what, rc);
    if (x->json) {
        wctl_json_metadata(&m, &op);
        putchar('\n');
        return 0;
    }
    wctl_human((double)m.logical_bytes, b, sizeof b);
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

int wctl_cmd_exists(ctl *x, const char *arg)
{
    weight_identity id;
    int exists = 0, has_gen = 0;
    if (weight_identity_parse(arg, x->tenant, &id, &has_gen) < 0 || !has_gen) {
        fprintf(stderr, "weightctl: '%s' is not NAMESPACE/RESOURCE/REVISION@GENERATION\n", arg);
        return 2;
    }
    int rc = weight_is_exist(x->ws, &id, &exists);
    if (rc < 0) return wctl_failed(x, "exists", rc);
    if (x->json) printf("{\"exists\":%s}\n", exists ? "true" : "false");
    else printf("%s\n", exists ? "yes" : "no");
    return exists ? 0 : 1;
}

int wctl_cmd_size(ctl *x, const char *arg)
{
    weight_identity id;
    uint64_t bytes = 0;
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
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'p':
            if (wctl_parse_residency(optarg, &pol.preferred, &pol.mixed_hot_ratio) < 0) goto usage;
            break;
        case 'm':
            if (wctl_parse_mode(optarg, &pol.mode) < 0) goto usage;
            break;
        case 'e':
            if (wctl_parse_u64(optarg, &expect) < 0) goto usage;
            break;
        default: goto usage;
        }
    }
    if (optind != argc - 1) goto usage;
    weight_identity id;
    weight_metadata cur, md;
    if ((rc = wctl_parse_id(x, argv[optind], &id)) != 0) return rc;
    if ((rc = weight_get_metadata(x->ws, &id, &cur, NULL)) < 0) return wctl_failed(x, "policy", rc);
    if (pol.preferred == WEIGHT_RES_UNKNOWN && pol.mode == WEIGHT_MODE_DEFAULT) {
        md = cur; /* nothing to change: show it */
    } else {
        /* The RFC's policy is whole: fill what was not given from the current one. */
        if (pol.preferred == WEIGHT_RES_UNKNOWN) pol.preferred = cur.policy.preferred;
        if (pol.mixed_hot_ratio == 0) pol.mixed_hot_ratio = cur.policy.mixed_hot_ratio;
        if (pol.mode == WEIGHT_MODE_DEFAULT) pol.mode = cur.policy.mode;
        if ((rc = weight_update_policy(x->ws, &id, &pol, expect ? expect : cur.metadata_generation,
                                       &md)) < 0)
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
usage:
    wctl_usage(stderr);
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

int wctl_cmd_migrate(ctl *x, int argc, char **argv)
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
            if (wctl_parse_residency(optarg, &to, &ratio) < 0) goto usage;
            break;
        case 'e':
            if (wctl_parse_u64(optarg, &expect) < 0) goto usage;
            break;
        case 'w': wait = 1; break;
        default: goto usage;
        }
    }
    if (to == WEIGHT_RES_UNKNOWN || optind != argc - 1) goto usage;
    weight_identity id;
    weight_operation op;
    if ((rc = wctl_parse_id(x, argv[optind], &id)) != 0) return rc;
    if ((rc = weight_migrate(x->ws, &id, to, ratio, expect, &op)) < 0)
        return wctl_failed(x, "migrate", rc);
    if (wait && op.id && (rc = wait_operation(x, op.id, &op)) < 0)
        return wctl_failed(x, "migrate", rc);
    return wctl_show_operation(x, &op);
usage:
    wctl_usage(stderr);
    return 2;
}

int wctl_cmd_op(ctl *x, int argc, char **argv)
{
    static const struct option opts[] = {{"wait", no_argument, NULL, 'w'}, {NULL, 0, NULL, 0}};
    uint64_t opid = 0;
    int c, rc, wait = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c != 'w') goto usage;
        wait = 1;
    }
    if (optind != argc - 1 || wctl_parse_u64(argv[optind], &opid) < 0 || opid == 0) goto usage;
    weight_operation op;
    rc = wait ? wait_operation(x, opid, &op) : weight_get_operation(x->ws, opid, &op);
    if (rc < 0) return wctl_failed(x, "op", rc);
    return wctl_show_operation(x, &op);
usage:
    wctl_usage(stderr);
    return 2;
}

int wctl_cmd_rm(ctl *x, int argc, char **argv)
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
            if (wctl_parse_u64(optarg, &expect) < 0) goto usage;
            break;
        case 'w': wait = 1; break;
        default: goto usage;
        }
    }
    if (optind != argc - 1) goto usage;
    weight_identity id;
    weight_metadata md;
    char text[2048], what[2100];
    if ((rc = wctl_resolve_id(x, argv[optind], "rm", &id, text, sizeof text, what, sizeof what)) != 0)
        return rc;
    if ((rc = weight_remove(x->ws, &id, expect, &md)) < 0) return wctl_failed(x, what, rc);
    if (wait) {
        for (int i = 0; i < 3000 && md.availability != WEIGHT_DELETED; i++) {
            struct timespec ts = {0, 100 * 1000000L};
            nanosleep(&ts, NULL);
            if ((rc = weight_get_metadata(x->ws, &id, &md, NULL)) < 0) return wctl_failed(x, what, rc);
        }
    }
    if (x->json) {
        wctl_json_metadata(&md, NULL);
        putchar('\n');
    } else {
        printf("%s: %s %s\n", text, weight_availability_name(md.availability),
               weight_residency_name(md.residency));
    }
    return 0;
usage:
    wctl_usage(stderr);
    return 2;
}
