/* node_tls_out.h -- where a node data connection's TLS session writes its
 * records: straight into the connection's socket.
 *
 * The data server drives OpenSSL on its libuv loop. Sealed records used to
 * go into a memory BIO and were copied out of it into a buffer libuv then
 * wrote: two copies of every byte a read sends, and the BIO's buffer grown
 * by reallocation as a chunk was sealed. This BIO appends each record to
 * the connection's stash (one copy, into a buffer that is reused), and
 * tls_out_flush sends the stash with one send(MSG_NOSIGNAL | MSG_DONTWAIT)
 * -- a closed peer is an error of that connection, never a SIGPIPE -- when
 * libuv has nothing of this stream queued (the byte order stays that of
 * the session). A sealing step of many records is one syscall, not one per
 * 16 KiB record: on a virtual machine whose syscalls and packets are dear,
 * that is most of the difference. What the socket does not take stays in
 * the stash; the caller stops sealing and hands it to uv_write
 * (tls_out_take). MSG_MORE is passed while tls_out.more is set (more of
 * the same response follows). */
#ifndef NODE_TLS_OUT_H
#define NODE_TLS_OUT_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/bio.h>
#include <uv.h>

typedef struct tls_out {
    uv_tcp_t *tcp;            /* the connection's stream (borrowed) */
    uint8_t *stash;           /* sealed bytes the socket did not take, in order */
    size_t len, cap;
    int more;                 /* MSG_MORE on direct sends: more of this response follows */
} tls_out;

/* A BIO writing into o's socket as the file comment says (o must outlive
 * it; the BIO never frees o). Reading from it fails. NULL when out of
 * memory. */
BIO *tls_out_bio(tls_out *o);

/* Send what the stash holds, as far as the socket takes it now, when libuv
 * has nothing of the stream queued (else it all stays). 0 (the stash holds
 * what is left), or a negative errno when the connection failed. */
int tls_out_flush(tls_out *o);

/* Move the stash (possibly empty) into *buf (its old contents freed; the
 * caller frees the new one), its length into *len; the stash is empty
 * after. */
void tls_out_take(tls_out *o, uint8_t **buf, size_t *len);

/* Free the stash. */
void tls_out_free(tls_out *o);

#endif /* NODE_TLS_OUT_H */
