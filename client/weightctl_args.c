/* weightctl_args.c -- how weightctl reads its arguments and reaches the
 * weights: the store handle, Ctrl-C, and the one-line failure report, identities
 * (NAMESPACE/RESOURCE/REVISION[@GENERATION], the newest live generation when
 * "@GENERATION" is left out), residencies, modes, numbers, the TP placement
 * rules (--split / --replicate) and --tie. */
#include <ctype.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "weightctl.h"

int wctl_open_weights(ctl *x)
{
    char err[512];
    int rc = weight_store_open_tls(x->master, x->tenant, NULL, x->tls_ctx != NULL ? &x->tls : NULL,
                                   NULL, &x->ws, err, sizeof err);
    if (rc < 0) {
        wctl_say_unconnected(x, rc == WEIGHT_EAUTH, weight_error_name(rc), err);
        return -1;
    }
    return 0;
}

void wctl_say_unconnected(const ctl *x, int refused, const char *code, const char *err)
{
    fprintf(stderr, refused ? "weightctl: the master at %s refused this client: %s%s%s\n"
                            : "weightctl: cannot reach the master at %s: %s%s%s\n",
            x->master, code != NULL ? code : "", code != NULL ? ": " : "", err);
}

/* Print "weightctl: WHAT: NAME: cause" and return 1. */
int wctl_failed(ctl *x, const char *what, int rc)
{
    char msg[1024];
    wctl_sizes_text(weight_store_last_error(x->ws), x->bytes, msg, sizeof msg);
    fprintf(stderr, "weightctl: %s: %s: %s\n", what, weight_error_name(rc), msg);
    return 1;
}

/* -- identities ------------------------------------------------------------ */

/* An identity component over WEIGHT_ID_MAX bytes, or empty, as "the
 * revision (--revision) is 300 bytes, over the 256-byte limit of an
 * identity component" into why[cap]; "" when it is neither. flag may be
 * NULL. len is its length (decoded, for a command-line ID). */
static void component_why(const char *name, const char *flag, size_t len, char *why, size_t cap)
{
    char who[64];
    snprintf(who, sizeof who, "the %s%s%s%s", name, flag ? " (" : "", flag ? flag : "",
             flag ? ")" : "");
    why[0] = '\0';
    if (len == 0) snprintf(why, cap, "%s is empty", who);
    else if (len > WEIGHT_ID_MAX)
        snprintf(why, cap, "%s is %zu bytes, over the %d-byte limit of an identity component", who,
                 len, WEIGHT_ID_MAX);
}

/* Why weight_identity_parse refused text (or, when it took it, why
 * weightctl does not: generation 0) into why[cap]; "" when it cannot tell. */
static void id_why(const char *text, const char *tenant, char *why, size_t cap)
{
    static const char *const names[3] = {"namespace", "resource", "revision"};
    const char *at = strchr(text, '@');
    size_t body = at ? (size_t)(at - text) : strlen(text), slashes = 0;
    uint64_t gen;
    why[0] = '\0';
    if (tenant != NULL) {
        component_why("tenant", "--tenant", strlen(tenant) ? strlen(tenant) : 1, why, cap);
        if (why[0]) return;
    }
    if (at != NULL && (wctl_parse_u64(at + 1, &gen) < 0 || gen == UINT64_MAX)) {
        snprintf(why, cap, "the generation '%s' is not a positive integer", at + 1);
        return;
    }
    if (at != NULL && gen == 0) {
        snprintf(why, cap, "generation 0 is not a generation (they start at 1)");
        return;
    }
    for (size_t i = 0; i < body; i++) slashes += text[i] == '/';
    if (slashes != 2) {
        snprintf(why, cap, "%zu components, not 3 (a '/' in one is written %%2F)", slashes + 1);
        return;
    }
    const char *p = text;
    for (int k = 0; k < 3; k++) {
        const char *end = k < 2 ? strchr(p, '/') : text + body;
        size_t len = 0;
        for (const char *c = p; c < end; c++, len++) {
            if (*c != '%') continue;
            if (end - c < 3 || !isxdigit((unsigned char)c[1]) || !isxdigit((unsigned char)c[2]) ||
                (c[1] == '0' && c[2] == '0')) {
                snprintf(why, cap, "the %s has a bad %%-escape (%%XX, two hex digits, not %%00)",
                         names[k]);
                return;
            }
            c += 2;
        }
        component_why(names[k], NULL, len, why, cap);
        if (why[0]) return;
        p = end + 1;
    }
}

int wctl_parse_id_text(ctl *x, const char *text, weight_identity *id, int *has_gen)
{
    char why[160];
    if (weight_identity_parse(text, x->tenant, id, has_gen) == 0 && (!*has_gen || id->generation))
        return 0;
    id_why(text, x->tenant, why, sizeof why);
    fprintf(stderr, "weightctl: '%s' is not NAMESPACE/RESOURCE/REVISION[@GENERATION]%s%s\n", text,
            why[0] ? ": " : "", why);
    return 2;
}

int wctl_check_components(const char *cmd, const char *tenant, const char *ns, const char *res,
                          const char *rev)
{
    const char *const names[4] = {"tenant", "namespace", "resource", "revision"};
    const char *const flags[4] = {"--tenant", "--namespace", "--resource", "--revision"};
    const char *const v[4] = {tenant, ns, res, rev};
    char why[160];
    for (int k = 0; k < 4; k++) {
        size_t len = v[k] ? strlen(v[k]) : 0;
        component_why(names[k], flags[k], k == 0 && len == 0 ? 1 : len, why, sizeof why);
        if (why[0]) {
            fprintf(stderr, "weightctl: %s: INVALID_ARGUMENT: %s\n", cmd, why);
            return 2;
        }
    }
    return 0;
}

/* The newest generation of id's revision that LIST shows: a live one, or
 * with importing an IMPORTING one (only those). Sets id->generation; 0, or
 * WEIGHT_ENOT_FOUND, or the listing's error. */
static int newest_listed(ctl *x, weight_identity *id, int importing)
{
    weight_list_query q = {id->namespace_id, id->resource_id, 0, importing ? WEIGHT_LIST_IMPORTING : 0};
    char token[1024] = "", next[1024];
    uint64_t best = 0;
    do {
        weight_metadata *list = NULL;
        size_t n = 0;
        int rc = weight_list(x->ws, &q, token, &list, &n, next, sizeof next);
        if (rc < 0) return rc;
        for (size_t i = 0; i < n; i++)
            if (strcmp(list[i].identity.revision, id->revision) == 0 &&
                (!importing || list[i].availability == WEIGHT_IMPORTING) &&
                list[i].identity.generation > best)
                best = list[i].identity.generation;
        weight_list_free(list);
        snprintf(token, sizeof token, "%s", next);
    } while (token[0]);
    if (best == 0) return WEIGHT_ENOT_FOUND;
    id->generation = best;
    return 0;
}

int wctl_newest_generation(ctl *x, weight_identity *id) { return newest_listed(x, id, 0); }

int wctl_follow_newest(ctl *x, weight_identity *id, int rc, int *tries)
{
    weight_identity now = *id;
    if (rc != WEIGHT_ENOT_READY && rc != WEIGHT_ENOT_FOUND) return 0;
    if (++*tries >= WCTL_NEWEST_ATTEMPTS) return 0;
    if (newest_listed(x, &now, 0) != 0 || now.generation <= id->generation) return 0;
    *id = now;
    return 1;
}

/* Parse an ID; without "@GEN" take the newest IMPORTING generation of it. */
int wctl_parse_importing_id(ctl *x, const char *text, weight_identity *id)
{
    int has_gen = 0, rc;
    if ((rc = wctl_parse_id_text(x, text, id, &has_gen)) != 0) return rc;
    if (has_gen) return 0;
    if ((rc = newest_listed(x, id, 1)) == WEIGHT_ENOT_FOUND) {
        fprintf(stderr, "weightctl: %s: NOT_FOUND: no IMPORTING generation of that revision "
                "(weightctl ls --all lists them)\n", text);
        return 1;
    }
    if (rc < 0) return wctl_failed(x, "resolving the generation", rc);
    return 0;
}

/* Parse an ID; without "@GEN" take the newest live generation of it. */
int wctl_parse_id(ctl *x, const char *text, weight_identity *id)
{
    int has_gen = 0, rc;
    if ((rc = wctl_parse_id_text(x, text, id, &has_gen)) != 0) return rc;
    if (has_gen) return 0;
    if ((rc = wctl_newest_generation(x, id)) == WEIGHT_ENOT_FOUND) {
        fprintf(stderr, "weightctl: %s: NOT_FOUND: no live generation of that revision\n", text);
        return 1;
    }
    if (rc < 0) return wctl_failed(x, "resolving the generation", rc);
    return 0;
}

/* wctl_parse_id of arg, then its text into text[tcap] and "CMD TEXT" (what a
 * failure names) into what[wcap]. Returns parse_id's status: 0, or the exit
 * code with the cause already printed. */
int wctl_resolve_id(ctl *x, const char *arg, const char *cmd, weight_identity *id, char *text,
                      size_t tcap, char *what, size_t wcap)
{
    int rc = wctl_parse_id(x, arg, id);
    if (rc != 0) return rc;
    wctl_id_text(id, text, tcap);
    snprintf(what, wcap, "%s %s", cmd, text);
    return 0;
}

/* "hot", "cold", "mixed" or "mixed:0.3" into a residency and ratio. */
int wctl_parse_residency(const char *s, weight_residency *res, double *ratio)
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

int wctl_parse_mode(const char *s, weight_migration_mode *m)
{
    if (strcasecmp(s, "pinned") == 0) *m = WEIGHT_MODE_PINNED;
    else if (strcasecmp(s, "manual") == 0) *m = WEIGHT_MODE_MANUAL;
    else if (strcasecmp(s, "auto") == 0) *m = WEIGHT_MODE_AUTO;
    else return -1;
    return 0;
}

int wctl_fence(ctl *x, const char *cmd, const weight_identity *id, uint64_t *expect)
{
    char text[2048];
    if (*expect == 0) {
        weight_metadata md;
        int rc = weight_get_metadata(x->ws, id, &md, NULL);
        if (rc < 0) return wctl_failed(x, cmd, rc);
        *expect = md.metadata_generation;
    }
    wctl_id_text(id, text, sizeof text);
    fprintf(stderr, "weightctl: %s %s at metadata generation %" PRIu64 "\n", cmd, text, *expect);
    return 0;
}

int wctl_parse_u64(const char *s, uint64_t *out)
{
    char *end = NULL;
    if (s == NULL || *s < '0' || *s > '9') return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0') return -1;
    *out = (uint64_t)v;
    return 0;
}


/* Add a --split (arg "PATTERN=DIM", cut in place) or --replicate rule. 0, or
 * -1 for a usage error. */
int wctl_rules_add(wctl_rules *rs, char *arg, int split)
{
    uint64_t dim = 0;
    if (rs->n == sizeof rs->r / sizeof rs->r[0]) return -1;
    if (split) {
        char *eq = strrchr(arg, '=');
        if (eq == NULL || wctl_parse_u64(eq + 1, &dim) < 0 || dim > 7) return -1;
        *eq = '\0';
    }
    rs->r[rs->n++] = (wctl_rule){arg, split, (uint32_t)dim};
    return 0;
}

/* 1 with *dim when tensor name (ndim dimensions) is split, 0 when it is
 * replicated. */
int wctl_rules_decide(const wctl_rules *rs, const char *name, uint32_t ndim, uint32_t *dim)
{
    for (size_t i = 0; i < rs->n; i++) {
        const wctl_rule *r = &rs->r[i];
        if (fnmatch(r->pattern, name, 0) != 0) continue;
        if (r->split && r->dim >= ndim) continue; /* not that rank */
        *dim = r->dim;
        return r->split;
    }
    *dim = 0;
    return ndim >= 2;
}

/* One --tie NAME=TARGET into ties[*n_ties] (at most 64; arg is split in
 * place). 0, or -1 for a usage error (also an empty NAME or TARGET, or a
 * tensor tied to itself). */
int wctl_parse_tie(char *arg, wctl_tie *ties, size_t *n_ties)
{
    char *eq = strchr(arg, '=');
    if (eq == NULL || *n_ties == 64 || eq == arg || eq[1] == '\0' ||
        (strncmp(arg, eq + 1, (size_t)(eq - arg)) == 0 && strlen(eq + 1) == (size_t)(eq - arg)))
        return -1;
    *eq = '\0';
    ties[*n_ties].name = arg;
    ties[(*n_ties)++].target = eq + 1;
    return 0;
}

/* -- Ctrl-C ------------------------------------------------------------------ */

static weight_store *volatile g_cancel_store;
static volatile sig_atomic_t g_interrupted;
static struct sigaction g_old_sigint;

static void on_sigint(int sig)
{
    (void)sig;
    g_interrupted = 1;
    if (g_cancel_store) weight_store_cancel(g_cancel_store);
}

void wctl_sigint_arm(weight_store *s)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    g_interrupted = 0;
    g_cancel_store = s;
    sigaction(SIGINT, &sa, &g_old_sigint);
}

void wctl_sigint_disarm(void)
{
    sigaction(SIGINT, &g_old_sigint, NULL);
    g_cancel_store = NULL;
}

int wctl_interrupted(void)
{
    return g_interrupted != 0;
}
