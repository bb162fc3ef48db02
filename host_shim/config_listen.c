/* config_listen.c -- the rule across the master process's own listeners
 * (config.h): listen.tcp (RPC), listen.admin (admin HTTP) and, with the
 * embedded node, node.data_listen (its data port) must not take the same
 * port on overlapping addresses, and listen.unix and node.local_socket (the
 * embedded node's dedicated segment socket) must not be the same path:
 * the second bind would fail at the start, after --check said "ok". Port 0
 * (the system picks one) never clashes; a wildcard address (0.0.0.0, and
 * [::], which the listeners bind dual-stack) holds its port on every
 * address of its family, so it clashes with any other listener on that
 * port. Messages go through the loader's cfg_fail (config_internal.h). */
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "config_internal.h"
#include "net_addr.h"

/* One listener of the master process, as configured. */
typedef struct {
    const char *key;     /* "listen.tcp" */
    const char *value;   /* its "host:port" or path */
    unsigned line;       /* the line of its value, 0: the default */
} listener;

/* The line of section.key's value in the file, or 0. */
static unsigned line_of(const host_config_node *root, const char *section, const char *key)
{
    const host_config_node *n = cfg_node_child(cfg_node_child(root, section), key);
    return n != NULL ? n->line : 0;
}

static int is_any(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return ((const struct sockaddr_in *)ss)->sin_addr.s_addr == htonl(INADDR_ANY);
    return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)ss)->sin6_addr);
}

static unsigned port_of(const struct sockaddr_storage *ss)
{
    return ss->ss_family == AF_INET ? ntohs(((const struct sockaddr_in *)ss)->sin_port)
                                    : ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
}

/* 1 when a and b have the same address (same family). */
static int same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family) return 0;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                  &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
}

/* Whether binding a and b both would fail on Linux: the same port, not 0,
 * and the same address, or one of them a wildcard of its family or [::]
 * (dual-stack: it holds the IPv4 port as well). 1 for the same address,
 * 2 for an overlap through a wildcard, 0 for none. */
static int tcp_clash(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    unsigned port = port_of(a);
    if (port == 0 || port != port_of(b)) return 0;
    if (same_addr(a, b)) return 1;
    if (a->ss_family == b->ss_family && (is_any(a) || is_any(b))) return 2;
    if ((a->ss_family == AF_INET6 && is_any(a)) || (b->ss_family == AF_INET6 && is_any(b)))
        return 2;
    return 0;
}

/* "(line N)" or "(its default)" for messages. */
static const char *where(const listener *l, char *buf, size_t len)
{
    if (l->line == 0) return "(its default)";
    snprintf(buf, len, "(line %u)", l->line);
    return buf;
}

/* Refuse a and b sharing. The message is on the one written later in the
 * file (the one from the file when the other is a default) and names the
 * other with its line. kind: 1 same address/path, 2 through a wildcard. */
static int refuse(cfg_ctx *c, const listener *a, const listener *b, int kind, const char *what)
{
    const listener *blame = b, *other = a;
    char at[32];
    if (b->line == 0 || (a->line != 0 && a->line > b->line)) {
        blame = a;
        other = b;
    }
    if (kind == 2)
        return cfg_fail(c, SMP_EINVAL, (int)blame->line, blame->key,
                        "%s overlaps %s's %s %s: a listener on any address (0.0.0.0, [::]) "
                        "holds its port on every address, and two listeners cannot share an "
                        "address", blame->value, other->key, other->value, where(other, at, sizeof(at)));
    if (strcmp(blame->value, other->value) != 0)
        return cfg_fail(c, SMP_EINVAL, (int)blame->line, blame->key,
                        "%s is also %s's %s %s: two listeners cannot share %s", blame->value,
                        other->key, other->value, where(other, at, sizeof(at)), what);
    return cfg_fail(c, SMP_EINVAL, (int)blame->line, blame->key,
                    "%s is also %s's %s: two listeners cannot share %s", blame->value,
                    other->key, where(other, at, sizeof(at)), what);
}

int cfg_check_listeners(cfg_ctx *c, const host_config *cfg, const host_config_node *root)
{
    listener tcp[3];
    struct sockaddr_storage ss[3];
    size_t n = 0;
    const listener all[3] = {
        {"listen.tcp", cfg->listen_tcp, line_of(root, "listen", "tcp")},
        {"listen.admin", cfg->listen_admin, line_of(root, "listen", "admin")},
        {"node.data_listen", cfg->node_data_listen, line_of(root, "node", "data_listen")},
    };
    for (size_t i = 0; i < 3; i++) {
        if (all[i].value == NULL || all[i].value[0] == '\0') continue; /* off */
        if (i == 2 && !cfg->node_embedded) continue;                    /* not opened */
        if (net_parse_listen(all[i].value, &ss[n]) < 0) continue; /* refused by its own check */
        tcp[n++] = all[i];
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++) {
            int kind = tcp_clash(&ss[i], &ss[j]);
            if (kind != 0) return refuse(c, &tcp[i], &tcp[j], kind, "an address");
        }
    if (cfg->node_embedded && cfg->listen_unix != NULL && cfg->listen_unix[0] != '\0' &&
        cfg->node_local_socket != NULL && strcmp(cfg->listen_unix, cfg->node_local_socket) == 0) {
        listener u = {"listen.unix", cfg->listen_unix, line_of(root, "listen", "unix")};
        listener l = {"node.local_socket", cfg->node_local_socket,
                      line_of(root, "node", "local_socket")};
        return refuse(c, &u, &l, 1, "a socket path");
    }
    return 0;
}
