/* weightctl_fsck.c -- `weightctl fsck [--deep] [--repair]`: what the nodes
 * hold that nothing owns, and replicas whose file is corrupt.
 *
 * One admin RPC (service 2, ADMIN_FSCK) to the master given by --master.
 * The master has every up node list its cold files and the non-zero bytes
 * of its unoccupied segment ranges, and reports the cold files no replica
 * names and those segment bytes (master_fsck.c). Read-only unless --repair:
 * then the orphan files are deleted and the ranges zeroed, and the report
 * says what was done. Cold files whose header or size is bad but which a
 * replica names are reported as corrupt replicas, with the replica's key;
 * --repair drops those replicas (the file is then deleted, and a weight
 * revision that held one turns DEGRADED, repaired from another replica
 * where there is one). Headers and sizes are read; --deep also reads every
 * cold file's data and checks its SHA-256 (a mismatch is corrupt), and has
 * every memory replica hashed against its object's SHA-256 (a mismatch is
 * a corrupt memory replica, which --repair drops). Also
 * printed: the cold bytes found on disk and the
 * segment's occupied bytes beside the master's cold replica bytes and
 * memory used (the store_replica_bytes{kind="cold"} and
 * store_memory_used_bytes gauges), so a clean store shows them agree.
 * Objects left with no replica at all (a corrupt only replica dropped) are
 * counted and the first 1,000 named: still listed, unreadable until their
 * plugin restores them or they are removed.
 * Exit 0 when nothing is orphaned or corrupt (or --repair removed
 * everything) and no object lacks a replica, 1 when something is (without
 * --repair), an object has no replica, a node could not be checked or the
 * call was refused, 2 on a usage error. --json prints one object. A report
 * names at most the first 10,000 orphan files of a node and counts them all
 * (orphan_files_total).
 * Stale temporary cold files (a write a crash cut off left them; older than
 * a minute) are reported per node -- name, size, age -- and deleted only
 * with --repair (a node deletes them itself only when it starts); plain
 * fsck deletes nothing and exits 1 while there are any. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "host_rpc.pb-c.h"
#include "weightctl.h"

/* The orphan files of n: all of them, of which the report names the first
 * n_orphan_files (a master before orphan_files_total names every one). */
static uint64_t orphan_files(const FsckNode *n)
{
    return n->orphan_files_total > n->n_orphan_files ? n->orphan_files_total : n->n_orphan_files;
}

/* n's stale temporary cold files: each named one, how many more, and what
 * --repair does or did with them. */
static void tmps_text(const FsckNode *n)
{
    if (!n->tmp_checked) {
        if (!n->error[0])
            printf("  temporary cold files: not reported (a master or store_node from before the "
                   "report)\n");
        return;
    }
    for (size_t i = 0; i < n->n_stale_temporaries; i++) {
        const FsckTempFile *f = n->stale_temporaries[i];
        if (f->removed)
            printf("  removed stale temporary cold file %s, %llu bytes, %llu s old\n", f->name,
                   (unsigned long long)f->bytes, (unsigned long long)f->age_s);
        else if (f->error[0])
            printf("  stale temporary cold file %s, %llu bytes, %llu s old: could not delete it: %s\n",
                   f->name, (unsigned long long)f->bytes, (unsigned long long)f->age_s, f->error);
        else
            printf("  stale temporary cold file %s, %llu bytes, %llu s old (a write that did not "
                   "finish)\n", f->name, (unsigned long long)f->bytes, (unsigned long long)f->age_s);
    }
    if (n->stale_temporaries_total > n->n_stale_temporaries)
        printf("  ... and %llu more stale temporary cold files (a report names the first %zu)\n",
               (unsigned long long)(n->stale_temporaries_total - n->n_stale_temporaries),
               n->n_stale_temporaries);
    if (n->stale_temporaries_total > 0)
        printf("  %llu stale temporary cold files, %llu bytes; %llu deleted\n",
               (unsigned long long)n->stale_temporaries_total,
               (unsigned long long)n->stale_temporary_bytes,
               (unsigned long long)n->temporaries_removed);
}

/* n's part of the report; deep: --deep was asked (its memory count shows,
 * 0 included). */
static void node_text(const FsckNode *n, int deep)
{
    uint64_t total = orphan_files(n);
    printf("node %s: %llu cold files, %llu bytes; %llu orphaned\n", n->node,
           (unsigned long long)n->cold_files, (unsigned long long)n->cold_bytes,
           (unsigned long long)total);
    if (n->error[0]) printf("  not %s: %s\n", n->repair_error[0] ? "repaired" : "checked", n->error);
    for (size_t i = 0; i < n->n_orphan_files; i++) {
        const FsckColdFile *f = n->orphan_files[i];
        printf("  orphan cold file %s key %s %llu bytes%s\n", f->name, f->key[0] ? f->key : "?",
               (unsigned long long)f->length, f->corrupt ? " (corrupt)" : "");
    }
    if (total > n->n_orphan_files)
        printf("  ... and %llu more orphan cold files (a report names the first %zu)\n",
               (unsigned long long)(total - n->n_orphan_files), n->n_orphan_files);
    for (size_t i = 0; i < n->n_corrupt_replicas; i++) {
        const FsckColdFile *f = n->corrupt_replicas[i];
        printf("  %s cold file %s: replica of %s%s\n", f->missing ? "missing" : "corrupt", f->name,
               f->key, f->missing ? " (the node has no such file)" : "");
    }
    if (n->replicas_dropped > 0)
        printf("  %llu corrupt replicas dropped\n", (unsigned long long)n->replicas_dropped);
    if (deep || n->memory_replicas_checked > 0)
        printf("  %llu memory replicas hashed\n", (unsigned long long)n->memory_replicas_checked);
    for (size_t i = 0; i < n->n_corrupt_memory_replicas; i++) {
        const FsckMemoryReplica *g = n->corrupt_memory_replicas[i];
        printf("  corrupt memory replica of %s at %s+%llu, %llu bytes%s\n", g->key, n->segment,
               (unsigned long long)g->offset, (unsigned long long)g->length,
               g->only_replica ? " (its only replica: once dropped, the object is unreadable until "
                                 "its plugin repairs it or it is removed)" : "");
    }
    if (n->memory_replicas_dropped > 0)
        printf("  %llu corrupt memory replicas dropped\n", (unsigned long long)n->memory_replicas_dropped);
    tmps_text(n);
    printf("segment %s: %llu of %llu bytes occupied; %llu orphaned bytes in %zu ranges\n",
           n->segment, (unsigned long long)n->segment_used, (unsigned long long)n->segment_capacity,
           (unsigned long long)n->orphan_segment_bytes, n->n_orphan_ranges);
    for (size_t i = 0; i < n->n_orphan_ranges; i++)
        printf("  orphan segment bytes at %llu, %llu bytes\n",
               (unsigned long long)n->orphan_ranges[i]->offset,
               (unsigned long long)n->orphan_ranges[i]->length);
}

static void node_json(const FsckNode *n)
{
    printf("{\"node\":");
    wctl_json_str(n->node);
    printf(",\"error\":");
    wctl_json_str(n->error);
    printf(",\"in_repair\":%s", n->repair_error[0] ? "true" : "false");
    printf(",\"cold_files\":%llu,\"cold_bytes\":%llu,\"orphan_files\":[",
           (unsigned long long)n->cold_files, (unsigned long long)n->cold_bytes);
    for (size_t i = 0; i < n->n_orphan_files; i++) {
        const FsckColdFile *f = n->orphan_files[i];
        printf("%s{\"name\":", i ? "," : "");
        wctl_json_str(f->name);
        printf(",\"key\":");
        wctl_json_str(f->key);
        printf(",\"bytes\":%llu,\"corrupt\":%s}", (unsigned long long)f->length,
               f->corrupt ? "true" : "false");
    }
    printf("],\"orphan_files_total\":%llu,\"segment\":", (unsigned long long)orphan_files(n));
    wctl_json_str(n->segment);
    printf(",\"segment_capacity\":%llu,\"segment_used\":%llu,\"orphan_segment_bytes\":%llu,"
           "\"orphan_ranges\":[",
           (unsigned long long)n->segment_capacity, (unsigned long long)n->segment_used,
           (unsigned long long)n->orphan_segment_bytes);
    for (size_t i = 0; i < n->n_orphan_ranges; i++)
        printf("%s{\"offset\":%llu,\"bytes\":%llu}", i ? "," : "",
               (unsigned long long)n->orphan_ranges[i]->offset,
               (unsigned long long)n->orphan_ranges[i]->length);
    printf("],\"corrupt_replicas\":[");
    for (size_t i = 0; i < n->n_corrupt_replicas; i++) {
        printf("%s{\"name\":", i ? "," : "");
        wctl_json_str(n->corrupt_replicas[i]->name);
        printf(",\"key\":");
        wctl_json_str(n->corrupt_replicas[i]->key);
        printf(",\"missing\":%s}", n->corrupt_replicas[i]->missing ? "true" : "false");
    }
    printf("],\"corrupt_memory_replicas\":[");
    for (size_t i = 0; i < n->n_corrupt_memory_replicas; i++) {
        printf("%s{\"key\":", i ? "," : "");
        wctl_json_str(n->corrupt_memory_replicas[i]->key);
        printf(",\"offset\":%llu,\"bytes\":%llu,\"only_replica\":%s}",
               (unsigned long long)n->corrupt_memory_replicas[i]->offset,
               (unsigned long long)n->corrupt_memory_replicas[i]->length,
               n->corrupt_memory_replicas[i]->only_replica ? "true" : "false");
    }
    printf("],\"memory_replicas_checked\":%llu,\"files_removed\":%llu,\"segment_bytes_zeroed\":%llu,"
           "\"skipped_in_use\":%llu,\"replicas_dropped\":%llu,\"memory_replicas_dropped\":%llu",
           (unsigned long long)n->memory_replicas_checked, (unsigned long long)n->files_removed,
           (unsigned long long)n->segment_bytes_zeroed, (unsigned long long)n->skipped_in_use,
           (unsigned long long)n->replicas_dropped, (unsigned long long)n->memory_replicas_dropped);
    printf(",\"temporaries_checked\":%s,\"stale_temporaries\":[",
           n->tmp_checked ? "true" : "false");
    for (size_t i = 0; i < n->n_stale_temporaries; i++) {
        const FsckTempFile *f = n->stale_temporaries[i];
        printf("%s{\"name\":", i ? "," : "");
        wctl_json_str(f->name);
        printf(",\"bytes\":%llu,\"age_s\":%llu,\"removed\":%s,\"error\":",
               (unsigned long long)f->bytes, (unsigned long long)f->age_s,
               f->removed ? "true" : "false");
        wctl_json_str(f->error);
        putchar('}');
    }
    printf("],\"stale_temporaries_total\":%llu,\"stale_temporary_bytes\":%llu,"
           "\"temporaries_removed\":%llu",
           (unsigned long long)n->stale_temporaries_total,
           (unsigned long long)n->stale_temporary_bytes, (unsigned long long)n->temporaries_removed);
    putchar('}');
}

/* The objects with no replica left: counted, the first named. */
static void lost_text(const FsckReport *rep)
{
    uint64_t lost = rep->objects_without_replica;
    if (lost == 0) return;
    printf("%llu objects have no replica left: unreadable until their plugin restores them or "
           "they are removed (`weightctl kv rm KEY`; a weight revision's members with `weightctl rm` "
           "of the revision)\n",
           (unsigned long long)lost);
    for (size_t i = 0; i < rep->n_objects_without_replica_keys; i++)
        printf("  no replica: %s\n", rep->objects_without_replica_keys[i]);
    if (lost > rep->n_objects_without_replica_keys)
        printf("  ... and %llu more (a report names the first %zu)\n",
               (unsigned long long)(lost - rep->n_objects_without_replica_keys),
               rep->n_objects_without_replica_keys);
}

int wctl_cmd_fsck(ctl *x, int argc, char **argv)
{
    static const struct option opts[] = {{"repair", no_argument, NULL, 'r'},
                                         {"deep", no_argument, NULL, 'd'},
                                         {NULL, 0, NULL, 0}};
    int c, repair = 0, deep = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == 'r') repair = 1;
        else if (c == 'd') deep = 1;
        else return wctl_opt_error("fsck", c, argv);
    }
    if (optind != argc) return wctl_bad_usage("fsck", "takes no operand");
    FsckRequest req = FSCK_REQUEST__INIT;
    FsckReport *rep = NULL;
    req.repair = repair;
    req.deep = deep;
    if (wctl_admin_call(x, "fsck", ADMIN_METHOD__ADMIN_FSCK, &req.base, &fsck_report__descriptor,
                        (ProtobufCMessage **)&rep) != 0)
        return 1;
    uint64_t orphans = 0, corrupt = 0, cold = 0, used = 0, tmps = 0, tmps_removed = 0;
    uint64_t lost = rep->objects_without_replica;
    int unchecked = rep->nodes_down > 0;
    for (size_t i = 0; i < rep->n_nodes; i++) {
        const FsckNode *n = rep->nodes[i];
        orphans += orphan_files(n) + n->n_orphan_ranges;
        corrupt += n->n_corrupt_replicas + n->n_corrupt_memory_replicas;
        cold += n->cold_bytes;
        used += n->segment_used;
        tmps += n->stale_temporaries_total;
        tmps_removed += n->temporaries_removed;
        unchecked |= n->error[0] != '\0'; /* a failed deletion or zeroing too */
    }
    if (x->json) {
        printf("{\"repair\":%s,\"nodes\":[", repair ? "true" : "false");
        for (size_t i = 0; i < rep->n_nodes; i++) {
            if (i) putchar(',');
            node_json(rep->nodes[i]);
        }
        printf("],\"nodes_down\":%u,\"cold_bytes_on_disk\":%llu,\"cold_replica_bytes\":%llu,"
               "\"segment_used_bytes\":%llu,\"memory_used_bytes\":%llu,\"orphans\":%llu,"
               "\"corrupt_replicas\":%llu,\"objects_without_replica\":%llu,"
               "\"objects_without_replica_keys\":[",
               rep->nodes_down, (unsigned long long)cold, (unsigned long long)rep->cold_replica_bytes,
               (unsigned long long)used, (unsigned long long)rep->memory_used,
               (unsigned long long)orphans, (unsigned long long)corrupt, (unsigned long long)lost);
        for (size_t i = 0; i < rep->n_objects_without_replica_keys; i++) {
            if (i) putchar(',');
            wctl_json_str(rep->objects_without_replica_keys[i]);
        }
        printf("],\"stale_temporaries\":%llu,\"temporaries_removed\":%llu}\n",
               (unsigned long long)tmps, (unsigned long long)tmps_removed);
    } else {
        for (size_t i = 0; i < rep->n_nodes; i++) node_text(rep->nodes[i], deep);
        if (rep->nodes_down > 0)
            printf("%u nodes holding a segment are not up: not checked\n", rep->nodes_down);
        printf("cold bytes on disk %llu, cold replica bytes %llu; segment bytes occupied %llu, "
               "memory used %llu\n",
               (unsigned long long)cold, (unsigned long long)rep->cold_replica_bytes,
               (unsigned long long)used, (unsigned long long)rep->memory_used);
        lost_text(rep);
        if (tmps > 0 && !repair)
            printf("%llu stale temporary cold files (writes that did not finish left them; nothing "
                   "was deleted): `weightctl fsck --repair` deletes them\n", (unsigned long long)tmps);
        else if (tmps > 0)
            printf("%llu of %llu stale temporary cold files deleted\n",
                   (unsigned long long)tmps_removed, (unsigned long long)tmps);
        if (orphans == 0 && corrupt == 0 && tmps > 0) {
            /* said just above */
        } else if (orphans == 0 && corrupt == 0) {
            /* else said by lost_text; a node not checked keeps it from being clean */
            if (lost == 0) printf(unchecked ? "clean where checked (exit 1: not everything was)\n" : "clean\n");
        }
        else if (!repair && corrupt == 0) printf("%llu orphans; `weightctl fsck --repair` removes them\n",
                                                 (unsigned long long)orphans);
        else if (!repair) printf("%llu orphans, %llu corrupt replicas; `weightctl fsck --repair` "
                                 "removes the orphans and drops the corrupt replicas\n",
                                 (unsigned long long)orphans, (unsigned long long)corrupt);
        else if (!unchecked && corrupt == 0) printf("repaired: %llu orphans removed\n",
                                                    (unsigned long long)orphans);
        else if (!unchecked) printf("repaired: %llu orphans removed, %llu corrupt replicas dropped\n",
                                    (unsigned long long)orphans, (unsigned long long)corrupt);
    }
    fsck_report__free_unpacked(rep, NULL);
    if (unchecked || lost > 0) return 1;
    if (repair) return tmps_removed < tmps ? 1 : 0; /* a temporary left is said above */
    return orphans == 0 && corrupt == 0 && tmps == 0 ? 0 : 1;
}
