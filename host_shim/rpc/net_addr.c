/* net_addr.c -- see net_addr.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "net_addr.h"
#include "store_plugin.h"

int net_parse_listen(const char *spec, struct sockaddr_storage *ss)
{
    char host[256];
    const char *colon = spec ? strrchr(spec, ':') : NULL, *hs = spec, *he;
    char *end = NULL;
    if (colon == NULL) return SMP_EINVAL;
    he = colon;
    if (spec[0] == '[') {
        hs = spec + 1;
        if (he == spec || he[-1] != ']') return SMP_EINVAL;
        he--;
    }
    if (he < hs || (size_t)(he - hs) >= sizeof(host)) return SMP_EINVAL;
    memcpy(host, hs, (size_t)(he - hs));
    host[he - hs] = '\0';
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || errno != 0 || port < 0 || port > 65535)
        return SMP_EINVAL;
    if (host[0] == '\0' || strcmp(host, "*") == 0) strcpy(host, "0.0.0.0");
    if (strcmp(host, "localhost") == 0) strcpy(host, "127.0.0.1");
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        return SMP_OK;
    }
    if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        return SMP_OK;
    }
    return SMP_EINVAL;
}

int net_listen_is_loopback(const char *spec)
{
    struct sockaddr_storage ss;
    if (spec == NULL || spec[0] == '\0') return 1; /* off */
    if (net_parse_listen(spec, &ss) < 0) return 0;
    if (ss.ss_family == AF_INET)
        return (ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24) == 127;
    if (ss.ss_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)&ss)->sin6_addr);
    return 0;
}
