/* weightctl_master.c -- see weightctl_master.h. Moved out of
 * main_weightctl.c; the commands that talk to libweightclient stay there.
 * --master and $WEIGHTCTL_MASTER take one master or the list of an HA
 * cluster's masters, checked before any command runs; status asks whichever
 * master answers first (a standby answers status too; given a list, the
 * leader it names is asked instead, since nodes register with the leader
 * alone) and, of an HA cluster, lists every master after its own block;
 * it shows the OpLog's state too (of the master whose block it prints),
 * and exits 1 when the OpLog failed (the
 * master is read-only until restarted: a script watching status must see
 * it, as /health's 503 says it) or, of an HA master, cannot reach etcd
 * (state "unreachable": no append can be made durable, and the masters'
 * rows are an old picture, none ready). A leader that a standby names and
 * that does not answer status is said so, in its row and the nodes line. --tls-ca, --tls-cert,
 * --tls-key and --tls-server-name are kept here and resolved against the
 * environment by weightctl_tls.c before any command runs. */
#include "weightctl_master.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master_list.h"
#include "weightctl.h"
#include "wc_token.h"

/* The value of global option opt at argv[*i]: "--opt=V" or "--opt V"
 * (then *i moves past V). NULL with the error printed when it is missing. */
static const char *global_value(const char *opt, int argc, char **argv, int *i)
{
    const char *a = argv[*i], *eq = strchr(a, '=');
    if (eq != NULL) return eq + 1;
    if (*i + 1 >= argc) {
        fprintf(stderr, "weightctl: %s needs a value\n", opt);
        return NULL;
    }
    return argv[++*i];
}

/* 1 when a (before any '=') is the long option name or its short form. */
static int is_opt(const char *a, const char *name, const char *short_form)
{
    size_t n = strlen(name);
    if (short_form && strcmp(a, short_form) == 0) return 1;
    return strncmp(a, name, n) == 0 && (a[n] == '\0' || a[n] == '=');
}

int wctl_parse_global(ctl *x, int argc, char **argv)
{
    static char *rest[1024];
    int n = 0, dashdash = 0, have_cmd = 0;
    x->master = getenv("WEIGHTCTL_MASTER");
    if (x->master == NULL || x->master[0] == '\0') x->master = WEIGHTCTL_DEFAULT_MASTER;
    x->tenant = getenv("WEIGHTCTL_TENANT");
    x->progress = WCTL_PROGRESS_AUTO;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (n == (int)(sizeof rest / sizeof rest[0]) - 1) {
            fprintf(stderr, "weightctl: more than %zu arguments\n", sizeof rest / sizeof rest[0] - 1);
            return WCTL_USAGE;
        }
        if (dashdash || a[0] != '-' || strcmp(a, "-") == 0) {
            rest[n++] = argv[i];
            have_cmd = 1;
        } else if (strcmp(a, "--") == 0) {
            dashdash = 1;
            if (have_cmd) rest[n++] = argv[i]; /* the command's own "--" */
        } else if (is_opt(a, "--master", "-m")) {
            if ((v = global_value("--master", argc, argv, &i)) == NULL) return WCTL_USAGE;
            x->master = v;
        } else if (is_opt(a, "--tls-ca", NULL)) {
            if ((x->tls_ca_flag = global_value("--tls-ca", argc, argv, &i)) == NULL)
                return WCTL_USAGE;
        } else if (is_opt(a, "--tls-cert", NULL)) {
            if ((x->tls_cert_flag = global_value("--tls-cert", argc, argv, &i)) == NULL)
                return WCTL_USAGE;
        } else if (is_opt(a, "--tls-key", NULL)) {
            if ((x->tls_key_flag = global_value("--tls-key", argc, argv, &i)) == NULL)
                return WCTL_USAGE;
        } else if (is_opt(a, "--tls-server-name", NULL)) {
            if ((x->tls_server_name_flag = global_value("--tls-server-name", argc, argv, &i)) ==
                NULL)
                return WCTL_USAGE;
        } else if (is_opt(a, "--tenant", "-T")) {
            if ((v = global_value("--tenant", argc, argv, &i)) == NULL) return WCTL_USAGE;
            x->tenant = v;
        } else if (is_opt(a, "--token-file", NULL)) {
            /* the token every connection presents: through WEIGHT_TOKEN, which
             * libweightclient and the object client both read */
            static char token[WC_TOKEN_MAX + 1];
            char terr[600];
            if ((v = global_value("--token-file", argc, argv, &i)) == NULL) return WCTL_USAGE;
            if (wc_token_read_file(v, token, sizeof(token), terr, sizeof(terr)) < 0) {
                fprintf(stderr, "weightctl: --token-file: %s\n", terr);
                return WCTL_USAGE;
            }
            if (setenv("WEIGHT_TOKEN", token, 1) != 0) {
                fprintf(stderr, "weightctl: --token-file: out of memory\n");
                return WCTL_USAGE;
            }
        } else if (strcmp(a, "--json") == 0 || strcmp(a, "-j") == 0) {
            x->json = 1;
        } else if (strcmp(a, "--bytes") == 0) {
            x->bytes = 1;
        } else if (is_opt(a, "--progress", NULL)) {
            if ((v = global_value("--progress", argc, argv, &i)) == NULL) return WCTL_USAGE;
            if (strcmp(v, "auto") == 0) x->progress = WCTL_PROGRESS_AUTO;
            else if (strcmp(v, "plain") == 0) x->progress = WCTL_PROGRESS_PLAIN;
            else if (strcmp(v, "none") == 0) x->progress = WCTL_PROGRESS_NONE;
            else {
                fprintf(stderr, "weightctl: --progress: '%s' is not auto, plain or none\n", v);
                return WCTL_USAGE;
            }
        } else if (strcmp(a, "--version") == 0) {
            return WCTL_VERSION;
        } else if (!have_cmd && (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)) {
            return WCTL_HELP;
        } else if (!have_cmd) {
            fprintf(stderr, "weightctl: unknown option %s (weightctl --help lists them)\n", a);
            return WCTL_USAGE;
        } else {
            rest[n++] = argv[i]; /* the command's */
        }
    }
    rest[n] = NULL;
    x->argc = n;
    x->argv = rest;
    char err[512];
    master_list ml;
    if (master_list_parse(x->master, &ml, err, sizeof(err)) < 0) {
        fprintf(stderr, "weightctl: --master / $WEIGHTCTL_MASTER: %s\n", err);
        return WCTL_USAGE;
    }
    return 0;
}

int wctl_connect_master(ctl *x)
{
    char err[512];
    rpcc_options opt = wctl_rpc_options(x, 10000);
    int rc = kvc_connect_opts(x->master, &opt, x->tls_ctx, &x->c, err, sizeof(err));
    if (rc < 0) {
        wctl_say_unconnected(x, rc == SMP_EAUTH, NULL, err);
        return -1;
    }
    return 0;
}

void wctl_json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') printf("\\%c", ch);
        else if (ch < 0x20) printf("\\u%04x", ch);
        else putchar(ch);
    }
    putchar('"');
}

/* Whether endpoints a and b name the same master ("unix:/p" and "/p" alike). */
static int same_endpoint(const char *a, const char *b)
{
    const char *ua = master_list_unix_path(a), *ub = master_list_unix_path(b);
    return ua != NULL && ub != NULL ? strcmp(ua, ub) == 0 : strcmp(a, b) == 0;
}

/* Mark in out[i] (1) each endpoint of ml that none of st's masters
 * registered: a master that is down, or was paused past its lease, is no
 * longer in the cluster's list, and an endpoint that is no master of it
 * never was. How many were marked (0 for a list of one, or when st does
 * not show every master). */
static size_t unregistered(const master_list *ml, const kvc_status *st, int *out)
{
    size_t k = 0;
    for (size_t i = 0; i < ml->n; i++) {
        out[i] = ml->n >= 2 && st->n_masters > 0 && st->n_masters == st->n_masters_total;
        for (size_t j = 0; out[i] && j < st->n_masters; j++)
            if (same_endpoint(ml->ep[i], st->masters[j].endpoint)) out[i] = 0;
        k += (size_t)out[i];
    }
    return k;
}

/* The masters of an HA cluster as JSON members (after the current block's);
 * "unregistered" lists the endpoints of ml no master registered. */
static void status_ha_json(const kvc_status *st, const master_list *ml)
{
    int gone[ML_MAX_ENDPOINTS];
    size_t n_gone = unregistered(ml, st, gone), shown = 0;
    printf(",\"master_id\":");
    wctl_json_str(st->master_id);
    printf(",\"applied_seq\":%llu,\"leader\":", (unsigned long long)st->applied_seq);
    wctl_json_str(st->leader);
    printf(",\"masters\":[");
    for (size_t i = 0; i < st->n_masters; i++) {
        const kvc_master *m = &st->masters[i];
        printf("%s{\"id\":", i ? "," : "");
        wctl_json_str(m->id);
        printf(",\"role\":");
        wctl_json_str(m->role);
        printf(",\"endpoint\":");
        wctl_json_str(m->endpoint);
        printf(",\"applied_seq\":%llu,\"lag\":%llu,\"ready\":%s,\"reason\":",
               (unsigned long long)m->applied_seq, (unsigned long long)m->lag,
               m->ready ? "true" : "false");
        wctl_json_str(m->reason);
        putchar('}');
    }
    putchar(']');
    printf(",\"unregistered\":[");
    for (size_t i = 0; i < ml->n && n_gone > 0; i++) {
        if (!gone[i]) continue;
        if (shown++ > 0) putchar(',');
        wctl_json_str(ml->ep[i]);
    }
    putchar(']');
    printf(",\"gates\":[");
    for (size_t i = 0; i < st->n_gates; i++) {
        const kvc_gate *g = &st->gates[i];
        printf("%s{\"name\":", i ? "," : "");
        wctl_json_str(g->name);
        printf(",\"confirmed\":%s,\"how\":", g->confirmed ? "true" : "false");
        wctl_json_str(g->how);
        printf(",\"blocked_by\":");
        wctl_json_str(g->blocked_by);
        putchar('}');
    }
    putchar(']');
}

/* One gate's line: confirmed (how), or closed and what blocks it. */
static void gate_line(const kvc_gate *g)
{
    if (g->confirmed)
        printf("  %s: confirmed (%s)\n", g->name, g->how[0] ? g->how : "?");
    else if (g->blocked_by[0])
        printf("  %s: closed, blocked: %s\n", g->name, g->blocked_by);
    else
        printf("  %s: closed; every master can replay it (weightctl gate confirm %s)\n", g->name,
               g->name);
}

/* The masters of an HA cluster as a table, then the endpoints of ml no
 * master registered. */
static void status_ha_table(const kvc_status *st, const master_list *ml)
{
    int gone[ML_MAX_ENDPOINTS];
    int idw = 2, epw = 8;
    for (size_t i = 0; i < st->n_masters; i++) {
        int a = (int)strlen(st->masters[i].id), b = (int)strlen(st->masters[i].endpoint);
        idw = a > idw ? a : idw;
        epw = b > epw ? b : epw;
    }
    printf("leader    %s\n", st->leader[0] ? st->leader : "(none known)");
    printf("masters   %zu\n", st->n_masters_total);
    printf("  %-*s  %-9s  %-*s  %12s  %8s  %s\n", idw, "ID", "ROLE", epw, "ENDPOINT", "APPLIED",
           "LAG", "READY");
    for (size_t i = 0; i < st->n_masters; i++) {
        const kvc_master *m = &st->masters[i];
        printf("  %-*s  %-9s  %-*s  %12llu  %8llu  %s%s%s\n", idw, m->id, m->role, epw,
               m->endpoint, (unsigned long long)m->applied_seq, (unsigned long long)m->lag,
               m->ready ? "yes" : "no", m->reason[0] ? ": " : "", m->reason);
    }
    if (st->n_masters_total > st->n_masters)
        printf("  (%zu more not shown)\n", st->n_masters_total - st->n_masters);
    if (unregistered(ml, st, gone) > 0)
        for (size_t i = 0; i < ml->n; i++)
            if (gone[i])
                printf("  %s of --master: no master registered it (down, paused past its "
                       "lease, not a master of this cluster, or registered by another "
                       "name)\n", ml->ep[i]);
    printf("gates     %zu\n", st->n_gates);
    for (size_t i = 0; i < st->n_gates; i++) gate_line(&st->gates[i]);
}

int wctl_cmd_gate_confirm(ctl *x, const char *name)
{
    kvc_gate g;
    if (kvc_gate_confirm(x->c, name, &g) < 0) {
        fprintf(stderr, "weightctl: gate confirm %s: %s\n", name, kvc_error(x->c));
        return 1;
    }
    if (x->json) {
        printf("{\"name\":");
        wctl_json_str(g.name);
        printf(",\"confirmed\":%s,\"how\":", g.confirmed ? "true" : "false");
        wctl_json_str(g.how);
        printf("}\n");
    } else {
        kvc_status st;
        gate_line(&g);
        if (g.confirmed && kvc_status_get(x->c, &st) == 0 && st.n_masters_total == 0 &&
            st.master_id[0] == '\0')
            printf("  (no effect on this master: gates are enforced with ha.enabled only)\n");
    }
    return g.confirmed ? 0 : 1;
}

/* How long status waits for the leader a standby names: a leader that is
 * paused or hung is being replaced, and the standby's view is shown then. */
#define STATUS_LEADER_MS 3000

static void mark_silent_leader(kvc_status *st, const char *why);

/* A standby answered status for a list of masters: nodes register with
 * the leader alone, so ask the leader it names (over the same transport,
 * for at most STATUS_LEADER_MS) and show its answer instead; on failure
 * the standby's stands, and why[] (else "") says why the leader's does
 * not. 1 when *st is now the leader's (its endpoint in *from). */
static int status_of_leader(ctl *x, kvc_status *st, kvc_node **nodes, size_t *n_nodes,
                            char *from, size_t cap, char *why, size_t why_cap, int *silent)
{
    master_list ml;
    char err[512] = "";
    kvc *leader = NULL;
    why[0] = '\0';
    if (master_list_parse(x->master, &ml, err, sizeof(err)) < 0 || ml.n < 2 ||
        strcmp(st->role, "leader") == 0 || st->leader[0] == '\0')
        return 0;
    rpcc_options opt = wctl_rpc_options(x, STATUS_LEADER_MS);
    kvc_status ls;
    kvc_node *lnodes = NULL;
    size_t ln = 0;
    int ok = kvc_connect_opts(st->leader, &opt, x->tls_ctx, &leader, err, sizeof(err)) == 0 &&
             kvc_status_get_nodes(leader, &ls, &lnodes, &ln) == 0;
    if (ok && strcmp(ls.role, "leader") == 0) {
        *st = ls;
        free(*nodes);
        *nodes = lnodes;
        *n_nodes = ln;
        lnodes = NULL;
        snprintf(from, cap, "%s", kvc_endpoint(leader));
    } else {
        const char *cause = ok ? ls.role : leader != NULL ? kvc_error(leader) : err;
        snprintf(why, why_cap, "the leader it names, %s, %s%s", st->leader,
                 ok ? "says it is " : "did not answer: ", cause);
        if (!ok) {
            *silent = 1;
            mark_silent_leader(st, cause);
        }
        ok = 0;
    }
    free(lnodes);
    kvc_close(leader);
    return ok;
}

/* The "oplog" object of status --json: {"state":"ok"|"failed"|"unreachable", ...}
 * ("unreachable": an HA master that cannot reach etcd, where no append can
 * be made durable; "cause" says since when and why). */
static void oplog_json(const kvc_status *o)
{
    printf(",\"oplog\":{\"state\":\"%s\"",
           o->oplog_read_only ? "failed" : o->etcd_unreachable[0] ? "unreachable" : "ok");
    if (o->oplog_read_only) {
        printf(",\"failed_seq\":%llu,\"cause\":", (unsigned long long)o->oplog_failed_seq);
        wctl_json_str(o->oplog_failed_why);
    } else if (o->etcd_unreachable[0]) {
        printf(",\"cause\":");
        wctl_json_str(o->etcd_unreachable);
    }
    putchar('}');
}

/* The "oplog" line of status's text when the OpLog failed or cannot reach
 * etcd. */
static void oplog_text(const kvc_status *o)
{
    if (o->oplog_read_only)
        printf("oplog     FAILED (read-only since seq %llu: %s): restart the master once the cause "
               "is fixed\n", (unsigned long long)o->oplog_failed_seq, o->oplog_failed_why);
    else if (o->etcd_unreachable[0])
        printf("oplog     UNREACHABLE (%s)\n", o->etcd_unreachable);
}

/* The leader st names did not answer status (why says so): its row, if
 * any, must not read as a healthy leader. */
static void mark_silent_leader(kvc_status *st, const char *why)
{
    for (size_t i = 0; i < st->n_masters; i++) {
        kvc_master *m = &st->masters[i];
        if (strcmp(m->endpoint, st->leader) != 0) continue;
        m->ready = 0;
        snprintf(m->reason, sizeof(m->reason), "did not answer status within %d s (%s)",
                 STATUS_LEADER_MS / 1000, why);
    }
}

int wctl_cmd_status(ctl *x)
{
    kvc_status st;
    kvc_node *nodes = NULL;
    size_t n_nodes = 0;
    char from[256];
    if (kvc_status_get_nodes(x->c, &st, &nodes, &n_nodes) < 0) {
        fprintf(stderr, "weightctl: status: %s\n", kvc_error(x->c));
        return 1;
    }
    snprintf(from, sizeof(from), "%s", kvc_endpoint(x->c));
    int ha = st.n_masters_total > 0 || st.master_id[0] != '\0';
    master_list ml; /* parsed before the connection: it parses */
    if (master_list_parse(x->master, &ml, NULL, 0) < 0) ml.n = 0;
    char why[700] = "";
    int silent = 0; /* the leader a standby named did not answer */
    int standby = ha &&
                  !status_of_leader(x, &st, &nodes, &n_nodes, from, sizeof(from), why, sizeof(why),
                                    &silent) &&
                  strcmp(st.role, "leader") != 0;
    int bad = st.oplog_read_only || st.etcd_unreachable[0] != '\0';
    if (x->json) {
        printf("{\"role\":");
        wctl_json_str(st.role);
        if (standby) /* nodes register with the leader: a standby knows none */
            printf(",\"nodes\":null,\"segments\":null,\"memory_capacity\":null,"
                   "\"memory_used\":null");
        else
            printf(",\"nodes\":%u,\"segments\":%u,\"memory_capacity\":%llu,"
                   "\"memory_used\":%llu",
                   st.nodes, st.segments, (unsigned long long)st.memory_capacity,
                   (unsigned long long)st.memory_used);
        printf(",\"objects\":%llu,\"oplog_last_seq\":%llu,\"snapshot_seq\":%llu",
               (unsigned long long)st.objects, (unsigned long long)st.oplog_last_seq,
               (unsigned long long)st.snapshot_seq);
        if (ha) {
            printf(",\"endpoint\":");
            wctl_json_str(from);
            status_ha_json(&st, &ml);
        }
        if (ha && why[0] != '\0') {
            printf(",\"leader_view\":");
            wctl_json_str(why);
        }
        oplog_json(&st);
        if (!standby) wctl_status_nodes_json(nodes, n_nodes);
        printf("}\n");
        free(nodes);
        return bad ? 1 : 0;
    }
    double pct = st.memory_capacity ? 100.0 * (double)st.memory_used / (double)st.memory_capacity : 0;
    if (ha)
        printf("master    %s (%s, id %s, applied seq %llu)\n", from, st.role,
               st.master_id[0] ? st.master_id : "?", (unsigned long long)st.applied_seq);
    else
        printf("master    %s (%s)\n", from, st.role);
    if (standby) {
        /* nodes register with the leader: a standby knows none */
        if (silent)
            printf("nodes     - (unknown: they register with the leader, and it did not answer)\n");
        else
            printf("nodes     - (they register with the leader%s%s)\n", st.leader[0] ? ", " : "",
                   st.leader);
        printf("segments  - (the leader's)\n");
        printf("memory    - (the leader's nodes')\n");
        if (why[0] != '\0') printf("note      this is a standby's view: %s\n", why);
    } else {
        printf("nodes     %u\n", st.nodes);
        printf("segments  %u\n", st.segments);
    }
    if (!standby) wctl_status_nodes_text(x, nodes, n_nodes);
    free(nodes);
    if (!standby && x->bytes) {
        printf("memory    %llu of %llu bytes used (%.1f%%)\n", (unsigned long long)st.memory_used,
               (unsigned long long)st.memory_capacity, pct);
    } else if (!standby) {
        char used[32], cap[32];
        wctl_human((double)st.memory_used, used, sizeof used);
        wctl_human((double)st.memory_capacity, cap, sizeof cap);
        printf("memory    %s of %s used (%.1f%%)\n", used, cap, pct);
    }
    printf("objects   %llu\n", (unsigned long long)st.objects);
    printf("oplog     seq %llu, snapshot at %llu\n", (unsigned long long)st.oplog_last_seq,
           (unsigned long long)st.snapshot_seq);
    oplog_text(&st);
    if (ha) status_ha_table(&st, &ml);
    return bad ? 1 : 0;
}
