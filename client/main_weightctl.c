/* main_weightctl.c -- weightctl, the operator's and user's command line.
 *
 * Subcommands map to the master's services: `status` (role, nodes, segments,
 * capacity and use; exit 0 only when the master answers) and the plain object
 * store commands `kv put KEY FILE`, `kv get KEY FILE`, `kv ls [PREFIX]` and
 * `kv rm KEY` (bytes go straight to and from the node's segment: mapped when
 * the node is on this host, over its data server otherwise). The master address
 * defaults to the one config/embedded.yaml listens on, so `make run` and then
 * `weightctl status` need no flags; --master or $WEIGHTCTL_MASTER override it.
 * `--json` prints machine-readable output. Failures print the cause on stderr
 * and exit 1 (2 for usage errors). */
#include <fcntl.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "kv_client.h"

/* Must match listen.tcp of config/embedded.yaml (a test checks it). */
#define WEIGHTCTL_DEFAULT_MASTER "127.0.0.1:7600"

typedef struct ctl {
    const char *master;
    int json;
    kvc *c;
} ctl;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: weightctl [--master ADDR] [--json] COMMAND ...\n"
            "  status                 the master's role, nodes, segments, capacity and use\n"
            "  kv put KEY FILE        store FILE's bytes as object KEY\n"
            "  kv get KEY FILE        write object KEY's bytes (checked) to FILE\n"
            "  kv ls [PREFIX]         list object keys\n"
            "  kv rm KEY              remove an object\n"
            "ADDR is host:port or a Unix socket path (default %s, or $WEIGHTCTL_MASTER)\n",
            WEIGHTCTL_DEFAULT_MASTER);
}

static int connect_master(ctl *x)
{
    char err[512];
    if (kvc_connect(x->master, 10000, &x->c, err, sizeof(err)) < 0) {
        fprintf(stderr, "weightctl: cannot reach the master at %s: %s\n", x->master, err);
        return -1;
    }
    return 0;
}

/* Print a JSON string literal. */
static void json_str(const char *s)
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

static int cmd_status(ctl *x)
{
    kvc_status st;
    if (kvc_status_get(x->c, &st) < 0) {
        fprintf(stderr, "weightctl: status: %s\n", kvc_error(x->c));
        return 1;
    }
    if (x->json) {
        printf("{\"role\":");
        json_str(st.role);
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

static int cmd_kv_ls(ctl *x, const char *prefix)
{
    char cursor[2048] = "";
    int first = 1;
    if (x->json) printf("[");
    for (;;) {
        char **keys = NULL, *next = NULL;
        size_t n = 0;
        if (kvc_list(x->c, prefix, cursor, 1000, &keys, &n, &next) < 0) {
            if (x->json) printf("]\n");
            fprintf(stderr, "weightctl: kv ls: %s\n", kvc_error(x->c));
            return 1;
        }
        for (size_t i = 0; i < n; i++) {
            if (x->json) {
                if (!first) putchar(',');
                json_str(keys[i]);
            } else {
                puts(keys[i]);
            }
            first = 0;
        }
        snprintf(cursor, sizeof(cursor), "%s", next);
        kvc_list_free(keys, n, next);
        if (cursor[0] == '\0') break;
    }
    if (x->json) printf("]\n");
    return 0;
}

static int cmd_kv_put(ctl *x, const char *key, const char *path)
{
    struct stat st;
    int fd = open(path, O_RDONLY);
    if (fd < 0 || fstat(fd, &st) < 0) {
        perror(path);
        if (fd >= 0) close(fd);
        return 1;
    }
    size_t len = (size_t)st.st_size;
    void *data = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : (void *)"";
    close(fd);
    if (data == MAP_FAILED) {
        perror(path);
        return 1;
    }
    int rc = kvc_put_bytes(x->c, key, data, len, SMP_DATA_KV, NULL, 0, NULL);
    if (len) munmap(data, len);
    if (rc < 0) {
        fprintf(stderr, "weightctl: kv put %s: %s\n", key, kvc_error(x->c));
        return 1;
    }
    if (x->json) printf("{\"key\":\"%s\",\"bytes\":%zu}\n", key, len);
    return 0;
}

static int cmd_kv_get(ctl *x, const char *key, const char *path)
{
    kvc_object obj;
    uint64_t len = 0;
    if (kvc_get(x->c, key, &obj) < 0) {
        fprintf(stderr, "weightctl: kv get %s: %s\n", key, kvc_error(x->c));
        return 1;
    }
    void *buf = malloc(obj.size ? obj.size : 1);
    if (buf == NULL) {
        fprintf(stderr, "weightctl: kv get %s: out of memory\n", key);
        return 1;
    }
    int rc = kvc_get_into(x->c, key, buf, obj.size, &len, 1);
    if (rc < 0) {
        fprintf(stderr, "weightctl: kv get %s: %s\n", key, kvc_error(x->c));
        free(buf);
        return 1;
    }
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(buf, 1, len, f) == len;
    if (f && fclose(f) != 0) ok = 0;
    free(buf);
    if (!ok) {
        perror(path);
        return 1;
    }
    if (x->json) printf("{\"key\":\"%s\",\"bytes\":%llu}\n", key, (unsigned long long)len);
    return 0;
}

static int cmd_kv_rm(ctl *x, const char *key)
{
    if (kvc_remove(x->c, key) < 0) {
        fprintf(stderr, "weightctl: kv rm %s: %s\n", key, kvc_error(x->c));
        return 1;
    }
    if (x->json) printf("{\"removed\":true}\n");
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"master", required_argument, NULL, 'm'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    ctl x = {0};
    int c;
    x.master = getenv("WEIGHTCTL_MASTER");
    if (x.master == NULL || x.master[0] == '\0') x.master = WEIGHTCTL_DEFAULT_MASTER;
    while ((c = getopt_long(argc, argv, "+m:jh", opts, NULL)) != -1) {
        switch (c) {
        case 'm': x.master = optarg; break;
        case 'j': x.json = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    int nargs = argc - optind;
    char **args = argv + optind;
    if (nargs < 1) {
        usage(stderr);
        return 2;
    }
    int status = 2;
    if (strcmp(args[0], "status") == 0 && nargs == 1) {
        status = connect_master(&x) < 0 ? 1 : cmd_status(&x);
    } else if (strcmp(args[0], "kv") == 0 && nargs >= 2 && strcmp(args[1], "ls") == 0 && nargs <= 3) {
        status = connect_master(&x) < 0 ? 1 : cmd_kv_ls(&x, nargs == 3 ? args[2] : "");
    } else if (strcmp(args[0], "kv") == 0 && nargs == 4 && strcmp(args[1], "put") == 0) {
        status = connect_master(&x) < 0 ? 1 : cmd_kv_put(&x, args[2], args[3]);
    } else if (strcmp(args[0], "kv") == 0 && nargs == 4 && strcmp(args[1], "get") == 0) {
        status = connect_master(&x) < 0 ? 1 : cmd_kv_get(&x, args[2], args[3]);
    } else if (strcmp(args[0], "kv") == 0 && nargs == 3 && strcmp(args[1], "rm") == 0) {
        status = connect_master(&x) < 0 ? 1 : cmd_kv_rm(&x, args[2]);
    } else {
        usage(stderr);
    }
    kvc_close(x.c);
    return status;
}
