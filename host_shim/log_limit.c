/* log_limit.c -- at most a few log lines a window (log_limit.h). */
#include "log_limit.h"

int log_limit_admit(log_limit *l, uint64_t now_ms, uint64_t *summary)
{
    *summary = 0;
    if (!l->open || now_ms - l->began_ms >= l->window_ms) {
        *summary = log_limit_flush(l);
        l->open = 1;
        l->began_ms = now_ms;
        l->logged = 0;
    }
    if (l->logged >= l->burst) {
        l->left_out++;
        return 0;
    }
    l->logged++;
    return 1;
}

uint64_t log_limit_flush(log_limit *l)
{
    uint64_t n = l->left_out;
    l->left_out = 0;
    return n;
}
