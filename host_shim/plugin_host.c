/* plugin_host.c -- the plugin loader and the registry of what plugins extend.
 *
 * Loading is one transaction: dlopen(RTLD_NOW | RTLD_LOCAL), resolve the
 * entry symbol, check the descriptor field by field (size, ABI major, minor,
 * tag, required capabilities, init), then call init() with this plugin's own
 * host API table while its in_init flag is set. Every register_* member
 * validates and copies what it is given into the registry, tagged with its
 * owner; the first refusal is remembered. If init() fails or anything was
 * refused, the load fails closed: the owner's entries are dropped from every
 * table (preserving the order of the others), its metric families are
 * unregistered, fini() is not called, the library is closed and the plugin
 * record freed, so the registry is exactly what it was before the call.
 *
 * Every reconcile tick and guard call goes through here and is timed on the
 * monotonic clock: durations go to the histograms the master hands over
 * (host_plugins_set_timing), overruns (a tick past its deadline, a guard
 * call over HOST_GUARD_BUDGET_NS) to counters and to stderr, at most one
 * line per plugin and kind every HOST_OVERRUN_LOG_INTERVAL_MS.
 *
 * The API table itself (registration members, and the services that forward
 * to the master through host_backend) is plugin_host_api.c's; what --check
 * prints is plugin_host_describe.c's. Single-threaded (the loop thread), no
 * locks. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plugin_host_internal.h"
#include "wm_errbuf.h"

/* -- Small helpers ------------------------------------------------------------ */
/* -- Small helpers ------------------------------------------------------------ */

int hp_vec_push(host_vec *vec, void *item)
{
    if (vec->n == vec->cap) {
        size_t cap = vec->cap ? vec->cap * 2 : 8;
        void **grown = realloc(vec->v, cap * sizeof(*grown));
        if (grown == NULL) return SMP_ENOMEM;
        vec->v = grown;
        vec->cap = cap;
    }
    vec->v[vec->n++] = item;
    return SMP_OK;
}

/* Free and drop every entry whose owner (the host_plugin * stored at
 * owner_off inside the entry) is p, keeping the others in order. */
void hp_vec_drop_owner(host_vec *vec, const host_plugin *p, size_t owner_off)
{
    size_t kept = 0;
    for (size_t i = 0; i < vec->n; i++) {
        host_plugin *owner;
        memcpy(&owner, (char *)vec->v[i] + owner_off, sizeof(owner));
        if (owner == p) free(vec->v[i]);
        else vec->v[kept++] = vec->v[i];
    }
    vec->n = kept;
}

void hp_vec_free(host_vec *vec)
{
    free(vec->v);
    vec->v = NULL;
    vec->n = vec->cap = 0;
}

const char *hp_file_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash != NULL ? slash + 1 : path;
}

const char *hp_str_or(const char *s, const char *dflt)
{
    return s != NULL ? s : dflt;
}

uint64_t hp_offered_caps(const host_plugins *reg)
{
    return reg->be.host_caps != 0 ? reg->be.host_caps : SMP_HOST_CAPS_V1;
}

uint64_t hp_clock_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Record one timed call of p: its duration (took_ns) in the histogram, and
 * when it overran its budget (budget_ns, for the message) the counter and a
 * line on stderr -- unless a line for this plugin and kind was written less
 * than HOST_OVERRUN_LOG_INTERVAL_MS before; then it is only counted as
 * suppressed, and the next line says how many were. start_ns: when the call
 * began (monotonic), the time the rate limit goes by. */
static void timing_record(host_plugin *p,
                          host_metric *seconds,
                          host_metric *overruns,
                          host_overrun_log *log,
                          const char *what,
                          uint64_t took_ns,
                          int overran,
                          uint64_t budget_ns,
                          uint64_t start_ns)
{
    const char *values[1] = {hp_str_or(p->desc.name, p->file)};
    uint64_t now_ms = (start_ns + took_ns) / 1000000u;
    host_metric_observe(seconds, values, (double)took_ns / 1e9);
    if (!overran) return;
    host_metric_add(overruns, values, 1);
    if (log->logged && now_ms - log->last_ms < HOST_OVERRUN_LOG_INTERVAL_MS) {
        log->suppressed++;
        return;
    }
    if (log->logged)
        fprintf(stderr,
                "store_master: plugin %s: %s overran its budget: took %.3f ms, budget %.3f ms "
                "(%" PRIu64 " more not logged since the last line)\n",
                values[0], what, (double)took_ns / 1e6, (double)budget_ns / 1e6, log->suppressed);
    else
        fprintf(stderr,
                "store_master: plugin %s: %s overran its budget: took %.3f ms, budget %.3f ms "
                "(logged at most once every %u s)\n",
                values[0], what, (double)took_ns / 1e6, (double)budget_ns / 1e6,
                HOST_OVERRUN_LOG_INTERVAL_MS / 1000u);
    log->logged = 1;
    log->last_ms = now_ms;
    log->suppressed = 0;
}

/* -- The registry -------------------------------------------------------------- */

static const char *const guard_reason_label[] = {"reason", NULL};

/* Create the registry and register the host's own family
 * host_guard_vetoes_total{reason} with every reason at 0 (so a metrics
 * registry holds at most one plugin registry: a second gets SMP_EEXIST).
 * The backend is copied; cfg and metrics are borrowed. */
int host_plugins_create(host_plugins **out, const host_config *cfg, host_metrics *metrics,
                        const host_backend *be)
{
    int rc;
    host_plugins *reg;

    if (out == NULL || cfg == NULL || metrics == NULL) return SMP_EINVAL;
    reg = calloc(1, sizeof(*reg));
    if (reg == NULL) return SMP_ENOMEM;
    reg->cfg = cfg;
    reg->metrics = metrics;
    if (be != NULL) reg->be = *be;
    rc = host_metrics_register(metrics, SMP_METRIC_COUNTER, "host_guard_vetoes_total",
                               "Actions an object guard vetoed, by reason.", guard_reason_label,
                               &reg->guard_vetoes);
    if (rc < 0) goto free_reg;
    /* Every reason is exported from the start, at 0. */
    for (int r = 1; r <= SMP_GUARD_REASON_MAX; r++) {
        const char *values[1] = {host_guard_reason_name((smp_guard_reason)r)};
        host_metric_add(reg->guard_vetoes, values, 0);
    }
    *out = reg;
    return SMP_OK;

free_reg:
    free(reg);
    return rc;
}

void host_plugins_set_backend(host_plugins *reg, const host_backend *be)
{
    if (reg == NULL) return;
    if (be != NULL) reg->be = *be;
    else memset(&reg->be, 0, sizeof(reg->be));
    for (size_t i = 0; i < reg->plugins.n; i++) {
        host_plugin *p = reg->plugins.v[i];
        p->api.host_caps = hp_offered_caps(reg);
        hp_api_bind_backend(&p->api, &reg->be);
    }
}

/* Remove everything p registered from the registry (order of the rest kept)
 * and from its staging tables, and unregister its metric families but the
 * ones a reload's new instance took over (shared). Does not call fini or
 * dlclose. */
void hp_undo_registrations(host_plugin *p)
{
    host_plugins *reg = p->reg;
    hp_vec_drop_owner(&reg->types, p, offsetof(host_oplog_type_reg, owner));
    hp_vec_drop_owner(&reg->sections, p, offsetof(host_section_reg, owner));
    hp_vec_drop_owner(&reg->rpcs, p, offsetof(host_rpc_reg, owner));
    hp_vec_drop_owner(&reg->ticks, p, offsetof(host_tick_reg, owner));
    hp_vec_drop_owner(&reg->handlers, p, offsetof(host_event_reg, owner));
    hp_vec_drop_owner(&p->s_types, p, offsetof(host_oplog_type_reg, owner));
    hp_vec_drop_owner(&p->s_sections, p, offsetof(host_section_reg, owner));
    hp_vec_drop_owner(&p->s_rpcs, p, offsetof(host_rpc_reg, owner));
    hp_vec_drop_owner(&p->s_ticks, p, offsetof(host_tick_reg, owner));
    hp_vec_drop_owner(&p->s_handlers, p, offsetof(host_event_reg, owner));
    for (size_t i = 0; i < p->n_metrics; i++)
        if (!p->metrics[i].shared) host_metrics_unregister(reg->metrics, p->metrics[i].f);
    free(p->metrics);
    p->metrics = NULL;
    p->n_metrics = 0;
    p->has_guard = 0;
    p->has_tick = 0;
    for (size_t i = 0; i < p->n_key_spaces; i++) free(p->key_spaces[i]);
    p->n_key_spaces = 0;
}

void hp_plugin_free(host_plugin *p)
{
    if (p == NULL) return;
    free(p->metrics);
    for (size_t i = 0; i < p->n_key_spaces; i++) free(p->key_spaces[i]);
    hp_vec_free(&p->s_types);
    hp_vec_free(&p->s_sections);
    hp_vec_free(&p->s_rpcs);
    hp_vec_free(&p->s_ticks);
    hp_vec_free(&p->s_handlers);
    free(p->path);
    free(p);
}

/* Unload a plugin that finished init: fini, drop its registrations, close
 * the library, free the record. The caller removes it from reg->plugins. */
void hp_plugin_unload(host_plugin *p)
{
    if (p->desc.fini != NULL) p->desc.fini(p->state);
    hp_undo_registrations(p);
    dlclose(p->dl);
    hp_plugin_free(p);
}

/* Check the descriptor in the documented order; on refusal write the message
 * and return the code. On success p->desc is the descriptor's copy. */
static int check_desc(host_plugin *p, const smp_plugin_desc *d, char *err, size_t errlen)
{
    uint32_t ss;
    uint64_t offered = hp_offered_caps(p->reg);
    uint64_t missing;

    if (d == NULL) {
        wm_errbuf(err, errlen, "%s: smp_plugin_entry returned no descriptor", p->file);
        return SMP_EINVAL;
    }
    ss = hp_struct_size_of(d);
    if (ss < V1_DESC) {
        wm_errbuf(err, errlen, "%s: descriptor struct_size %" PRIu32 " is smaller than ABI 1.0's %zu",
                p->file, ss, V1_DESC);
        return SMP_EINVAL;
    }
    hp_copy_abi(&p->desc, sizeof(p->desc), d, V1_DESC);
    if (p->desc.abi_major != SMP_ABI_MAJOR) {
        wm_errbuf(err, errlen, "%s: ABI major %u does not match host ABI major %u", p->file,
                (unsigned)p->desc.abi_major, (unsigned)SMP_ABI_MAJOR);
        return SMP_ENOTSUP;
    }
    if (p->desc.abi_minor > SMP_ABI_MINOR) {
        wm_errbuf(err, errlen, "%s: ABI minor %u is newer than host ABI minor %u", p->file,
                (unsigned)p->desc.abi_minor, (unsigned)SMP_ABI_MINOR);
        return SMP_ENOTSUP;
    }
    if (p->desc.abi_tag != SMP_ABI_TAG) {
        wm_errbuf(err, errlen, "%s: ABI tag 0x%08" PRIx32 " does not match host ABI tag 0x%08" PRIx32,
                p->file, p->desc.abi_tag, (uint32_t)SMP_ABI_TAG);
        return SMP_ENOTSUP;
    }
    missing = p->desc.required_host_caps & ~offered;
    if (missing != 0) {
        wm_errbuf(err, errlen, "%s: required host capabilities 0x%" PRIx64
                " are not offered (host offers 0x%" PRIx64 ")", p->file, missing, offered);
        return SMP_ENOTSUP;
    }
    if (p->desc.init == NULL) {
        wm_errbuf(err, errlen, "%s: descriptor has no init", p->file);
        return SMP_EINVAL;
    }
    return SMP_OK;
}

/* Copy the library at src to a new file in dir (mode 0700) and put its
 * path in out: dlopen of that copy maps a second instance beside one
 * already loaded from src (the dynamic loader shares a library opened twice
 * under the same file). The caller unlinks it once it is opened. */
static int copy_to_temp(const char *src, const char *dir, char *out, size_t cap, char *err,
                        size_t errlen)
{
    char buf[65536];
    int in = -1, fd = -1, rc = SMP_EIO;
    ssize_t n;
    if ((size_t)snprintf(out, cap, "%s/.plugin-reload-XXXXXX", dir) >= cap) {
        wm_errbuf(err, errlen, "%s: the temporary path in %s is too long", hp_file_name(src), dir);
        return SMP_EINVAL;
    }
    if ((in = open(src, O_RDONLY | O_CLOEXEC)) < 0) {
        wm_errbuf(err, errlen, "%s: cannot load: %s: %s", hp_file_name(src), src, strerror(errno));
        return SMP_EIO;
    }
    if ((fd = mkstemp(out)) < 0) {
        wm_errbuf(err, errlen, "%s: cannot copy it into %s for a reload: %s", hp_file_name(src), dir,
                  strerror(errno));
        goto close_in;
    }
    while ((n = read(in, buf, sizeof(buf))) > 0)
        if (write(fd, buf, (size_t)n) != n) break;
    if (n != 0 || fchmod(fd, 0700) < 0) {
        wm_errbuf(err, errlen, "%s: cannot copy it into %s for a reload: %s", hp_file_name(src), dir,
                  strerror(errno));
        unlink(out);
        goto close_fd;
    }
    rc = SMP_OK;
close_fd:
    close(fd);
close_in:
    close(in);
    return rc;
}

/* Load one library as one transaction (see the file comment), or with
 * replaces set, the new instance of a reload (staged; see
 * hp_plugin_open in plugin_host_internal.h). */
int hp_plugin_open(host_plugins *reg, const host_config_plugin *pc, const char *path,
                   host_plugin *replaces, host_plugin **out, char *err, size_t errlen)
{
    int rc;
    host_plugin *p;
    smp_plugin_entry_fn entry;
    void *sym;
    const char *dl_msg;
    size_t path_len = strlen(path) + 1;
    char tmp[4200];

    p = calloc(1, sizeof(*p));
    if (p == NULL || (p->path = malloc(path_len)) == NULL) {
        wm_errbuf(err, errlen, "%s: out of memory", hp_file_name(path));
        hp_plugin_free(p);
        return SMP_ENOMEM;
    }
    memcpy(p->path, path, path_len);
    reg->init_failed = 0;
    p->file = hp_file_name(p->path);
    p->reg = reg;
    p->pc = pc;
    p->replaces = replaces;

    if (replaces == NULL) {
        p->dl = dlopen(p->path, RTLD_NOW | RTLD_LOCAL);
    } else {
        const char *dir = reg->cfg->data_dir != NULL && reg->cfg->data_dir[0] ? reg->cfg->data_dir : "/tmp";
        if ((rc = copy_to_temp(p->path, dir, tmp, sizeof(tmp), err, errlen)) < 0) goto free_plugin;
        p->dl = dlopen(tmp, RTLD_NOW | RTLD_LOCAL);
        unlink(tmp); /* mapped now (or refused): the file is not needed */
    }
    if (p->dl == NULL) {
        dl_msg = dlerror();
        wm_errbuf(err, errlen, "%s: cannot load: %s", p->file, hp_str_or(dl_msg, "unknown error"));
        rc = SMP_EIO;
        goto free_plugin;
    }
    dlerror();
    sym = dlsym(p->dl, SMP_PLUGIN_ENTRY_SYMBOL);
    if (sym == NULL) {
        dl_msg = dlerror();
        wm_errbuf(err, errlen, "%s: no entry symbol %s (%s)", p->file, SMP_PLUGIN_ENTRY_SYMBOL,
                hp_str_or(dl_msg, "symbol is NULL"));
        rc = SMP_ENOTFOUND;
        goto close_library;
    }
    memcpy(&entry, &sym, sizeof(entry)); /* POSIX: object to function pointer */
    if ((rc = check_desc(p, entry(), err, errlen)) < 0) goto close_library;

    hp_api_fill(p);
    p->in_init = 1;
    rc = p->desc.init(p, &p->api, &p->state);
    p->in_init = 0;
    if (p->refused_rc != 0) {
        wm_errbuf(err, errlen, "%s", p->refused);
        rc = p->refused_rc;
        goto undo_init;
    }
    if (rc != SMP_OK) {
        wm_errbuf(err, errlen, "%s: init failed: %s (%d)", p->file, smp_strerror(rc), rc);
        reg->init_failed = 1;
        if (rc > 0) rc = SMP_EINVAL;
        goto undo_init;
    }
    *out = p;
    return SMP_OK;

undo_init:
    hp_undo_registrations(p);
close_library:
    dlclose(p->dl);
free_plugin:
    hp_plugin_free(p);
    return rc;
}

/* pc is borrowed for as long as the plugin stays loaded (its block answers
 * config_get and gates); cfg->plugins entries satisfy that. On failure: a
 * negative code, the one message in err, and the registry exactly as
 * before. */
int host_plugins_load(host_plugins *reg, const host_config_plugin *pc, char *err, size_t errlen)
{
    int rc;
    host_plugin *p = NULL;

    if (err != NULL && errlen > 0) err[0] = '\0';
    if (reg == NULL || pc == NULL || pc->path == NULL) {
        wm_errbuf(err, errlen, "plugin: no path to load");
        return SMP_EINVAL;
    }
    /* The plugin list grows before init so that a later push cannot fail
     * after a successful init. */
    if ((rc = hp_vec_push(&reg->plugins, NULL)) < 0) {
        wm_errbuf(err, errlen, "%s: out of memory", hp_file_name(pc->path));
        return rc;
    }
    reg->plugins.n--;
    if ((rc = hp_plugin_open(reg, pc, pc->path, NULL, &p, err, errlen)) < 0) return rc;
    reg->plugins.v[reg->plugins.n++] = p;
    return SMP_OK;
}

/* Unload the plugins after the first `keep`, newest first. */
static void unload_after(host_plugins *reg, size_t keep)
{
    while (reg->plugins.n > keep) {
        host_plugin *p = reg->plugins.v[reg->plugins.n - 1];
        reg->plugins.n--;
        hp_plugin_unload(p);
    }
}

/* err = why, prefixed with where in the config file entry i is, when the
 * config came from a file: "FILE:LINE: plugins[i].path: " for a library
 * that did not load (or was refused), "FILE:LINE: plugins[i].config: " when
 * the plugin's init failed -- the plugin said why in its own log line just
 * before, whose line numbers (config_keys) are lines of the same file. */
static void entry_message(const host_plugins *reg, size_t i, const char *why, char *err,
                          size_t errlen)
{
    const host_config_plugin *pc = &reg->cfg->plugins[i];
    const char *src = reg->cfg->source;
    int in_init = reg->init_failed;
    int line = in_init && pc->config_line > 0 ? pc->config_line : pc->path_line;
    char where[32] = "";
    if (src == NULL) {
        wm_errbuf(err, errlen, "%s", why);
        return;
    }
    if (line > 0) snprintf(where, sizeof(where), ":%d", line);
    if (in_init)
        wm_errbuf(err, errlen, "%s%s: plugins[%zu].config: %s; the plugin's own line above "
                  "says why (a line number there is a line of %s)", src, where, i, why, src);
    else
        wm_errbuf(err, errlen, "%s%s: plugins[%zu].path: %s", src, where, i, why);
}

/* Load every enabled entry of the config in order. On the first failure the
 * plugins this call loaded are unloaded again (newest first, with fini);
 * plugins loaded before the call stay. The message names the entry
 * (entry_message). */
int host_plugins_load_all(host_plugins *reg, char *err, size_t errlen)
{
    size_t before;
    char why[1024];
    if (reg == NULL) return SMP_EINVAL;
    before = reg->plugins.n;
    for (size_t i = 0; i < reg->cfg->n_plugins; i++) {
        const host_config_plugin *pc = &reg->cfg->plugins[i];
        int rc;
        if (!pc->enabled) continue;
        why[0] = '\0';
        reg->init_failed = 0;
        rc = host_plugins_load(reg, pc, why, sizeof(why));
        if (rc < 0) {
            entry_message(reg, i, why, err, errlen);
            unload_after(reg, before);
            return rc;
        }
    }
    return SMP_OK;
}

void host_plugins_destroy(host_plugins *reg)
{
    if (reg == NULL) return;
    hp_change_abandon(reg);
    unload_after(reg, 0);
    host_metrics_unregister(reg->metrics, reg->guard_vetoes);
    hp_vec_free(&reg->plugins);
    hp_vec_free(&reg->types);
    hp_vec_free(&reg->sections);
    hp_vec_free(&reg->rpcs);
    hp_vec_free(&reg->ticks);
    hp_vec_free(&reg->handlers);
    free(reg);
}

/* -- What was registered --------------------------------------------------------- */

size_t host_plugins_count(const host_plugins *reg)
{
    return reg != NULL ? reg->plugins.n : 0;
}

host_plugin *host_plugins_at(const host_plugins *reg, size_t i)
{
    return reg != NULL && i < reg->plugins.n ? reg->plugins.v[i] : NULL;
}

const smp_plugin_desc *host_plugin_desc(const host_plugin *p)
{
    return p != NULL ? &p->desc : NULL;
}

const char *host_plugin_path(const host_plugin *p)
{
    return p != NULL ? p->path : NULL;
}

const char *host_plugin_config_path(const host_plugin *p)
{
    return p == NULL ? NULL : p->pc != NULL && p->pc->path != NULL ? p->pc->path : p->path;
}

void *host_plugin_state(const host_plugin *p)
{
    return p != NULL ? p->state : NULL;
}

const host_oplog_type_reg *host_plugins_oplog_type(const host_plugins *reg, uint16_t type)
{
    if (reg == NULL) return NULL;
    for (size_t i = 0; i < reg->types.n; i++) {
        const host_oplog_type_reg *t = reg->types.v[i];
        if (t->t.type == type) return t;
    }
    return NULL;
}

size_t host_plugins_n_oplog_types(const host_plugins *reg)
{
    return reg != NULL ? reg->types.n : 0;
}

const host_oplog_type_reg *host_plugins_oplog_type_at(const host_plugins *reg, size_t i)
{
    return reg != NULL && i < reg->types.n ? reg->types.v[i] : NULL;
}

const host_section_reg *host_plugins_section(const host_plugins *reg, const char *name)
{
    if (reg == NULL || name == NULL) return NULL;
    for (size_t i = 0; i < reg->sections.n; i++) {
        const host_section_reg *s = reg->sections.v[i];
        if (strcmp(s->s.name, name) == 0) return s;
    }
    return NULL;
}

size_t host_plugins_n_sections(const host_plugins *reg)
{
    return reg != NULL ? reg->sections.n : 0;
}

const host_section_reg *host_plugins_section_at(const host_plugins *reg, size_t i)
{
    return reg != NULL && i < reg->sections.n ? reg->sections.v[i] : NULL;
}

const host_rpc_reg *host_plugins_rpc_service(const host_plugins *reg, uint16_t id)
{
    if (reg == NULL) return NULL;
    for (size_t i = 0; i < reg->rpcs.n; i++) {
        const host_rpc_reg *r = reg->rpcs.v[i];
        if (r->s.service_id == id) return r;
    }
    return NULL;
}

size_t host_plugins_n_rpc_services(const host_plugins *reg)
{
    return reg != NULL ? reg->rpcs.n : 0;
}

const host_rpc_reg *host_plugins_rpc_service_at(const host_plugins *reg, size_t i)
{
    return reg != NULL && i < reg->rpcs.n ? reg->rpcs.v[i] : NULL;
}

size_t host_plugins_n_ticks(const host_plugins *reg)
{
    return reg != NULL ? reg->ticks.n : 0;
}

host_tick_reg *host_plugins_tick_at(host_plugins *reg, size_t i)
{
    return reg != NULL && i < reg->ticks.n ? reg->ticks.v[i] : NULL;
}

/* The plugins' claims in load order, each plugin's in claim order. */
size_t host_plugins_n_key_spaces(const host_plugins *reg)
{
    size_t n = 0;
    for (size_t i = 0; reg != NULL && i < reg->plugins.n; i++)
        n += ((const host_plugin *)reg->plugins.v[i])->n_key_spaces;
    return n;
}

static void key_space_fill(const host_plugin *p, size_t k, host_key_space *out)
{
    out->prefix = p->key_spaces[k];
    out->plugin = hp_str_or(p->desc.name, p->file);
    out->disabled = p->run == HOST_PLUGIN_DISABLED;
}

int host_plugins_key_space_at(const host_plugins *reg, size_t i, host_key_space *out)
{
    for (size_t j = 0; reg != NULL && out != NULL && j < reg->plugins.n; j++) {
        const host_plugin *p = reg->plugins.v[j];
        if (i < p->n_key_spaces) {
            key_space_fill(p, i, out);
            return 1;
        }
        i -= p->n_key_spaces;
    }
    return 0;
}

/* Claims do not overlap (claim_key_space refuses it), so the first claim
 * whose prefix key begins with is the only one. */
int host_plugins_key_space_of(const host_plugins *reg, const char *key, host_key_space *out)
{
    for (size_t j = 0; reg != NULL && key != NULL && out != NULL && j < reg->plugins.n; j++) {
        const host_plugin *p = reg->plugins.v[j];
        for (size_t k = 0; k < p->n_key_spaces; k++) {
            if (strncmp(key, p->key_spaces[k], strlen(p->key_spaces[k])) != 0) continue;
            key_space_fill(p, k, out);
            return 1;
        }
    }
    return 0;
}

/* A disabled plugin's guard does not count (its groups fall under the
 * host's own protection); one being quiesced for a reload still decides. */
int host_plugins_has_guard(const host_plugins *reg)
{
    for (size_t i = 0; reg != NULL && i < reg->plugins.n; i++) {
        const host_plugin *p = reg->plugins.v[i];
        if (p->has_guard && p->run != HOST_PLUGIN_DISABLED) return 1;
    }
    return 0;
}

const char *host_guard_reason_name(smp_guard_reason r)
{
    switch (r) {
    case SMP_GUARD_BATCH_EVICT: return "batch_evict";
    case SMP_GUARD_QUOTA_EVICT: return "quota_evict";
    case SMP_GUARD_REMOVE_KEY: return "remove_key";
    case SMP_GUARD_REMOVE_ALL: return "remove_all";
    case SMP_GUARD_REMOVE_PATTERN: return "remove_pattern";
    case SMP_GUARD_STALE_PUT_CLEANUP: return "stale_put_cleanup";
    case SMP_GUARD_COLD_EVICT: return "cold_evict";
    case SMP_GUARD_PUT_INTO_GROUP: return "put_into_group";
    case SMP_GUARD_UPSERT_INTO_GROUP: return "upsert_into_group";
    }
    return "unknown";
}

/* A plugin quiescing for a reload counts as active (loaded, not disabled). */
int host_plugins_is_active(const host_plugins *reg, const char *plugin_name)
{
    for (size_t i = 0; reg != NULL && plugin_name != NULL && i < reg->plugins.n; i++) {
        const host_plugin *p = reg->plugins.v[i];
        if (p->desc.name != NULL && strcmp(p->desc.name, plugin_name) == 0)
            return p->run != HOST_PLUGIN_DISABLED;
    }
    return 0;
}

/* Every active guard in scope is asked (each may keep its own statistics);
 * anything but SMP_GUARD_ALLOW vetoes, and one vetoed request counts once.
 * Each call is timed on its own (timing_record). */
int host_plugins_guard_check_owner(host_plugins *reg,
                                   const char *owner,
                                   const smp_guard_request *req,
                                   int *asked)
{
    int verdict = SMP_GUARD_ALLOW, n = 0;
    if (asked != NULL) *asked = 0;
    if (reg == NULL || req == NULL) return SMP_GUARD_VETO;
    for (size_t i = 0; i < reg->plugins.n; i++) {
        host_plugin *p = reg->plugins.v[i];
        if (!p->has_guard || p->run == HOST_PLUGIN_DISABLED) continue;
        if (owner != NULL && (p->desc.name == NULL || strcmp(p->desc.name, owner) != 0)) continue;
        uint64_t start = hp_clock_ns();
        int r = p->guard.check(p->state, req);
        uint64_t took = hp_clock_ns() - start;
        timing_record(p, reg->timing.guard_seconds, reg->timing.guard_overruns, &p->guard_log,
                      "object guard call", took, took > HOST_GUARD_BUDGET_NS, HOST_GUARD_BUDGET_NS,
                      start);
        n++;
        if (r != SMP_GUARD_ALLOW) verdict = SMP_GUARD_VETO;
    }
    if (asked != NULL) *asked = n;
    if (verdict == SMP_GUARD_VETO) {
        const char *values[1] = {host_guard_reason_name(req->reason)};
        host_metric_add(reg->guard_vetoes, values, 1);
    }
    return verdict;
}

int host_plugins_guard_check(host_plugins *reg, const smp_guard_request *req)
{
    return host_plugins_guard_check_owner(reg, NULL, req, NULL);
}

/* The deadline is on the now_ms clock (CLOCK_MONOTONIC, whole ms): the tick
 * overran when that clock reads past it on return. Its budget in the line
 * is the time it had from its start to the deadline (0 when it started
 * late, behind another plugin's tick of the same round). A plugin quiescing
 * or disabled is not called (SMP_TICK_DONE). */
int host_plugins_run_tick(host_plugins *reg, host_tick_reg *t, const smp_tick_budget *b)
{
    if (reg == NULL || t == NULL || b == NULL) return SMP_EINVAL;
    host_plugin *p = t->owner;
    if (p->run != HOST_PLUGIN_ACTIVE) return SMP_TICK_DONE; /* quiescing or disabled: no tick */
    uint64_t start = hp_clock_ns();
    t->running = 1;
    int rc = t->t.tick(p->state, b, &t->cursor);
    t->running = 0;
    uint64_t end = hp_clock_ns();
    uint64_t start_ms = start / 1000000u, end_ms = end / 1000000u;
    uint64_t budget_ms = b->deadline_ms > start_ms ? b->deadline_ms - start_ms : 0;
    timing_record(p, reg->timing.tick_seconds, reg->timing.tick_overruns, &p->tick_log,
                  "reconcile tick", end - start, end_ms > b->deadline_ms, budget_ms * 1000000u,
                  start);
    return rc;
}

void host_plugins_set_timing(host_plugins *reg, const host_plugin_timing *t)
{
    if (reg == NULL) return;
    if (t == NULL) {
        memset(&reg->timing, 0, sizeof(reg->timing));
        return;
    }
    reg->timing = *t;
    for (size_t i = 0; i < reg->plugins.n; i++) {
        host_plugin *p = reg->plugins.v[i];
        const char *values[1] = {hp_str_or(p->desc.name, p->file)};
        if (p->has_tick) {
            host_metric_touch(reg->timing.tick_seconds, values);
            host_metric_touch(reg->timing.tick_overruns, values);
        }
        if (p->has_guard) {
            host_metric_touch(reg->timing.guard_seconds, values);
            host_metric_touch(reg->timing.guard_overruns, values);
        }
    }
}

/* Call every handler whose mask has the event's bit, in registration order,
 * of the active plugins (one quiescing or disabled re-validates on resume).
 * A type outside the mask's 32 bits reaches nobody. */
void host_plugins_emit(host_plugins *reg, const smp_event *ev)
{
    uint32_t bit;
    if (reg == NULL || ev == NULL || (unsigned)ev->type >= 32) return;
    bit = SMP_EVENT_MASK(ev->type);
    for (size_t i = 0; i < reg->handlers.n; i++) {
        const host_event_reg *e = reg->handlers.v[i];
        if ((e->e.mask & bit) && e->owner->run == HOST_PLUGIN_ACTIVE)
            e->e.on_event(e->owner->state, ev);
    }
}

/* A gate is confirmed when the cluster key of that name is a true bool, or
 * (no cluster key of that name) the owner's block has a true bool of that
 * name, or the master confirmed it durably at runtime (the backend's
 * gate_confirmed). NULL gate: nothing to confirm (1). */
int host_plugins_gate_confirmed(const host_plugins *reg, const host_plugin *owner, const char *gate)
{
    smp_config_value v;
    if (gate == NULL) return 1;
    if (reg == NULL) return 0;
    if (host_config_cluster_get(reg->cfg, gate, &v) == SMP_OK) {
        if (v.type == SMP_CONFIG_BOOL && v.b) return 1;
    } else if (owner != NULL && owner->pc != NULL && owner->pc->block != NULL &&
               host_config_node_get(owner->pc->block, gate, &v) == SMP_OK &&
               v.type == SMP_CONFIG_BOOL && v.b) {
        return 1;
    }
    return reg->be.gate_confirmed != NULL && reg->be.gate_confirmed(reg->be.ctx, gate);
}
