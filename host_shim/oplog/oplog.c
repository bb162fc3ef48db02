/* oplog.c -- the backend-neutral face of the OpLog.
 *
 * Checks the arguments every backend would check the same way and dispatches
 * to the backend's ops table. Nothing here knows how records are stored; the
 * contracts are in oplog.h. */
#include <stdio.h>

#include "oplog.h"

int oplog_replay(oplog *log,
                 uint64_t after_seq,
                 oplog_replay_fn fn,
                 void *arg,
                 char *err,
                 size_t errlen)
{
    if (log == NULL || fn == NULL) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "oplog: replay needs a log and a callback");
        return SMP_EINVAL;
    }
    return log->ops->replay(log, after_seq, fn, arg, err, errlen);
}

int oplog_append(oplog *log,
                 uint16_t type,
                 uint16_t encver,
                 const void *payload,
                 size_t len,
                 oplog_durable_fn cb,
                 void *arg,
                 uint64_t *out_seq)
{
    if (log == NULL || (payload == NULL && len > 0))
        return SMP_EINVAL;
    return log->ops->append(log, type, encver, payload, len, cb, arg, out_seq);
}

uint64_t oplog_last_seq(const oplog *log)
{
    return log == NULL ? 0 : log->ops->last_seq(log);
}

uint64_t oplog_durable_seq(const oplog *log)
{
    return log == NULL ? 0 : log->ops->durable_seq(log);
}

int oplog_truncate_before(oplog *log, uint64_t seq)
{
    if (log == NULL)
        return SMP_EINVAL;
    return log->ops->truncate_before(log, seq);
}

uint64_t oplog_first_seq(const oplog *log)
{
    return log != NULL && log->ops->first_seq != NULL ? log->ops->first_seq(log) : 0;
}

void oplog_stats_get(const oplog *log, oplog_stats *out)
{
    if (out == NULL)
        return;
    if (log == NULL) {
        *out = (oplog_stats){0};
        return;
    }
    log->ops->stats(log, out);
}

void oplog_close(oplog *log)
{
    if (log != NULL)
        log->ops->close(log);
}
