/* master_tls_reload.c -- SIGHUP's reload of the master's certificate.
 *
 * Certificates are short-lived where they are managed well, and a master
 * that reads tls.cert only at its start would need a restart before each
 * expiry. On SIGHUP the master reads tls.cert, tls.key and tls.ca again,
 * with every check of the start (host_config_load_tls: the files PEM, the
 * key matching, the embedded node's trust in the new certificate), and
 * serves the result from the next connection on: on the RPC port, on the
 * embedded node's data port (which takes tls.cert too) and on the admin
 * endpoint. Connections already made keep their sessions. Files that do
 * not pass leave everything serving what it served, and the log says why;
 * nothing here can stop the master. What is read at the start only: the
 * certificate the master presents to etcd (ha.etcd_tls_*), whose gRPC
 * channels are made once. */
#include <stdio.h>

#include "admin_http.h"
#include "master_internal.h"
#include "node_runtime.h"
#include "rpc_tls.h"

void master_reload_tls(master *m)
{
    const host_config *cfg = m->cfg;
    char err[1600], what[512];
    SSL_CTX *ctx = NULL;
    if (cfg->tls_cert[0] == '\0') return; /* TLS off: a reload never turns it on */
    if (host_config_load_tls(cfg, &ctx, err, sizeof(err)) < 0) {
        fprintf(stderr, "store_master: SIGHUP: TLS certificate not reloaded, the one loaded "
                "before serves on: %s\n", err);
        return;
    }
    rpc_tls_describe(ctx, what, sizeof(what));
    if (m->rpc != NULL && cfg->listen_tcp[0] != '\0') rpc_server_set_tls(m->rpc, ctx);
    SSL_CTX_free(m->files.tls);
    m->files.tls = ctx;
    fprintf(stderr, "store_master: SIGHUP: TLS certificate reloaded from %s (%s): served from "
            "the next connection on\n", cfg->tls_cert, what);
    if (m->embedded_node != NULL &&
        node_runtime_reload_tls(m->embedded_node, NULL, 0, err, sizeof(err)) < 0)
        fprintf(stderr, "store_master: SIGHUP: the embedded node's data port keeps the "
                "certificate loaded before: %s\n", err);
    if (m->admin != NULL &&
        admin_http_reload_tls(&m->admin, cfg->tls_cert, cfg->tls_key, cfg->tls_ca, err,
                              sizeof(err)) < 0)
        fprintf(stderr, "store_master: SIGHUP: %s: %s\n",
                m->admin != NULL ? "the admin endpoint keeps the certificate loaded before"
                                 : "the admin endpoint stopped (it could not be started again)",
                err);
}
