/* master_list.c -- parsing and position of a master list (see
 * master_list.h). The checks are the ones a connect would fail on anyway,
 * made up front so that a typo in the third item of a list is reported as
 * that item when the list is given, not as a connection refused during a
 * failover. */
#include "master_list.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>

#include "store_plugin.h"
#include "wm_errbuf.h"

/* A port: decimal digits only, 1..65535. */
static int port_ok(const char *s)
{
    unsigned long v = 0;
    if (*s == '\0') return 0;
    for (; *s; s++) {
        if (!isdigit((unsigned char)*s)) return 0;
        v = v * 10 + (unsigned long)(*s - '0');
        if (v > 65535) return 0;
    }
    return v >= 1;
}

const char *master_list_unix_path(const char *endpoint)
{
    if (strncmp(endpoint, "unix:", 5) == 0) return endpoint + 5;
    return endpoint[0] == '/' ? endpoint : NULL;
}

int master_list_check(const char *ep, char *err, size_t errlen)
{
    size_t len = strlen(ep);
    const char *path = NULL, *colon, *hs, *he;

    if (len == 0) {
        wm_errbuf(err, errlen, "empty endpoint");
        return SMP_EINVAL;
    }
    if (len >= ML_ENDPOINT_MAX) {
        wm_errbuf(err, errlen, "endpoint '%.40s...' is longer than %d bytes", ep,
                  ML_ENDPOINT_MAX - 1);
        return SMP_EINVAL;
    }
    for (const char *p = ep; *p; p++) {
        if (isspace((unsigned char)*p) || *p == ',' || !isprint((unsigned char)*p)) {
            wm_errbuf(err, errlen, "endpoint '%s' holds a blank, a ',' or a control byte", ep);
            return SMP_EINVAL;
        }
    }
    if ((path = master_list_unix_path(ep)) != NULL) {
        if (path[0] != '/' || strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
            wm_errbuf(err, errlen, "endpoint '%s': a Unix socket path must be absolute and "
                      "shorter than %zu bytes", ep, sizeof(((struct sockaddr_un *)0)->sun_path));
            return SMP_EINVAL;
        }
        return SMP_OK;
    }
    colon = strrchr(ep, ':');
    if (colon == NULL) {
        wm_errbuf(err, errlen, "endpoint '%s' is not host:port, unix:/path or /path", ep);
        return SMP_EINVAL;
    }
    hs = ep;
    he = colon;
    if (ep[0] == '[') { /* [v6addr]:port */
        hs = ep + 1;
        if (he == ep || he[-1] != ']') {
            wm_errbuf(err, errlen, "endpoint '%s': an IPv6 address is written [addr]:port", ep);
            return SMP_EINVAL;
        }
        he--;
    } else if (memchr(ep, ':', (size_t)(colon - ep)) != NULL) {
        wm_errbuf(err, errlen, "endpoint '%s': an IPv6 address is written [addr]:port", ep);
        return SMP_EINVAL;
    }
    if (he <= hs) {
        wm_errbuf(err, errlen, "endpoint '%s' has no host before the port", ep);
        return SMP_EINVAL;
    }
    if (!port_ok(colon + 1)) {
        wm_errbuf(err, errlen, "endpoint '%s': port '%s' is not a number in 1..65535", ep,
                  colon + 1);
        return SMP_EINVAL;
    }
    return SMP_OK;
}

int master_list_parse(const char *spec, master_list *out, char *err, size_t errlen)
{
    char why[384];
    const char *p = spec;
    size_t item = 0;

    memset(out, 0, sizeof(*out));
    if (spec == NULL || spec[0] == '\0') {
        wm_errbuf(err, errlen, "no master endpoint given");
        return SMP_EINVAL;
    }
    for (;;) {
        const char *end = strchr(p, ','), *s = p, *e;
        if (end == NULL) end = p + strlen(p);
        e = end;
        while (s < e && isspace((unsigned char)*s)) s++;
        while (e > s && isspace((unsigned char)e[-1])) e--;
        item++;
        if (e == s) {
            wm_errbuf(err, errlen, "master list '%s': item %zu is empty", spec, item);
            goto invalid;
        }
        if (out->n == ML_MAX_ENDPOINTS) {
            wm_errbuf(err, errlen, "master list '%.200s...' has more than %d endpoints", spec,
                      ML_MAX_ENDPOINTS);
            goto invalid;
        }
        if ((size_t)(e - s) >= ML_ENDPOINT_MAX) {
            wm_errbuf(err, errlen, "master list: item %zu ('%.40s...') is longer than %d bytes",
                      item, s, ML_ENDPOINT_MAX - 1);
            goto invalid;
        }
        char *ep = out->ep[out->n];
        memcpy(ep, s, (size_t)(e - s));
        ep[e - s] = '\0';
        if (master_list_check(ep, why, sizeof(why)) < 0) {
            if (strchr(spec, ',') == NULL) /* a single endpoint: it is the item */
                wm_errbuf(err, errlen, "%s", why);
            else
                wm_errbuf(err, errlen, "master list '%s': item %zu: %s", spec, item, why);
            goto invalid;
        }
        for (size_t i = 0; i < out->n; i++) {
            if (strcmp(out->ep[i], ep) == 0) {
                wm_errbuf(err, errlen, "master list '%s': item %zu ('%s') repeats item %zu", spec,
                          item, ep, i + 1);
                goto invalid;
            }
        }
        out->n++;
        if (*end == '\0') break;
        p = end + 1;
    }
    return SMP_OK;

invalid:
    memset(out, 0, sizeof(*out));
    return SMP_EINVAL;
}

const char *master_list_current(const master_list *ml)
{
    return ml->cur < ml->n ? ml->ep[ml->cur] : ml->leader;
}

size_t master_list_round(const master_list *ml)
{
    return ml->n + (ml->leader[0] != '\0');
}

int master_list_set_leader(master_list *ml, const char *leader, size_t len)
{
    char name[ML_ENDPOINT_MAX];
    if (leader == NULL || len == 0 || len >= sizeof(name) || memchr(leader, '\0', len) != NULL)
        goto no_name;
    memcpy(name, leader, len);
    name[len] = '\0';
    if (master_list_check(name, NULL, 0) < 0) goto no_name;
    for (size_t i = 0; i < ml->n; i++) {
        if (strcmp(ml->ep[i], name) == 0) {
            ml->cur = i;
            ml->leader[0] = '\0';
            return 1;
        }
    }
    memcpy(ml->leader, name, len + 1);
    ml->cur = ml->n;
    return 1;

no_name:
    ml->leader[0] = '\0';
    if (ml->cur >= ml->n) ml->cur = 0;
    return 0;
}

void master_list_next(master_list *ml)
{
    ml->cur = (ml->cur + 1) % (ml->n + 1);
    if (ml->cur == ml->n && ml->leader[0] == '\0') ml->cur = 0;
}
