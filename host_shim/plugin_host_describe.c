/* plugin_host_describe.c -- what the plugins negotiated, as text.
 *
 * host_plugins_describe prints the host's ABI and capabilities, one block
 * per plugin (ABI, capabilities, OpLog types with gates, sections, guard,
 * tick, RPC services, events, metrics, key spaces) and the capability gates: what
 * `store_master --check` shows. The format is pinned by test_plugin_load
 * and test_check; change it only by appending lines. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "plugin_host_internal.h"

static const char *const host_cap_names[] = {
    "groups", "cold_tier", "durable_oplog", "ha_standby", "rpc_dispatch", "metrics", "state_handoff",
};
static const char *const plugin_cap_names[] = {"object_guard", "hot_reload", "weights", "lineage"};
static const char *const event_names[] = {
    NULL, "object_completed", "replica_lost", "node_up", "node_down", "memory_pressure", "role_change",
    "read_miss",
};

/* "0x<hex> (name,name,bit40)" -- or "(-)" when no bit is set. */
static void print_bits(FILE *out, uint64_t bits, const char *const *names, size_t n_names)
{
    int first = 1;
    fprintf(out, "0x%" PRIx64 " (", bits);
    for (unsigned b = 0; b < 64; b++) {
        if (!(bits & (UINT64_C(1) << b))) continue;
        fputs(first ? "" : ",", out);
        if (b < n_names && names[b] != NULL) fputs(names[b], out);
        else fprintf(out, "bit%u", b);
        first = 0;
    }
    fputs(first ? "-)" : ")", out);
}

/* One plugin: name and version, path, ABI and tag, capabilities in hex and
 * by name, then its OpLog types, sections, guard, tick, RPC services, event
 * mask, metric families and claimed key spaces (ABI 1.9), each on its own
 * line in registration order. */
static void describe_plugin(const host_plugins *reg, const host_plugin *p, FILE *out)
{
    uint32_t mask = 0;
    int any_tick = 0;
    const smp_plugin_desc *d = &p->desc;

    fprintf(out, "plugin %s %s\n", hp_str_or(d->name, "?"), hp_str_or(d->version, "?"));
    fprintf(out, "  path %s\n", p->path);
    fprintf(out, "  abi %u.%u (host %u.%u) tag 0x%08" PRIx32 "\n", (unsigned)d->abi_major,
            (unsigned)d->abi_minor, (unsigned)SMP_ABI_MAJOR, (unsigned)SMP_ABI_MINOR, d->abi_tag);
    fputs("  required host caps ", out);
    print_bits(out, d->required_host_caps, host_cap_names, 7);
    fputs("\n  optional host caps ", out);
    print_bits(out, d->optional_host_caps, host_cap_names, 7);
    fputs("\n  plugin caps ", out);
    print_bits(out, d->plugin_caps, plugin_cap_names, 4);
    fputs("\n", out);
    for (size_t i = 0; i < reg->types.n; i++) {
        const host_oplog_type_reg *t = reg->types.v[i];
        if (t->owner != p) continue;
        fprintf(out, "  type %u %s encver %u..%u gate %s\n", (unsigned)t->t.type, t->t.name,
                (unsigned)t->t.min_encver, (unsigned)t->t.max_encver, hp_str_or(t->t.gate, "-"));
    }
    for (size_t i = 0; i < reg->sections.n; i++) {
        const host_section_reg *s = reg->sections.v[i];
        if (s->owner == p) fprintf(out, "  section %s encver %u\n", s->s.name, (unsigned)s->s.encver);
    }
    fprintf(out, "  guard %s\n", p->has_guard ? "yes" : "no");
    for (size_t i = 0; i < reg->ticks.n; i++) {
        const host_tick_reg *t = reg->ticks.v[i];
        if (t->owner != p) continue;
        fprintf(out, "  tick period %" PRIu32 " ms leader_only %s\n", t->t.period_ms,
                t->t.leader_only ? "yes" : "no");
        any_tick = 1;
    }
    if (!any_tick) fputs("  tick no\n", out);
    for (size_t i = 0; i < reg->rpcs.n; i++) {
        const host_rpc_reg *r = reg->rpcs.v[i];
        if (r->owner != p) continue;
        fprintf(out, "  rpc service %u %s methods", (unsigned)r->s.service_id, r->s.name);
        for (size_t m = 0; m < r->s.n_methods; m++)
            fprintf(out, " %u:%s", (unsigned)r->s.methods[m].method_id, r->s.methods[m].name);
        fputs(r->s.n_methods == 0 ? " -\n" : "\n", out);
    }
    for (size_t i = 0; i < reg->handlers.n; i++) {
        const host_event_reg *e = reg->handlers.v[i];
        if (e->owner == p) mask |= e->e.mask;
    }
    fputs("  events ", out);
    print_bits(out, mask, event_names, 8);
    fputs("\n", out);
    for (size_t i = 0; i < p->n_metrics; i++)
        fprintf(out, "  metric %s\n", p->metrics[i].name);
    for (size_t i = 0; i < p->n_key_spaces; i++)
        fprintf(out, "  key space %s\n", p->key_spaces[i]);
}

/* A header line with the host's ABI and capabilities, then one block per
 * plugin in load order (see describe_plugin). The format is pinned by
 * test_plugin_load and read by store_master --check users: change it only
 * by appending lines. */
/* One line per capability gate the registered types name: the types it
 * guards and where it stands by this config (a runtime confirmation lives in
 * the OpLog, which --check does not read: `weightctl status` shows it). */
static void describe_gates(const host_plugins *reg, FILE *out)
{
    const char *seen[64];
    size_t n = 0;
    for (size_t i = 0; i < reg->types.n && n < 64; i++) {
        const host_oplog_type_reg *t = reg->types.v[i];
        int dup = t->t.gate == NULL;
        for (size_t k = 0; k < n && !dup; k++) dup = strcmp(seen[k], t->t.gate) == 0;
        if (!dup) seen[n++] = t->t.gate;
    }
    fprintf(out, "gates %zu\n", n);
    for (size_t k = 0; k < n; k++) {
        const host_plugin *owner = NULL;
        fprintf(out, "  gate %s types", seen[k]);
        for (size_t i = 0; i < reg->types.n; i++) {
            const host_oplog_type_reg *t = reg->types.v[i];
            if (t->t.gate == NULL || strcmp(t->t.gate, seen[k]) != 0) continue;
            fprintf(out, " %u", (unsigned)t->t.type);
            owner = t->owner;
        }
        if (!reg->cfg->ha_enabled)
            fprintf(out, ": not enforced (ha.enabled is false)\n");
        else if (host_plugins_gate_confirmed(reg, owner, seen[k]))
            fprintf(out, ": confirmed in config\n");
        else
            fprintf(out, ": closed in config: the leader refuses these types until every master "
                         "replays them and `weightctl gate confirm %s` (status names who blocks "
                         "it)\n", seen[k]);
    }
}

void host_plugins_describe(const host_plugins *reg, FILE *out)
{
    if (reg == NULL || out == NULL) return;
    fprintf(out, "host abi %u.%u tag 0x%08" PRIx32 " caps ", (unsigned)SMP_ABI_MAJOR,
            (unsigned)SMP_ABI_MINOR, (uint32_t)SMP_ABI_TAG);
    print_bits(out, hp_offered_caps(reg), host_cap_names, 7);
    fprintf(out, "\nplugins %zu\n", reg->plugins.n);
    for (size_t i = 0; i < reg->plugins.n; i++) describe_plugin(reg, reg->plugins.v[i], out);
    describe_gates(reg, out);
}
