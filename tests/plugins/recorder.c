/* recorder.c -- a test plugin that keeps a list of payloads through its own
 * OpLog type, snapshot section and RPC service.
 *
 * It registers OpLog type 20 RECORDER_SET (ungated), the snapshot section
 * "recorder" and RPC service 40 with two methods: SET_NEXT (1) appends the
 * request body to the list as one record of type 20 and replies, with the
 * record's sequence, only once the record is durable; LIST (2) replies with
 * the whole list. A record carries the index it sets and the payload, so
 * replaying it twice gives the state of replaying it once. Replay and section
 * load rebuild the list, which lets an integration test see exactly what
 * recovery handed to the plugin (replayed, loaded or carried records).
 *
 * Its config block may hold `max_encver` (1 or 2, default 2): the type is
 * registered for encodings 1..max_encver and written at max_encver. That is
 * how a test restarts a master with a build that replays an older range.
 * And `gate` (a string): the type is registered with that capability gate,
 * whose flag the block must then hold as a boolean too (the host checks) --
 * how the HA tests get a gated type that some masters lack. And
 * `save_hold_fifo` (a path): save() opens that FIFO for reading and reads
 * one byte before it writes the section (the byte 'F' makes it fail with
 * SMP_EIO instead) -- how a test holds a snapshot's capture where it runs
 * and sees what the master does meanwhile.
 *
 * Encodings, little-endian: a record is u32 index | payload; the section and
 * the LIST reply are a sequence of u32 length | bytes. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store_plugin.h"

#define RECORDER_TYPE 20
#define RECORDER_SERVICE 40
#define RECORDER_SET_NEXT 1
#define RECORDER_LIST 2
#define RECORDER_SECTION_ENCVER 1

typedef struct rec_item {
    uint8_t *data;
    uint32_t len;
} rec_item;

typedef struct recorder {
    smp_host *host;
    const smp_host_api *api;
    uint16_t encver;        /* the encoding written */
    rec_item *items;
    uint32_t n;
    uint32_t cap;
    uint32_t next_index;    /* index the next SET_NEXT takes (durable + in flight) */
    char *hold_fifo;        /* save_hold_fifo, or NULL */
} recorder;

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void items_clear(recorder *r)
{
    for (uint32_t i = 0; i < r->n; i++) free(r->items[i].data);
    r->n = 0;
}

/* Set item index to a copy of data: replace one that exists, append the next
 * one; a gap is refused (SMP_EPROTO) and changes nothing. */
static int items_set(recorder *r, uint32_t index, const uint8_t *data, uint32_t len)
{
    if (index > r->n) return SMP_EPROTO;
    uint8_t *copy = malloc(len ? len : 1);
    if (copy == NULL) return SMP_ENOMEM;
    if (len) memcpy(copy, data, len);
    if (index == r->n) {
        if (r->n == r->cap) {
            uint32_t cap = r->cap ? r->cap * 2 : 8;
            rec_item *items = realloc(r->items, cap * sizeof(*items));
            if (items == NULL) {
                free(copy);
                return SMP_ENOMEM;
            }
            r->items = items;
            r->cap = cap;
        }
        r->n++;
    } else {
        free(r->items[index].data);
    }
    r->items[index] = (rec_item){copy, len};
    if (r->next_index < r->n) r->next_index = r->n;
    return SMP_OK;
}

/* The list as a sequence of u32 length | bytes; *out malloc'd. */
static int items_encode(const recorder *r, uint8_t **out, size_t *len)
{
    size_t total = 0;
    for (uint32_t i = 0; i < r->n; i++) total += 4 + r->items[i].len;
    uint8_t *buf = malloc(total ? total : 1);
    if (buf == NULL) return SMP_ENOMEM;
    size_t off = 0;
    for (uint32_t i = 0; i < r->n; i++) {
        put_u32(buf + off, r->items[i].len);
        memcpy(buf + off + 4, r->items[i].data, r->items[i].len);
        off += 4 + r->items[i].len;
    }
    *out = buf;
    *len = total;
    return SMP_OK;
}

/* -- OpLog type 20 ----------------------------------------------------------- */

static int rec_replay(void *plugin, const smp_record *rec)
{
    recorder *r = plugin;
    if (rec->len < 4) return SMP_EPROTO;
    return items_set(r, get_u32(rec->payload), rec->payload + 4, (uint32_t)(rec->len - 4));
}

static int rec_describe(void *plugin, const smp_record *rec, char *buf, size_t cap)
{
    (void)plugin;
    int n = rec->len >= 4 ? snprintf(buf, cap, "RECORDER_SET index %u, %zu payload bytes",
                                     (unsigned)get_u32(rec->payload), rec->len - 4)
                          : snprintf(buf, cap, "RECORDER_SET (short: %zu bytes)", rec->len);
    return n < 0 ? SMP_EINVAL : n;
}

/* -- Section "recorder" ---------------------------------------------------- */

/* save_hold_fifo: wait until the test writes one byte into the FIFO. */
static int hold(const recorder *r)
{
    char byte = 0;
    int fd = open(r->hold_fifo, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return SMP_EIO;
    ssize_t k;
    do {
        k = read(fd, &byte, 1);
    } while (k < 0 && errno == EINTR);
    close(fd);
    return k == 1 && byte != 'F' ? SMP_OK : SMP_EIO;
}

static int rec_save(void *plugin, smp_writer *w)
{
    recorder *r = plugin;
    uint8_t *buf = NULL;
    size_t len = 0;
    if (r->hold_fifo != NULL && hold(r) < 0) return SMP_EIO;
    int rc = items_encode(r, &buf, &len);
    if (rc < 0) return rc;
    rc = r->api->writer_write(w, buf, len);
    free(buf);
    return rc;
}

static int rec_load(void *plugin, smp_reader *rd, uint16_t encver)
{
    recorder *r = plugin;
    const uint8_t *data = NULL;
    size_t len = 0, off = 0;
    if (encver != RECORDER_SECTION_ENCVER) return SMP_ERANGE;
    r->api->reader_data(rd, &data, &len);
    items_clear(r);
    r->next_index = 0;
    while (off < len) {
        if (len - off < 4) return SMP_EPROTO;
        uint32_t n = get_u32(data + off);
        if (n > len - off - 4) return SMP_EPROTO;
        int rc = items_set(r, r->n, data + off + 4, n);
        if (rc < 0) return rc;
        off += 4 + n;
    }
    return SMP_OK;
}

/* -- RPC service 40 --------------------------------------------------------- */

typedef struct set_ctx {
    recorder *r;
    smp_rpc_call *call;
    uint32_t index;
    uint8_t *payload;
    uint32_t len;
} set_ctx;

/* The record is durable: make it visible, then answer with its sequence. */
static void on_set_durable(void *arg, int status, uint64_t seq)
{
    set_ctx *c = arg;
    recorder *r = c->r;
    if (status == SMP_OK) status = items_set(r, c->index, c->payload, c->len);
    if (status < 0) {
        r->api->rpc_reply(c->call, status, NULL, 0);
    } else {
        uint8_t body[8];
        for (int i = 0; i < 8; i++) body[i] = (uint8_t)(seq >> (8 * i));
        r->api->rpc_reply(c->call, SMP_OK, body, sizeof(body));
    }
    free(c->payload);
    free(c);
}

static int rpc_set_next(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    recorder *r = plugin;
    int rc;
    if (len > UINT32_MAX - 4) return SMP_ERANGE;
    set_ctx *c = calloc(1, sizeof(*c));
    uint8_t *rec = malloc(4 + len);
    if (c == NULL || rec == NULL || (c->payload = malloc(len ? len : 1)) == NULL) {
        rc = SMP_ENOMEM;
        goto free_all;
    }
    c->r = r;
    c->call = call;
    c->index = r->next_index;
    c->len = (uint32_t)len;
    if (len) memcpy(c->payload, body, len);
    put_u32(rec, c->index);
    if (len) memcpy(rec + 4, body, len);
    rc = r->api->oplog_append(r->host, RECORDER_TYPE, r->encver, rec, 4 + len, on_set_durable, c);
    if (rc < 0) goto free_all;
    r->next_index++;
    free(rec);
    return SMP_OK;
free_all:
    if (c) free(c->payload);
    free(c);
    free(rec);
    return rc; /* the host answers the call with rc */
}

static int rpc_list(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    recorder *r = plugin;
    uint8_t *buf = NULL;
    size_t n = 0;
    (void)body;
    (void)len;
    int rc = items_encode(r, &buf, &n);
    if (rc < 0) return rc;
    rc = r->api->rpc_reply(call, SMP_OK, buf, n);
    free(buf);
    return rc;
}

static const smp_rpc_method rec_methods[] = {
    {sizeof(smp_rpc_method), RECORDER_SET_NEXT, "set_next", rpc_set_next, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), RECORDER_LIST, "list", rpc_list, SMP_ROLE_ADMIN},
};

static const smp_rpc_service rec_service = {sizeof(smp_rpc_service), RECORDER_SERVICE, "recorder",
                                            rec_methods, 2};

static const smp_snapshot_section rec_section = {sizeof(smp_snapshot_section), "recorder",
                                                 RECORDER_SECTION_ENCVER, rec_save, rec_load};

/* -- Entry ------------------------------------------------------------------- */

static int init(smp_host *h, const smp_host_api *api, void **plugin)
{
    int rc;
    smp_config_value v;
    uint16_t max_encver = 2;
    if (api->config_get(h, SMP_CONFIG_PLUGIN, "max_encver", &v) == SMP_OK) {
        if (v.type != SMP_CONFIG_INT || v.i < 1 || v.i > 2) {
            api->log(h, SMP_LOG_ERROR, "max_encver must be 1 or 2");
            return SMP_EINVAL;
        }
        max_encver = (uint16_t)v.i;
    }
    const char *gate = NULL;
    if (api->config_get(h, SMP_CONFIG_PLUGIN, "gate", &v) == SMP_OK) {
        if (v.type != SMP_CONFIG_STRING) {
            api->log(h, SMP_LOG_ERROR, "gate must be a name");
            return SMP_EINVAL;
        }
        gate = v.s;
    }
    const char *hold_fifo = NULL;
    if (api->config_get(h, SMP_CONFIG_PLUGIN, "save_hold_fifo", &v) == SMP_OK) {
        if (v.type != SMP_CONFIG_STRING) {
            api->log(h, SMP_LOG_ERROR, "save_hold_fifo must be a path");
            return SMP_EINVAL;
        }
        hold_fifo = v.s;
    }
    /* The host copies the type, so it may be built here. */
    smp_oplog_type type = {sizeof(smp_oplog_type), RECORDER_TYPE, 1, max_encver, "RECORDER_SET",
                           gate, rec_replay, rec_describe};
    recorder *r = calloc(1, sizeof(*r));
    if (r == NULL) return SMP_ENOMEM;
    r->host = h;
    r->api = api;
    r->encver = max_encver;
    if (hold_fifo != NULL && (r->hold_fifo = strdup(hold_fifo)) == NULL) {
        free(r);
        return SMP_ENOMEM;
    }
    if ((rc = api->register_oplog_type(h, &type)) < 0 ||
        (rc = api->register_snapshot_section(h, &rec_section)) < 0 ||
        (rc = api->register_rpc_service(h, &rec_service)) < 0) {
        free(r->hold_fifo);
        free(r);
        return rc;
    }
    *plugin = r;
    return SMP_OK;
}

static void fini(void *plugin)
{
    recorder *r = plugin;
    items_clear(r);
    free(r->items);
    free(r->hold_fifo);
    free(r);
}

static const smp_plugin_desc desc = {
    SMP_PLUGIN_DESC_INIT, "recorder", "1.0.0",
    SMP_HOST_CAP_DURABLE_OPLOG | SMP_HOST_CAP_RPC_DISPATCH, 0, 0, init, fini,
    SMP_PLUGIN_NO_RELOAD,
};

const smp_plugin_desc *smp_plugin_entry(void) { return &desc; }
