/* node_data_client.h -- the blocking client of a node's data server.
 *
 * One ndc_conn is one TCP connection to a node's data server speaking the
 * frames of node_data_wire.h: read a range of a segment into a caller's
 * buffer, or write a range from a caller's buffer with the write ticket the
 * master minted for it (opaque bytes here). Bytes go straight between the
 * socket and the caller's buffer: no staging copy. Plain sockets with
 * TCP_NODELAY and (optionally) large socket buffers; no event loop. A
 * connection is used by one thread at a time.
 *
 * With ndc_options.tls the connection is TLS 1.3 (wc_tls.h): the node's
 * certificate must chain to the context's CA and name the endpoint's host,
 * else ndc_connect fails with SMP_EPROTO naming why; without a CA to trust
 * (no tls_ctx, no WM_TLS_CA) it fails with SMP_EINVAL saying so. A node whose data port
 * speaks TLS answers a plaintext client with one plaintext refusal
 * (SMP_EPROTO, "... speaks TLS ...") and closes that connection.
 *
 * Every call returns SMP_OK, the node's refusal (its negative SMP_E* status,
 * e.g. SMP_EINVAL for a forged or missing ticket, SMP_ESTATE for an expired
 * one, SMP_EEXIST for a used write ticket, SMP_ERANGE, SMP_ENOTFOUND), or a transport error (SMP_EIO: connection lost;
 * SMP_EAGAIN: timed out; SMP_EPROTO: the node's answer did not parse).
 * ndc_last_error() names the cause either way. After a transport error the
 * connection is broken and every later call fails; after a refusal it stays
 * usable. */
#ifndef WM_NODE_DATA_CLIENT_H
#define WM_NODE_DATA_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "store_plugin.h"

typedef struct ndc_conn ndc_conn;

typedef struct ndc_options {
    int timeout_ms;            /* per connect and per socket wait; <= 0: forever */
    int socket_buffer_bytes;   /* SO_SNDBUF / SO_RCVBUF; 0: kernel (autotuned) */
    int tls;                   /* TLS 1.3 (the master says the node's data port
                                  speaks only TLS): with tls_ctx, else with the CA of
                                  the environment (WM_TLS_CA / WM_TLS_CERT / _KEY) */
    struct ssl_ctx_st *tls_ctx;/* the client context for tls (borrowed for the
                                  connect; the session keeps a reference); NULL: env */
} ndc_options;

/* Connect to "host:port" (numeric or resolvable host). opt may be NULL. On
 * failure returns SMP_EINVAL (bad endpoint), SMP_EIO, SMP_EAGAIN,
 * SMP_EPROTO (TLS handshake refused) or SMP_ENOMEM with the cause in err
 * (may be NULL). */
int ndc_connect(const char *endpoint,
                const ndc_options *opt,
                ndc_conn **out,
                char *err,
                size_t errlen);

/* Close and free. NULL is a no-op. */
void ndc_close(ndc_conn *c);

/* The message of the last failure ("" if none). */
const char *ndc_last_error(const ndc_conn *c);

/* 1 when the last ndc_read / ndc_read_cold failed before any byte of its
 * reply arrived because the node had closed or reset the connection (EPIPE
 * or ECONNRESET on the send, EOF or a reset before the reply): a pooled
 * connection the node dropped (it restarted, or closed an idle one). The
 * node consumed nothing of it, so the read (idempotent) may be sent once
 * more on a fresh connection. 0 otherwise (a timeout, a partial reply, a
 * refusal, a write). */
int ndc_unanswered(const ndc_conn *c);

/* Read [offset, offset + length) of segment into dst (length bytes) with
 * the READ ticket the master handed out with the replica (a node refuses a
 * read without one unless it was configured insecure: ticket NULL,
 * ticket_len 0). On a transport error dst may hold part of the range. */
int ndc_read(ndc_conn *c,
             const char *segment,
             uint64_t offset,
             uint64_t length,
             void *dst,
             const uint8_t *ticket,
             size_t ticket_len);

/* Read [offset, offset + length) of the data of the node's cold file
 * cold_name (its bare name "<64 hex>.cold", sent as is: a name with a
 * directory is refused by the node) into dst, with the replica's READ
 * ticket (as for ndc_read). The node does not verify
 * the bytes it sends from disk: the caller must (the object's SHA-256).
 * Refusals: SMP_EINVAL (not a cold file name), SMP_ENOTFOUND, SMP_ERANGE,
 * SMP_EPROTO (the file's header or size is bad), SMP_ENOTSUP (the node
 * serves no cold files). A node that predates cold reads answers SMP_EPROTO
 * and closes the connection (a transport error here). */
int ndc_read_cold(ndc_conn *c,
                  const char *cold_name,
                  uint64_t offset,
                  uint64_t length,
                  void *dst,
                  const uint8_t *ticket,
                  size_t ticket_len);

/* Ask the node to hash the whole of its cold file cold_name against the
 * SHA-256 its header records (CHECK_COLD), with a READ ticket of the file
 * (as for ndc_read_cold): what a reader does when bytes it read from the
 * file did not verify. Blocks while the node reads the file, and while the
 * node answers that it checks another file (it hashes one at a time), asks
 * again, pausing 10 ms doubling to 200 ms, for up to
 * NDC_CHECK_BUSY_WAIT_MS in all. SMP_OK: the file is intact (the bytes went
 * bad on their way, or in the reader); SMP_EPROTO: the file is corrupt and
 * the node reports it to its master, which drops the replica; SMP_EBUSY:
 * the node was still checking other files when the wait ended; the
 * refusals of ndc_read_cold otherwise (SMP_ENOTFOUND: the file is gone,
 * e.g. deleted since the read once another reader's check found it
 * corrupt). ndc_last_error() has the node's words. A node that predates
 * the check answers SMP_EPROTO and closes the connection: its message says
 * it did not parse the request. */
#define NDC_CHECK_BUSY_WAIT_MS 30000
int ndc_check_cold(ndc_conn *c, const char *cold_name, const uint8_t *ticket, size_t ticket_len);

/* ndc_check_cold of a file whose bytes a reader just read from the node at
 * addr did not verify, its verdict appended to err (a message of errlen
 * bytes): intact ("the bytes went bad on their way"), or what the node
 * answered -- for SMP_ENOTFOUND also that the file was deleted since the
 * read (the reader's read lease keeps the object, so its replica was
 * dropped as corrupt). c NULL (no connection): why, from cause. Returns
 * ndc_check_cold's code (SMP_EIO for c NULL). */
int ndc_check_cold_verdict(ndc_conn *c, const char *addr, const char *cold_name,
                           const uint8_t *ticket, size_t ticket_len, const char *cause, char *err,
                           size_t errlen);

/* Write length bytes of src into [offset, offset + length) of segment with
 * the ticket for exactly that range. The node checks the ticket before it
 * takes a byte: a refusal means nothing was written. */
int ndc_write(ndc_conn *c,
              const char *segment,
              uint64_t offset,
              uint64_t length,
              const void *src,
              const uint8_t *ticket,
              size_t ticket_len);

/* The producer of a streamed write: point *data at the next *len bytes of
 * the range (at least one, no more than what is left; valid until the next
 * call) and return SMP_OK, or return a negative SMP_E* status to stop. */
typedef int (*ndc_source)(void *ctx, const void **data, size_t *len);

/* ndc_write with the bytes asked from next piece by piece as they are sent,
 * so a writer can produce (copy, hash) each piece while the previous one is
 * in the socket, with no buffer of the whole range. A source that stops (its
 * status) or misbehaves (SMP_EINVAL: empty piece or past the range) breaks
 * the connection: the node has taken part of the range and waits for the
 * rest, so the write is lost and the put must be revoked. */
int ndc_write_stream(ndc_conn *c,
                     const char *segment,
                     uint64_t offset,
                     uint64_t length,
                     ndc_source next,
                     void *ctx,
                     const uint8_t *ticket,
                     size_t ticket_len);

/* The TLS 1.3 cipher suite of the connection ("" when plaintext). */
const char *ndc_tls_cipher(const ndc_conn *c);

/* Send raw bytes as they are (tests of the server's framing). */
int ndc_send_raw(ndc_conn *c, const void *bytes, size_t len);

/* Wait for one response header and its message and return its status
 * (tests: what did the node say to raw bytes). SMP_EIO when the node closed
 * without answering. */
int ndc_recv_status(ndc_conn *c);

#endif /* WM_NODE_DATA_CLIENT_H */
