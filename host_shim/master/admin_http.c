/* admin_http.c -- the admin HTTP endpoint, served from the loop thread.
 *
 * libmicrohttpd runs its own polling thread. Its access handler suspends each
 * GET request and queues it; a uv_async_t wakes the loop, which renders every
 * queued request with the caller's callback and resumes it; the handler then
 * queues the response. The loop never waits on the HTTP thread and the HTTP
 * thread never touches master state. */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin_http.h"
#include "net_addr.h"
#include "store_plugin.h"

typedef struct admin_req {
    struct MHD_Connection *conn;
    char path[256];
    int queued;           /* handed to the loop */
    int done;             /* answer ready */
    int status;
    char *body;
    size_t len;
    const char *content_type;
    struct admin_req *next;
} admin_req;

struct admin_http {
    uv_loop_t *loop;
    uv_async_t wake;
    struct MHD_Daemon *mhd;
    admin_render_fn render;
    void *ctx;
    pthread_mutex_t lock;
    admin_req *head, *tail; /* suspended, waiting for the loop */
    int port;
    int stopping;
};

static void answer(admin_req *r, int status, const char *text)
{
    r->status = status;
    r->body = strdup(text);
    r->len = r->body ? strlen(r->body) : 0;
    r->content_type = "text/plain; charset=utf-8";
    r->done = 1;
}

/* Loop thread: render everything queued and resume it. */
static void on_wake(uv_async_t *h)
{
    admin_http *a = h->data;
    pthread_mutex_lock(&a->lock);
    admin_req *r = a->head;
    a->head = a->tail = NULL;
    pthread_mutex_unlock(&a->lock);
    while (r != NULL) {
        admin_req *next = r->next;
        r->next = NULL;
        if (a->stopping) {
            answer(r, 503, "shutting down\n");
        } else {
            a->render(a->ctx, r->path, &r->status, &r->body, &r->len, &r->content_type);
            if (r->body == NULL) answer(r, 500, "render failed\n");
            r->done = 1;
        }
        MHD_resume_connection(r->conn);
        r = next;
    }
}

static enum MHD_Result on_request(void *cls,
                                  struct MHD_Connection *conn,
                                  const char *url,
                                  const char *method,
                                  const char *version,
                                  const char *upload_data,
                                  size_t *upload_data_size,
                                  void **req_cls)
{
    admin_http *a = cls;
    admin_req *r = *req_cls;
    (void)version;
    (void)upload_data;
    if (r == NULL) {
        r = calloc(1, sizeof(*r));
        if (r == NULL) return MHD_NO;
        r->conn = conn;
        snprintf(r->path, sizeof(r->path), "%s", url);
        *req_cls = r;
        if (strcmp(method, "GET") != 0) answer(r, 405, "only GET is served\n");
        return MHD_YES;
    }
    if (*upload_data_size != 0) {
        *upload_data_size = 0; /* ignore bodies */
        return MHD_YES;
    }
    if (!r->done && !r->queued) {
        r->queued = 1;
        MHD_suspend_connection(conn);
        pthread_mutex_lock(&a->lock);
        if (a->tail) a->tail->next = r;
        else a->head = r;
        a->tail = r;
        pthread_mutex_unlock(&a->lock);
        uv_async_send(&a->wake);
        return MHD_YES;
    }
    if (!r->done) return MHD_YES;
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(r->len, r->body, MHD_RESPMEM_MUST_FREE);
    if (resp == NULL) return MHD_NO;
    r->body = NULL; /* owned by the response now */
    MHD_add_response_header(resp, "Content-Type", r->content_type);
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static void on_completed(void *cls,
                         struct MHD_Connection *conn,
                         void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    (void)toe;
    admin_req *r = *req_cls;
    if (r == NULL) return;
    free(r->body);
    free(r);
    *req_cls = NULL;
}

/* "host:port" into an IPv4 socket address (the admin endpoint is IPv4). */
static int parse_addr(const char *addr, struct sockaddr_in *sa)
{
    struct sockaddr_storage ss;
    if (net_parse_listen(addr, &ss) < 0 || ss.ss_family != AF_INET) return SMP_EINVAL;
    memcpy(sa, &ss, sizeof(*sa));
    return SMP_OK;
}

static void on_wake_closed(uv_handle_t *h)
{
    admin_http *a = h->data;
    pthread_mutex_destroy(&a->lock);
    free(a);
}

int admin_http_start(uv_loop_t *loop,
                     const char *addr,
                     admin_render_fn render,
                     void *ctx,
                     admin_http **out,
                     char *err,
                     size_t errlen)
{
    struct sockaddr_in sa;
    int rc;
    admin_http *a = NULL;
    if ((rc = parse_addr(addr, &sa)) < 0) {
        snprintf(err, errlen, "admin http: '%s' is not an IPv4 host:port", addr);
        return rc;
    }
    a = calloc(1, sizeof(*a));
    if (a == NULL) return SMP_ENOMEM;
    a->loop = loop;
    a->render = render;
    a->ctx = ctx;
    pthread_mutex_init(&a->lock, NULL);
    if (uv_async_init(loop, &a->wake, on_wake) != 0) {
        rc = SMP_EIO;
        snprintf(err, errlen, "admin http: cannot create the loop wake-up");
        goto free_admin;
    }
    a->wake.data = a;
    a->mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                                  MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG,
                              0, NULL, NULL, on_request, a,
                              MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                              MHD_OPTION_NOTIFY_COMPLETED, on_completed, a,
                              MHD_OPTION_CONNECTION_LIMIT, 64u,
                              MHD_OPTION_CONNECTION_TIMEOUT, 10u,
                              MHD_OPTION_END);
    if (a->mhd == NULL) {
        rc = SMP_EIO;
        snprintf(err, errlen, "admin http: cannot listen on %s", addr);
        goto close_wake;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(a->mhd, MHD_DAEMON_INFO_BIND_PORT);
    a->port = info ? info->port : ntohs(sa.sin_port);
    *out = a;
    return SMP_OK;
close_wake:
    /* The handle is closed later by the loop; its close callback frees. */
    uv_close((uv_handle_t *)&a->wake, on_wake_closed);
    return rc;
free_admin:
    pthread_mutex_destroy(&a->lock);
    free(a);
    return rc;
}

int admin_http_port(const admin_http *a)
{
    return a->port;
}

void admin_http_stop(admin_http *a)
{
    if (a == NULL) return;
    a->stopping = 1;
    MHD_quiesce_daemon(a->mhd);
    on_wake(&a->wake); /* answer whatever is queued with 503 */
    MHD_stop_daemon(a->mhd);
    uv_close((uv_handle_t *)&a->wake, on_wake_closed);
}
