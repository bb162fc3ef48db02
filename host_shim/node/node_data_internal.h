/* node_data_internal.h -- what the two halves of the node's data server
 * share: node_data.c (connections, segments, tickets, the byte stream) and
 * node_data_cold.c (READ_COLD and CHECK_COLD of cold files on the
 * threadpool). Not an interface for anything else: node_data.h is.
 *
 * Everything here runs on the server's loop thread, except what the cold
 * work items touch (a cold_xfer, never its connection). */
#ifndef HOST_NODE_DATA_INTERNAL_H
#define HOST_NODE_DATA_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "host_uthash.h"
#include "node_data.h"
#include "node_data_wire.h"
#include "node_tls_out.h"
#include "rpc_tls.h"

#define COLD_CHECKS_MAX 1         /* CHECK_COLD requests hashing at once */
#define COLD_XFER_CHUNK (1u << 20) /* bytes of a cold file read and sent at once (TLS) */
#define COLD_SEND_STEP (8u << 20)  /* bytes of a cold file sendfile'd by one work item */
#define USED_TICKETS_MAX (1u << 20) /* write tickets remembered at once (replay guard) */
#define USED_PRUNE_MS 1000          /* forget expired write tickets at most this often */
#define TLS_IN_CHUNK (256u << 10)   /* ciphertext taken from the socket at once */
#define TLS_OUT_CHUNK (1u << 20)    /* plaintext of a read sealed per turn of the loop */
#define TLS_SEAL_STEP (256u << 10)  /* plaintext sealed, then sent, at once (16 records) */
#define DRAIN_MAX (64u << 10)       /* bytes taken from a refused plaintext client */


/* A write ticket that wrote (or is writing): refused if presented again
 * before it expires. */
typedef struct used_ticket {
    uint8_t nonce[16];
    uint64_t expiry_ms;
    int in_progress;            /* its write runs; given back if it breaks */
    char *key, *segment;        /* in progress: what it writes (data_server_writing) */
    uint64_t offset;
    struct used_ticket *wprev, *wnext; /* in progress: the server's writing list */
    UT_hash_handle hh;
} used_ticket;

_Static_assert(NDW_TICKET_MAX >= TICKET_MAX_BYTES, "wire ticket bound below ticket size");
_Static_assert(NDW_SEGMENT_MAX >= SEG_ID_MAX, "wire segment bound below segment id size");

/* CS_DRAIN: a plaintext client on a TLS port was refused; what it still
 * sends is read and dropped (up to DRAIN_MAX) until it closes, so the close
 * does not reset the connection before the refusal is read. */
typedef enum conn_state { CS_HDR, CS_VAR, CS_PAYLOAD, CS_BUSY, CS_DRAIN, CS_CLOSING } conn_state;

typedef struct data_seg {
    struct data_seg *next;
    seg_segment *seg;
} data_seg;

struct data_conn;

/* One READ_COLD or CHECK_COLD in progress (node_data_cold.c). */
typedef struct cold_xfer {
    uv_work_t work;             /* the open, or one chunk's pread, on the threadpool */
    uv_write_t wreq;            /* the chunk being sent */
    struct data_conn *conn;     /* NULL once the connection closed under a work item */
    const cold_tier *ct;
    data_server *srv;           /* the server (a check holds it until its hash ends) */
    int check;                  /* a CHECK_COLD: the one work item hashes the file */
    int in_work;                /* a work item is out */
    int opened;                 /* the open step is done */
    int rc;                     /* result of the last work item */
    int fd;                     /* the cold file, or -1 */
    int sock;                   /* sendfile to this socket (the connection's send_fd), or
                                   -1: pread into buf */
    int owns_sock;              /* the connection closed under a work item: close sock */
    int blocked;                /* the last send step met a full socket */
    int peer_gone;              /* the last send step failed on the socket, not the file */
    uint64_t data_len;          /* the file's data bytes (header says, size agrees) */
    uint64_t pos;               /* data offset of the next chunk */
    uint64_t remaining;         /* bytes still to send */
    size_t chunk;               /* bytes in buf, or sent by the last send step */
    uint8_t *cipher;            /* TLS: the chunk sealed */
    char name[COLD_NAME_MAX];
    char key[COLD_KEY_MAX + 1];  /* CHECK_COLD: the key the file's header names */
    uint8_t buf[COLD_XFER_CHUNK];
} cold_xfer;

typedef struct data_conn {
    uv_tcp_t tcp;
    uv_timer_t idle;            /* closes a connection that stalls (idle_ms > 0) */
    int open_handles;           /* tcp, and idle when armed: freed at 0 */
    struct data_conn *prev, *next;
    data_server *srv;
    conn_state state;
    size_t got;                 /* bytes of the current header / var part */
    uint8_t hdr[NDW_REQ_HDR];
    ndw_request req;
    uint8_t var[NDW_SEGMENT_MAX + NDW_TICKET_MAX];
    uint8_t scratch[64];        /* absorbs bytes that arrive when none are expected */
    uint8_t *dst;               /* PAYLOAD: where the next byte goes */
    uint64_t remaining;         /* PAYLOAD: bytes still to receive */
    cold_xfer *cold;            /* the READ_COLD in progress */
    int send_fd;                /* a dup of the socket for sendfile, or -1 (not made yet) */
    uv_poll_t send_poll;        /* waits for send_fd to be writable (open: send_fd >= 0) */
    used_ticket *wticket;       /* PAYLOAD: the write ticket being used */
    rpc_tls_session tls;        /* ssl NULL: a plaintext connection */
    uint8_t *cin;               /* TLS: ciphertext read from the socket */
    tls_out out;                /* TLS: where the session's records go (the socket) */
    uv_shutdown_t shutdown;     /* CS_DRAIN: our side of the stream ends */
} data_conn;

typedef struct data_reply {
    uv_write_t req;
    data_conn *conn;
    int close_after;            /* close the connection once sent */
    int resume_after;           /* a READ: resume reading once sent */
    uint64_t payload;
    const uint8_t *src;         /* TLS: payload bytes not sealed yet */
    uint64_t src_left;
    uint8_t *cipher;            /* TLS: what this request writes (sealed, the socket
                                   did not take it at once) */
    uint8_t buf[NDW_RESP_HDR + NDW_MESSAGE_MAX];
} data_reply;

struct data_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    int listening;
    int started;
    int closing;
    int handles;                /* open uv handles (listener + conns) */
    char *listen_tcp;
    ticket_keyring keys;
    int have_keys;
    int allow_unticketed_reads;
    used_ticket *used;          /* write tickets that wrote, by nonce */
    pthread_mutex_t writing_lock; /* guards writing: read by the node's poll thread */
    used_ticket *writing;       /* the tickets whose write runs */
    uint32_t n_used;
    uint64_t next_prune_ms;
    uint64_t clock_skew_ms;
    int sockbuf;
    uint32_t max_connections;
    int backlog;
    uint64_t idle_ms;
    data_seg *segs;
    const cold_tier *cold;      /* borrowed; NULL: READ_COLD refused */
    cold_faults *cold_faults;   /* borrowed; files found corrupt go here (may be NULL) */
    int cold_checks;            /* CHECK_COLD requests hashing now (<= COLD_CHECKS_MAX),
                                   their readers there or gone */
    data_conn *conns;
    SSL_CTX *tls;               /* a reference of the options' context; NULL: plaintext */
    data_server_stats stats;
};

/* -- node_data.c: for the cold half ---------------------------------------- */

/* Close c (once; both its handles); it is freed when they have closed. */
void data_conn_close(data_conn *c);

/* Queue bufs on c's stream with w and cb: as they are, or (TLS) sealed
 * (*cipher then holds what the socket did not take, until cb). 0, or < 0
 * when nothing was queued (the caller closes the connection). */
int data_conn_write(data_conn *c, uv_write_t *w, const uv_buf_t *bufs, unsigned nbufs,
                    uint8_t **cipher, uv_write_cb cb);

/* Take requests again after a response (reading, and what a TLS session
 * already holds). */
void data_conn_resume(data_conn *c);

/* (Re)arm the idle timer (the peer owes bytes) / stop it (we owe them). */
void data_idle_arm(data_conn *c);
void data_idle_disarm(data_conn *c);

/* Send a response: header, message, and (for a READ) payload bytes straight
 * from the mapping. 0, or -1 when it could not be queued: the connection
 * is then closing. */
int data_send_reply(data_conn *c, int status, uint8_t kind, const char *msg,
                    const uint8_t *payload, uint64_t plen, int close_after);

/* Answer a refusal (the connection stays) and wait for the next request. */
void data_refuse(data_conn *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Free s once it is closing and nothing holds it: no handle open, no
 * CHECK_COLD hashing (a check whose reader left still ends on the loop). */
void data_server_maybe_free(data_server *s);

/* Verify the request's ticket for op (TICKET_OP_READ / _WRITE) on segid and
 * the request's range. SMP_OK or the refusal's code (the refusal was sent). */
int data_check_ticket(data_conn *c, const char *segid, uint8_t op);

/* -- node_data_cold.c ------------------------------------------------------- */

/* A READ_COLD (check 0) or CHECK_COLD (check 1) of the file name (the
 * request's "segment id"): the name and the ticket are checked on the
 * loop, the file opened (or hashed) on the threadpool. */
void data_cold_start(data_conn *c, const char *name, int check);

/* Free a transfer no work item holds (its file, and its socket if it owns
 * it). */
void data_cold_free(cold_xfer *x);

#endif /* HOST_NODE_DATA_INTERNAL_H */
