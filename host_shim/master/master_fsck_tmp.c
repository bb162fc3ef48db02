/* master_fsck_tmp.c -- fsck's report of a node's stale temporary cold files
 * (master_fsck_tmp.h). */
#include <stdlib.h>
#include <string.h>

#include "host_rpc.pb-c.h"
#include "master_fsck_tmp.h"
#include "node_rpc.pb-c.h"
#include "store_plugin.h"

int master_fsck_tmps_take(master_fsck_tmps *t, const TaskResult *res)
{
    if (!res->tmp_reported) return SMP_OK;
    master_fsck_tmps_free(t);
    t->checked = 1;
    t->total = res->stale_tmps_total;
    t->bytes = res->stale_tmp_bytes_total;
    t->removed = res->stale_tmps_removed;
    if (res->n_stale_tmps == 0) return SMP_OK;
    if ((t->v = calloc(res->n_stale_tmps, sizeof(*t->v))) == NULL) return SMP_ENOMEM;
    for (size_t i = 0; i < res->n_stale_tmps; i++) {
        const StaleTempFile *f = res->stale_tmps[i];
        master_fsck_tmp *d = &t->v[t->n];
        d->name = strdup(f->name);
        d->error = strdup(f->error);
        if (d->name == NULL || d->error == NULL) {
            free(d->name);
            free(d->error);
            return SMP_ENOMEM;
        }
        d->bytes = f->bytes;
        d->age_s = f->age_s;
        d->removed = f->removed;
        t->n++;
    }
    return SMP_OK;
}

void master_fsck_tmps_report(const master_fsck_tmps *t, FsckNode *o)
{
    o->tmp_checked = t->checked != 0;
    o->stale_temporaries_total = t->total;
    o->stale_temporary_bytes = t->bytes;
    o->temporaries_removed = t->removed;
    if (t->n == 0 || (o->stale_temporaries = calloc(t->n, sizeof(FsckTempFile *))) == NULL) return;
    for (size_t k = 0; k < t->n; k++) {
        FsckTempFile *f = malloc(sizeof(*f));
        if (f == NULL) break;
        fsck_temp_file__init(f);
        f->name = t->v[k].name;
        f->bytes = t->v[k].bytes;
        f->age_s = t->v[k].age_s;
        f->removed = t->v[k].removed;
        f->error = t->v[k].error;
        o->stale_temporaries[o->n_stale_temporaries++] = f;
    }
}

void master_fsck_tmps_report_free(FsckNode *o)
{
    for (size_t k = 0; k < o->n_stale_temporaries; k++) free(o->stale_temporaries[k]);
    free(o->stale_temporaries);
    o->stale_temporaries = NULL;
    o->n_stale_temporaries = 0;
}

void master_fsck_tmps_free(master_fsck_tmps *t)
{
    for (size_t k = 0; k < t->n; k++) {
        free(t->v[k].name);
        free(t->v[k].error);
    }
    free(t->v);
    memset(t, 0, sizeof(*t));
}
