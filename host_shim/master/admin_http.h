/* admin_http.h -- the master's admin HTTP endpoint (/metrics, /health, /role).
 *
 * libmicrohttpd accepts and parses requests on its own thread; every answer is
 * produced on the master's loop thread, which owns the state it describes. A
 * request is suspended, handed to the loop through a uv_async_t, answered by
 * the render callback there, and resumed. Only GET is served. */
#ifndef HOST_ADMIN_HTTP_H
#define HOST_ADMIN_HTTP_H

#include <stddef.h>
#include <uv.h>

typedef struct admin_http admin_http;

/* Produce the answer to GET `path` on the loop thread: set *status (HTTP),
 * *body (malloc'd, taken over by the caller) and *len, and *content_type
 * (static string). */
typedef void (*admin_render_fn)(void *ctx,
                                const char *path,
                                int *status,
                                char **body,
                                size_t *len,
                                const char **content_type);

/* Listen on "host:port" (IPv4 literal or "localhost"). Returns 0, or a
 * negative SMP_E* code with err naming the address and the cause. */
int admin_http_start(uv_loop_t *loop,
                     const char *addr,
                     admin_render_fn render,
                     void *ctx,
                     admin_http **out,
                     char *err,
                     size_t errlen);

/* The port actually bound (useful with port 0). */
int admin_http_port(const admin_http *a);

/* Stop accepting, answer queued requests with 503, stop the server thread and
 * free. Must run on the loop thread; the uv handle is closed asynchronously,
 * so the loop must run once more before it is closed. NULL is a no-op. */
void admin_http_stop(admin_http *a);

#endif /* HOST_ADMIN_HTTP_H */
