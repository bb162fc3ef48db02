/* weightctl_plugin.c -- `weightctl plugin ...`: the master's loaded plugins.
 *
 *   plugin list                      name, version, state, ABI, reloadable,
 *                                    reloads, library path
 *   plugin reload NAME [--path SO]   reload NAME in place (from SO, else the
 *                                    library it was loaded from); waits for
 *                                    the end: the new version, the master's
 *                                    wall time and how long calls were held.
 *                                    SO is opened by the master: an absolute
 *                                    path is sent as given (it names a file
 *                                    on the master's host, which may be
 *                                    another); a relative one is resolved
 *                                    here, against weightctl's working
 *                                    directory, and must exist here
 *   plugin disable NAME              quiesce NAME, then refuse its RPCs (plain KV)
 *   plugin enable NAME               serve NAME again
 *
 * Each is one admin RPC (service 2, ADMIN_PLUGIN_*) to the master given by
 * --master; a refusal prints the master's reason on stderr and exits 1,
 * a usage error exits 2. --json prints one object. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_rpc.pb-c.h"
#include "rpc_client.h"
#include "weightctl.h"

static void info_text(const PluginInfo *p)
{
    printf("%s %s %s abi %u.%u reloadable %s reloads %llu path %s\n", p->name, p->version, p->state,
           p->abi_major, p->abi_minor, p->reloadable ? "yes" : "no",
           (unsigned long long)p->reloads, p->path);
}

static void info_json(const PluginInfo *p)
{
    printf("{\"name\":");
    wctl_json_str(p->name);
    printf(",\"version\":");
    wctl_json_str(p->version);
    printf(",\"state\":");
    wctl_json_str(p->state);
    printf(",\"abi\":\"%u.%u\",\"reloadable\":%s,\"reloads\":%llu,\"path\":", p->abi_major,
           p->abi_minor, p->reloadable ? "true" : "false", (unsigned long long)p->reloads);
    wctl_json_str(p->path);
    printf("}");
}

int wctl_admin_call(ctl *x, const char *what, uint32_t method, const ProtobufCMessage *req,
                    const ProtobufCMessageDescriptor *desc, ProtobufCMessage **resp)
{
    char err[512];
    rpcc_conn *c = NULL;
    rpcc_options opt = wctl_rpc_options(x, 60000);
    int status = 0;
    char *msg = NULL;
    uint8_t *body = NULL;
    size_t body_len = 0;
    int crc = rpcc_connect(x->master, &opt, &c, err, sizeof(err));
    if (crc < 0) {
        wctl_say_unconnected(x, crc == SMP_EAUTH, NULL, err);
        return 1;
    }
    int rc = rpcc_call_msg(c, HOST_SERVICE__HOST_SERVICE_ADMIN, method, req, desc, resp,
                           &status, &body, &body_len, &msg);
    int exit_code = 0;
    if (rc < 0) {
        fprintf(stderr, "weightctl: %s: %s\n", what, rpcc_last_error(c));
        exit_code = 1;
    } else if (status != 0) {
        fprintf(stderr, "weightctl: %s: %s: %s\n", what, smp_strerror(status),
                msg != NULL && msg[0] ? msg : "refused");
        exit_code = 1;
    }
    free(msg);
    free(body);
    rpcc_close(c);
    return exit_code;
}

static int cmd_list(ctl *x)
{
    PluginRequest req = PLUGIN_REQUEST__INIT;
    PluginList *list = NULL;
    if (wctl_admin_call(x, "plugin list", ADMIN_METHOD__ADMIN_PLUGIN_LIST, &req.base, &plugin_list__descriptor,
                   (ProtobufCMessage **)&list) != 0)
        return 1;
    if (x->json) printf("{\"plugins\":[");
    for (size_t i = 0; i < list->n_plugins; i++) {
        if (x->json) {
            if (i) putchar(',');
            info_json(list->plugins[i]);
        } else {
            info_text(list->plugins[i]);
        }
    }
    if (x->json) printf("]}\n");
    plugin_list__free_unpacked(list, NULL);
    return 0;
}

static int cmd_change(ctl *x, const char *what, uint32_t method, const char *name, const char *path)
{
    PluginRequest req = PLUGIN_REQUEST__INIT;
    PluginChange *ch = NULL;
    char label[300];
    req.name = (char *)name;
    req.path = (char *)(path ? path : "");
    snprintf(label, sizeof(label), "plugin %s %s", what, name);
    if (wctl_admin_call(x, label, method, &req.base, &plugin_change__descriptor,
                        (ProtobufCMessage **)&ch) != 0)
        return 1;
    if (x->json) {
        printf("{\"plugin\":");
        info_json(ch->plugin);
        printf(",\"old_version\":");
        wctl_json_str(ch->old_version);
        printf(",\"wall_us\":%llu,\"pause_us\":%llu}\n", (unsigned long long)ch->wall_us,
               (unsigned long long)ch->pause_us);
    } else if (method == ADMIN_METHOD__ADMIN_PLUGIN_RELOAD) {
        printf("%s: reloaded %s -> %s in %.3f ms (calls held %.3f ms)\n", name, ch->old_version,
               ch->plugin->version, (double)ch->wall_us / 1e3, (double)ch->pause_us / 1e3);
        info_text(ch->plugin);
    } else {
        printf("%s: %s\n", name, ch->plugin->state);
    }
    plugin_change__free_unpacked(ch, NULL);
    return 0;
}

/* The --path the master is sent: an absolute path as given (the master's
 * own, on its host: not looked at here); a relative one made absolute
 * against weightctl's working directory (realpath), as a shell user means
 * it -- the master would otherwise resolve it against its own. 0 with out
 * filled, or 2 (usage) with the cause on stderr when a relative path names
 * nothing here. */
static int reload_path(const char *path, char *out, size_t cap)
{
    char resolved[PATH_MAX];
    if (path[0] == '\0') return wctl_bad_usage("plugin", "--path is empty");
    if (path[0] == '/') {
        snprintf(out, cap, "%s", path);
        return 0;
    }
    if (realpath(path, resolved) == NULL) {
        fprintf(stderr, "weightctl: plugin reload: --path %s: %s (a relative --path is taken "
                "against weightctl's working directory and must exist here; for a library "
                "only the master's host has, give its absolute path there)\n", path,
                strerror(errno));
        return 2;
    }
    if (strlen(resolved) >= cap) return wctl_bad_usage("plugin", "--path is too long");
    snprintf(out, cap, "%s", resolved);
    return 0;
}

int wctl_cmd_plugin(ctl *x, int nargs, char **args)
{
    if (nargs < 2) return wctl_bad_usage("plugin", "give list, reload NAME, disable NAME or enable NAME");
    if (nargs == 2 && strcmp(args[1], "list") == 0) return cmd_list(x);
    if (nargs == 3 && strcmp(args[1], "disable") == 0)
        return cmd_change(x, "disable", ADMIN_METHOD__ADMIN_PLUGIN_DISABLE, args[2], NULL);
    if (nargs == 3 && strcmp(args[1], "enable") == 0)
        return cmd_change(x, "enable", ADMIN_METHOD__ADMIN_PLUGIN_ENABLE, args[2], NULL);
    if (nargs >= 3 && strcmp(args[1], "reload") == 0) {
        const char *path = NULL;
        if (nargs == 5 && strcmp(args[3], "--path") == 0) path = args[4];
        else if (nargs == 4 && strncmp(args[3], "--path=", 7) == 0) path = args[3] + 7;
        else if (nargs != 3) return wctl_bad_usage("plugin", "the form is: plugin reload NAME [--path LIBRARY.so]");
        char abs_path[PATH_MAX];
        if (path != NULL) {
            int rc = reload_path(path, abs_path, sizeof(abs_path));
            if (rc != 0) return rc;
            path = abs_path;
        }
        return cmd_change(x, "reload", ADMIN_METHOD__ADMIN_PLUGIN_RELOAD, args[2], path);
    }
    return wctl_bad_usage("plugin", "the forms are: plugin list | reload NAME [--path LIBRARY.so] | "
                                    "disable NAME | enable NAME");
}
