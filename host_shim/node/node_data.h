/* node_data.h -- a node's data server: ranged reads and ticketed writes of
 * its segments over TCP.
 *
 * The server runs on a libuv loop (the node's, or the master's in embedded
 * mode) and speaks the frames of client/node_data_wire.h. A READ streams the
 * range straight from the segment's mapping into the socket (one uv_write of
 * the mapping pointer: no copy into a buffer); a WRITE is checked against its
 * ticket (node_ticket.h) before a byte is accepted and its payload is then
 * received straight into the segment (libuv's read buffer is the mapping at
 * the write position). Many connections are served at once; each carries one
 * request at a time.
 *
 * Refusals keep the connection: unknown segment (SMP_ENOTFOUND), range
 * outside the segment or not the ticket's (SMP_ERANGE), forged or tampered
 * ticket or one signed by a key the node no longer holds (SMP_EINVAL),
 * expired ticket (SMP_ESTATE), malformed ticket (SMP_EPROTO), a used write
 * ticket (SMP_EEXIST), tickets without configured keys (SMP_ENOTSUP). A refused
 * write has written nothing. A frame that does not parse gets an SMP_EPROTO
 * answer and closes that connection only. Reads need a READ ticket as
 * writes need a WRITE ticket, unless allow_unticketed_reads is set (an
 * insecure setting: then a ticket that comes with a read is still checked).
 * A write ticket is single use (node_ticket.h): the same ticket again, while
 * its write runs or after it completed, is refused with SMP_EEXIST and
 * writes nothing; a write whose connection broke in the middle gives its
 * ticket back. Tickets are checked against the server's keyring (current
 * and previous key); data_server_set_keys() installs a rotated one.
 *
 * READ_COLD (data_server_set_cold): a range of a cold file's data, by the
 * file's bare name. Names with a directory, "..", or not of the cold form
 * are refused (SMP_EINVAL), a missing file is SMP_ENOTFOUND, a file whose
 * header or size is bad SMP_EPROTO, a range past the data SMP_ERANGE; all
 * keep the connection. The file is read in bounded chunks on libuv's
 * threadpool, never whole. The node checks the header and the size but does
 * NOT hash what it sends: the persist verified the file when it was written
 * and a load into memory verifies it again, but a range read is only as
 * good as the disk -- a client must verify the bytes (the object's SHA-256,
 * or digests of its ranges it knows). A file deleted while it is being read
 * is still read to the end (the descriptor stays valid). CHECK_COLD: a
 * client whose read did not verify has the node hash the whole file (same
 * name and ticket rules); a file found corrupt is noted in the server's
 * cold_faults for the master, as a bad header a READ_COLD meets is.
 *
 * TLS (opt.tls): every connection is TLS 1.3 with the context's certificate;
 * a client whose first bytes are not a TLS handshake is answered with one
 * plaintext SMP_EPROTO refusal saying the port speaks TLS and closed (the
 * server serves on), a failed handshake closes that connection. Requests,
 * refusals and limits are the same as in plaintext; bytes are sealed in
 * chunks, so a read of a large range holds one chunk of ciphertext at a
 * time.
 *
 * Everything runs on the loop thread. Segments are borrowed: a segment must
 * stay open until it is removed from the server (or the server is closed). */
#ifndef HOST_NODE_DATA_H
#define HOST_NODE_DATA_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/ssl.h>
#include <uv.h>

#include "node_cold.h"
#include "node_cold_faults.h"
#include "node_segment.h"
#include "node_ticket.h"
#include "store_plugin.h"

typedef struct data_server data_server;

typedef struct data_server_options {
    const char *listen_tcp;          /* "host:port" (":port" = any address) */
    const ticket_keyring *keys;      /* copied; NULL: every ticketed request is refused */
    int allow_unticketed_reads;      /* INSECURE: serve reads that carry no ticket */
    uint64_t clock_skew_ms;          /* tolerated lag of this clock behind the master's */
    int socket_buffer_bytes;         /* SO_SNDBUF / SO_RCVBUF of connections; 0: kernel */
    uint32_t max_connections;        /* 0: unlimited */
    int backlog;                     /* 0: 128 */
    uint64_t idle_timeout_ms;        /* close a connection from which nothing arrives
                                        for this long -- between requests or inside
                                        one -- except while a read's bytes are being
                                        sent to it; 0: never */
    SSL_CTX *tls;                    /* TLS server context (rpc_tls_server_ctx); the
                                        server keeps a reference; NULL: plaintext */
} data_server_options;

typedef struct data_server_stats {
    uint64_t connections_accepted;
    uint64_t connections_open;       /* gauge */
    uint64_t connections_rejected;   /* over max_connections */
    uint64_t reads;                  /* READ requests served */
    uint64_t writes;                 /* WRITE requests completed */
    uint64_t bytes_read;             /* payload bytes sent */
    uint64_t bytes_written;          /* payload bytes received into segments */
    uint64_t refused_ticket;         /* forged, expired, malformed, replayed or wrong-use
                                        tickets, and ticketless requests */
    uint64_t refused_range;          /* outside the segment */
    uint64_t refused_segment;        /* unknown segment */
    uint64_t bad_frames;             /* connections closed for a malformed frame */
    uint64_t truncated;              /* peers gone in the middle of a request */
    uint64_t idle_closed;            /* connections closed by the idle timeout */
    uint64_t cold_reads;             /* READ_COLD requests served (bytes in bytes_read) */
    uint64_t refused_cold;           /* bad cold name, missing or malformed cold file */
    uint64_t cold_read_errors;       /* cold files that failed in the middle of a read
                                        (the connection was closed) */
    uint64_t cold_checks;            /* CHECK_COLD requests answered */
    uint64_t cold_checks_corrupt;    /* ... that found the file corrupt */
    uint64_t tls_handshakes;         /* TLS sessions established */
    uint64_t tls_refused;            /* TLS handshakes that failed (closed) */
    uint64_t refused_plaintext;      /* plaintext clients on a TLS port */
} data_server_stats;

/* Create a server on loop (borrowed). Nothing listens before
 * data_server_start(). Returns SMP_OK, SMP_EINVAL (no listen address, bad
 * keys), SMP_ENOMEM, with err (may be NULL) naming the cause. */
int data_server_create(uv_loop_t *loop,
                       const data_server_options *opt,
                       data_server **out,
                       char *err,
                       size_t errlen);

/* The TLS context of a data port: rpc_tls_server_ctx of cert and key (no
 * client certificates; errors name the settings with key_prefix, e.g.
 * "--data-tls-"), preferring TLS_AES_128_GCM_SHA256 -- the cheapest AEAD
 * of TLS 1.3 on a CPU with AES instructions, and a stream of payload bytes
 * is bound by it (bench/JOURNAL.md). SMP_OK or rpc_tls_server_ctx's error.
 * Free with SSL_CTX_free. */
int data_server_tls_ctx(const char *cert,
                        const char *key,
                        const char *key_prefix,
                        SSL_CTX **out,
                        char *err,
                        size_t errlen);

/* Replace the keys tickets are checked with (a rotation: the ring's
 * previous key keeps tickets minted before it valid). Loop thread only.
 * SMP_EINVAL for a ring without a valid current key (nothing changed). */
int data_server_set_keys(data_server *s, const ticket_keyring *keys);

/* Serve TLS with ctx from the next connection on (a reloaded certificate;
 * the server takes a reference and lets its old context go); connections
 * already accepted keep their sessions. Loop thread only. SMP_EINVAL when
 * the port is plaintext or ctx is NULL (nothing changed). */
int data_server_set_tls(data_server *s, SSL_CTX *ctx);

/* Serve seg (borrowed) under its id. SMP_EEXIST when a segment of that id is
 * served, SMP_ENOMEM. */
int data_server_add_segment(data_server *s, seg_segment *seg);

/* Serve READ_COLD from ct (borrowed; NULL: refuse them with SMP_ENOTSUP).
 * ct must stay open until the server is closed and its loop has run to the
 * end (a chunk read may be out on the threadpool until then). A cold file
 * refused for a bad header or size is noted in faults (borrowed, may be
 * NULL), for the node to tell its master (node_cold_faults.h). */
void data_server_set_cold(data_server *s, const cold_tier *ct, cold_faults *faults);

/* Bind and listen. SIGPIPE is set to ignored if it still has its default
 * action. SMP_OK, SMP_EINVAL (bad address), SMP_EIO (bind / listen failed),
 * SMP_ESTATE (already started); err names the address and the cause. */
int data_server_start(data_server *s, char *err, size_t errlen);

/* The bound TCP port (useful with port 0), or -1 before start. */
int data_server_tcp_port(const data_server *s);

/* Stop listening and close every connection; the memory goes once the
 * handles have closed (run the loop). NULL is a no-op. */
void data_server_close(data_server *s);

void data_server_get_stats(const data_server *s, data_server_stats *out);

/* A ticketed write the server is receiving: its ticket checked, its bytes
 * not all in. */
typedef struct data_write {
    char key[TICKET_KEY_MAX + 1];         /* the object key its ticket names */
    char segment[TICKET_SEGMENT_MAX + 1];
    uint64_t offset;
} data_write;

/* Copy up to max of the writes running now into out; returns how many run
 * (may be more than max). The one call that may come from another thread
 * than the loop's (the node reports them with each poll, so that the master
 * keeps a put whose bytes are still arriving, however long they take). */
size_t data_server_writing(data_server *s, data_write *out, size_t max);

#endif /* HOST_NODE_DATA_H */
