/* main_store_master.c -- the store_master program.
 *
 * Parses the command line, loads the config strictly, and either checks it
 * as a start would -- the files it names, the enabled plugins -- and
 * reports what was negotiated (--check) or runs the
 * master until SIGINT or SIGTERM. Every failure prints its cause on stderr
 * and exits non-zero; nothing starts half-configured. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "master.h"
#include "metrics.h"
#include "plugin_host.h"

/* Marks a start as the re-execution of a master that asked to start over
 * (MASTER_EXIT_RESTART); removed from the environment at once. */
#define RESTART_ENV "STORE_MASTER_RESTARTED"

static void usage(FILE *out, const char *prog)
{
    fprintf(out,
            "usage: %s --config FILE [--check]\n"
            "  --config FILE  the master's YAML config (see config/README.md)\n"
            "  --check        parse the config, read the files it names (TLS, the\n"
            "                 node's token) as a start would, load the enabled\n"
            "                 plugins, print what was negotiated, and exit\n"
            "  SIGHUP reloads: the TLS files (tls.*, ha.etcd_tls_*) for the next\n"
            "  connections, every plugin from its path, the embedded node's ticket key\n"
            "  SIGTERM or SIGINT stops gracefully\n",
            prog);
}

/* --check: the config parsed; read the files it names as the start does
 * (host_config_load_files), load the plugins, describe them, unload. */
static int check(const host_config *cfg)
{
    char err[1024] = "";
    host_config_files files = {0};
    host_metrics *metrics = NULL;
    host_plugins *plugins = NULL;
    int rc = host_config_load_files(cfg, &files, err, sizeof(err));
    if (rc < 0) goto out;
    host_config_files_free(&files); /* read and checked: nothing here serves */
    if ((rc = host_metrics_create(&metrics)) < 0) goto out;
    host_backend caps_only = {.host_caps = MASTER_HOST_CAPS};
    if ((rc = host_plugins_create(&plugins, cfg, metrics, &caps_only)) < 0) goto free_metrics;
    if ((rc = host_plugins_load_all(plugins, err, sizeof(err))) < 0) goto free_plugins;
    printf("config %s: ok\n", cfg->source);
    host_plugins_describe(plugins, stdout);
free_plugins:
    host_plugins_destroy(plugins);
free_metrics:
    host_metrics_destroy(metrics);
out:
    if (rc < 0) fprintf(stderr, "store_master: %s\n", err[0] != '\0' ? err : smp_strerror(rc));
    return rc < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"check", no_argument, NULL, 'k'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *config_path = NULL;
    int check_only = 0;
    int c;
    while ((c = getopt_long(argc, argv, "c:kh", opts, NULL)) != -1) {
        switch (c) {
        case 'c': config_path = optarg; break;
        case 'k': check_only = 1; break;
        case 'h': usage(stdout, argv[0]); return 0;
        default: usage(stderr, argv[0]); return 2;
        }
    }
    if (config_path == NULL || optind != argc) {
        usage(stderr, argv[0]);
        return 2;
    }

    /* Set by the re-execution below, for that one start only. */
    int restarted = getenv(RESTART_ENV) != NULL;
    unsetenv(RESTART_ENV);
    host_config cfg;
    char err[1024];
    if (host_config_load(config_path, &cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "store_master: %s\n", err);
        return 1;
    }
    int status = check_only ? check(&cfg) : master_main(&cfg, restarted);
    host_config_free(&cfg);
    if (status == MASTER_EXIT_RESTART) {
        /* Deposed HA leader, or a standby the log left behind: start over
         * from the newest snapshot with the same arguments (and pid). */
        fflush(NULL);
        setenv(RESTART_ENV, "1", 1);
        execv("/proc/self/exe", argv);
        fprintf(stderr, "store_master: cannot restart: %s\n", strerror(errno));
        return 1;
    }
    return status;
}
