/* main_store_node.c -- the store_node program: a node on its own.
 *
 * Contributes one shm-backed memory segment and a cold directory to a master,
 * serves payload bytes to clients, and carries out the master's replica
 * tasks (node_runtime.c); --master takes one master or the list of an HA
 * cluster's masters. Reads and writes need the master's tickets; reads
 * without one are served only with --no-read-tickets, which is refused
 * unless --allow-insecure is given as well. --data-tls-cert and
 * --data-tls-key make the data port speak TLS 1.3 only (the master tells
 * clients so); bad files stop the node at start, naming the flag and the
 * cause, and one without the other is refused with the other bad
 * arguments (exit 2, before anything is created). SIGHUP rotates the
 * ticket key (after the first rotation, refused and logged while the
 * previous key, which a rotation forgets, may still sign live tickets) and
 * reads the data port's certificate and key again (files that do not load
 * leave the ones served before; logged either way).
 * --tenant dedicates the node to one tenant: the master places only that
 * tenant's objects on it, and the node hands its segment to that tenant's
 * co-located processes on --local-socket, to the uids and gids
 * --local-peer lists (node_local.h). Runs until SIGINT or SIGTERM; the
 * segment file stays, so a node restarted on the same directory comes
 * back with its data and the master reconciles it. */
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master_list.h"
#include "node_runtime.h"
#include "rpc_auth.h"
#include "store_plugin.h"
#include "wc_token.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: store_node --master ADDR --id ID --segment-dir DIR --segment-bytes N\n"
            "                  --cold-dir DIR [--listen HOST:PORT] [--advertise HOST]\n"
            "                  [--verify-from-device] [--segment-prefault]\n"
            "                  [--no-read-tickets --allow-insecure]\n"
            "                  [--token-file FILE] [--data-tls-cert FILE --data-tls-key FILE]\n"
            "                  [--tenant NAME --local-socket PATH --local-peer uid:N|gid:N ...]\n"
            "  ADDR is the master's RPC endpoint (host:port or a Unix socket path), or\n"
            "  the masters of an HA cluster as a list a,b,c: the node registers with\n"
            "  the leader and follows it when another master takes over\n"
            "  ID names the node and its segment (<segment-dir>/<ID>.seg)\n"
            "  --segment-prefault touches every page of the segment once in the\n"
            "  background after the start, so TCP puts land in touched pages\n"
            "  --no-read-tickets serves reads without a master's ticket: INSECURE,\n"
            "  refused unless --allow-insecure is given too\n"
            "  SIGHUP rotates the key the master signs this node's tickets with, and\n"
            "  reloads --data-tls-cert / --data-tls-key for the next connections\n"
            "  FILE holds the admin token the node presents to a master with auth\n"
            "  on (default: the environment's WEIGHT_TOKEN)\n"
            "  --tenant dedicates the node to tenant NAME: the master places only its\n"
            "  objects here, and the node hands its segment (zero-copy) over the Unix\n"
            "  socket PATH to processes whose uid or gid a --local-peer names; everyone\n"
            "  else reads through the data port with tickets. Without --tenant the node\n"
            "  is shared: with auth on, clients always read it through the data port\n"
            "  --data-tls-cert/--data-tls-key: TLS 1.3 only on the data port, with this\n"
            "  PEM certificate (naming the advertised host) and its key\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"master", required_argument, NULL, 'm'},
        {"id", required_argument, NULL, 'i'},
        {"segment-dir", required_argument, NULL, 's'},
        {"segment-bytes", required_argument, NULL, 'b'},
        {"cold-dir", required_argument, NULL, 'c'},
        {"listen", required_argument, NULL, 'l'},
        {"advertise", required_argument, NULL, 'a'},
        {"verify-from-device", no_argument, NULL, 'v'},
        {"segment-prefault", no_argument, NULL, 'F'},
        {"no-read-tickets", no_argument, NULL, 'R'},
        {"allow-insecure", no_argument, NULL, 'I'},
        {"token-file", required_argument, NULL, 't'},
        {"tenant", required_argument, NULL, 'T'},
        {"local-socket", required_argument, NULL, 'S'},
        {"local-peer", required_argument, NULL, 'P'},
        {"data-tls-cert", required_argument, NULL, 'C'},
        {"data-tls-key", required_argument, NULL, 'K'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    node_runtime_options o = {.data_listen = "127.0.0.1:0"};
    static char token[WC_TOKEN_MAX + 1];
    static node_local_peers peers;
    char terr[600];
    char *end = NULL;
    int c, insecure = 0;
    while ((c = getopt_long(argc, argv, "m:i:s:b:c:l:a:vt:T:S:P:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': o.master = optarg; break;
        case 'i': o.node_id = optarg; break;
        case 's': o.segment_dir = optarg; break;
        case 'b':
            o.segment_bytes = strtoull(optarg, &end, 10);
            if (*end != '\0' || o.segment_bytes == 0) {
                fprintf(stderr, "store_node: --segment-bytes %s is not a positive integer\n", optarg);
                return 2;
            }
            break;
        case 'c': o.cold_dir = optarg; break;
        case 'l': o.data_listen = optarg; break;
        case 'a': o.advertise_host = optarg; break;
        case 'v': o.cold_verify_from_device = 1; break;
        case 'F': o.segment_prefault = 1; break;
        case 'R': o.allow_unticketed_reads = 1; break;
        case 'I': insecure = 1; break;
        case 't':
            if (wc_token_read_file(optarg, token, sizeof(token), terr, sizeof(terr)) < 0) {
                fprintf(stderr, "store_node: --token-file: %s\n", terr);
                return 2;
            }
            o.token = token;
            break;
        case 'T':
            char why[300];
            if (rpc_auth_tenant_check(optarg, why, sizeof(why)) < 0) {
                fprintf(stderr, "store_node: --tenant: %s\n", why);
                return 2;
            }
            o.tenant = optarg;
            break;
        case 'S': o.local_socket = optarg; break;
        case 'P':
            if (node_local_add_peer(&peers, optarg, terr, sizeof(terr)) < 0) {
                fprintf(stderr, "store_node: %s\n", terr);
                return 2;
            }
            o.local_peers = &peers;
            break;
        case 'C': o.data_tls_cert = optarg; break;
        case 'K': o.data_tls_key = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!o.master || !o.node_id || !o.segment_dir || !o.segment_bytes || !o.cold_dir || optind != argc) {
        usage(stderr);
        return 2;
    }
    if (o.allow_unticketed_reads && !insecure) {
        fprintf(stderr, "store_node: --no-read-tickets lets anyone who reaches the data port read "
                "any range; it needs --allow-insecure as well\n");
        return 2;
    }
    if (o.tenant == NULL && (o.local_socket != NULL || o.local_peers != NULL)) {
        fprintf(stderr, "store_node: --local-socket and --local-peer hand the segment to one "
                "tenant's processes; they need --tenant\n");
        return 2;
    }
    if (o.tenant != NULL && (o.local_socket == NULL || o.local_peers == NULL)) {
        fprintf(stderr, "store_node: --tenant %s needs --local-socket PATH and at least one "
                "--local-peer uid:N or gid:N (who may map the segment)\n", o.tenant);
        return 2;
    }
    int have_cert = o.data_tls_cert != NULL && o.data_tls_cert[0] != '\0';
    int have_key = o.data_tls_key != NULL && o.data_tls_key[0] != '\0';
    if (have_cert != have_key) {
        fprintf(stderr, "store_node: --data-tls-cert needs --data-tls-key (and the other way "
                "round)\n");
        return 2;
    }
    char bad[512];
    master_list masters;
    if (master_list_parse(o.master, &masters, bad, sizeof(bad)) < 0) {
        fprintf(stderr, "store_node: --master: %s\n", bad);
        return 2;
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* the node's threads inherit it */
    signal(SIGPIPE, SIG_IGN);

    char err[1024] = "";
    node_runtime *n = NULL;
    if (node_runtime_start(&o, &n, err, sizeof(err)) < 0) {
        fprintf(stderr, "store_node: %s\n", err);
        return 1;
    }
    fprintf(stderr, "store_node %s: data port %d%s, master %s\n", o.node_id,
            node_runtime_data_port(n), o.data_tls_cert ? " (TLS)" : "", o.master);
    if (o.tenant != NULL)
        fprintf(stderr, "store_node %s: dedicated to tenant %s; segment handed to %zu uid(s) and "
                "%zu gid(s) on %s\n", o.node_id, o.tenant, peers.n_uids, peers.n_gids,
                o.local_socket);
    if (o.allow_unticketed_reads)
        fprintf(stderr, "store_node %s: INSECURE: reads without a ticket are served\n", o.node_id);
    int sig = 0;
    while (sigwait(&set, &sig) == 0 && sig == SIGHUP) {
        char what[512];
        if (node_runtime_rotate_ticket_key(n, err, sizeof(err)) < 0)
            fprintf(stderr, "store_node %s: SIGHUP: ticket key not rotated: %s\n", o.node_id, err);
        int tls = node_runtime_reload_tls(n, what, sizeof(what), err, sizeof(err));
        if (tls < 0)
            fprintf(stderr, "store_node %s: SIGHUP: data port certificate not reloaded, the one "
                    "loaded before serves on: %s\n", o.node_id, err);
        else if (tls > 0)
            fprintf(stderr, "store_node %s: SIGHUP: data port certificate reloaded from %s: %s\n",
                    o.node_id, o.data_tls_cert, what);
    }
    fprintf(stderr, "store_node %s: signal %d, stopping\n", o.node_id, sig);
    node_runtime_stop(n);
    return 0;
}
