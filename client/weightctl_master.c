/* weightctl_master.c -- see weightctl_master.h. Moved out of
 * main_weightctl.c as it was; the commands that talk to libweightclient
 * stay there. */
#include "weightctl_master.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

int wctl_parse_global(ctl *x, int argc, char **argv)
{
    static const struct option opts[] = {
        {"master", required_argument, NULL, 'm'},
        {"tenant", required_argument, NULL, 'T'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    x->master = getenv("WEIGHTCTL_MASTER");
    if (x->master == NULL || x->master[0] == '\0') x->master = WEIGHTCTL_DEFAULT_MASTER;
    x->tenant = getenv("WEIGHTCTL_TENANT");
    while ((c = getopt_long(argc, argv, "+m:T:jh", opts, NULL)) != -1) {
        switch (c) {
        case 'm': x->master = optarg; break;
        case 'T': x->tenant = optarg; break;
        case 'j': x->json = 1; break;
        case 'h': return WCTL_HELP;
        default: return WCTL_USAGE;
        }
    }
    return optind;
}

int wctl_connect_master(ctl *x)
{
    char err[512];
    if (kvc_connect(x->master, 10000, &x->c, err, sizeof(err)) < 0) {
        fprintf(stderr, "weightctl: cannot reach the master at %s: %s\n", x->master, err);
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

int wctl_cmd_status(ctl *x)
{
    kvc_status st;
    if (kvc_status_get(x->c, &st) < 0) {
        fprintf(stderr, "weightctl: status: %s\n", kvc_error(x->c));
        return 1;
    }
    if (x->json) {
        printf("{\"role\":");
        wctl_json_str(st.role);
        printf(",\"nodes\":%u,\"segments\":%u,\"memory_capacity\":%llu,\"memory_used\":%llu,"
               "\"objects\":%llu,\"oplog_last_seq\":%llu,\"snapshot_seq\":%llu}\n",
               st.nodes, st.segments, (unsigned long long)st.memory_capacity,
               (unsigned long long)st.memory_used, (unsigned long long)st.objects,
               (unsigned long long)st.oplog_last_seq, (unsigned long long)st.snapshot_seq);
        return 0;
    }
    double pct = st.memory_capacity ? 100.0 * (double)st.memory_used / (double)st.memory_capacity : 0;
    printf("master    %s (%s)\n", x->master, st.role);
    printf("nodes     %u\n", st.nodes);
    printf("segments  %u\n", st.segments);
    printf("memory    %llu of %llu bytes used (%.1f%%)\n", (unsigned long long)st.memory_used,
           (unsigned long long)st.memory_capacity, pct);
    printf("objects   %llu\n", (unsigned long long)st.objects);
    printf("oplog     seq %llu, snapshot at %llu\n", (unsigned long long)st.oplog_last_seq,
           (unsigned long long)st.snapshot_seq);
    return 0;
}
