/* master_tls_reload.c -- SIGHUP's reload of the master's certificate.
 *
 * Certificates are short-lived where they are managed well, and a master
 * that reads tls.cert only at its start would need a restart before each
 * expiry. On SIGHUP the master reads tls.cert, tls.key and tls.ca again,
 * with every check of the start (host_config_load_tls: the files PEM, the
 * key matching, the embedded node's trust in the new certificate), and
 * serves the result from the next connection on: on the RPC port, on the
 * embedded node's data port (which takes tls.cert too) and on the admin
 * endpoint. Connections already made to the RPC and data ports keep their
 * sessions; the admin endpoint's old daemon answers what it holds and
 * closes its connections (admin_http_reload_tls). With HA over
 * TLS, ha.etcd_tls_ca, _cert and _key are read again too, and the etcd
 * clients (the OpLog's and the election's) make new channels with them
 * for their calls from then on; calls and watches under way finish on the
 * old ones. Files that do not pass leave everything serving what it
 * served, and the log says why; nothing here can stop the master. */
#include <stdio.h>
#include <string.h>

#include "admin_http.h"
#include "etcd_client.h"
#include "ha_election.h"
#include "master_internal.h"
#include "node_runtime.h"
#include "rpc_tls.h"

void master_tls_note_expiry(master *m)
{
    if (rpc_tls_not_after(m->files.tls, NULL, &m->tls_not_after) < 0) m->tls_not_after = 0;
    if (rpc_tls_not_after(NULL, m->files.etcd_cert_pem, &m->etcd_cert_not_after) < 0)
        m->etcd_cert_not_after = 0;
}

/* ha.etcd_tls_*: read and checked again, then handed to both etcd
 * clients and kept in m->files for the clients opened later. */
static void reload_etcd_tls(master *m)
{
    const host_config *cfg = m->cfg;
    host_config_files fresh;
    char err[1600];
    int rc;
    memset(&fresh, 0, sizeof(fresh));
    if (!cfg->ha_enabled || cfg->ha_etcd_tls_ca[0] == '\0') return;
    if (host_config_load_etcd_tls(cfg, &fresh, err, sizeof(err)) < 0) {
        fprintf(stderr, "store_master: SIGHUP: etcd TLS files not reloaded, the ones loaded "
                "before serve on: %s\n", err);
        goto free_fresh;
    }
    if (m->etcd != NULL &&
        (rc = etcd_client_reload_tls(m->etcd, fresh.etcd_ca_pem, fresh.etcd_cert_pem,
                                     fresh.etcd_key_pem, err, sizeof(err))) < 0) {
        fprintf(stderr, "store_master: SIGHUP: etcd TLS files not reloaded: %s\n", err);
        goto free_fresh;
    }
    if (m->election != NULL &&
        (rc = ha_election_reload_tls(m->election, fresh.etcd_ca_pem, fresh.etcd_cert_pem,
                                     fresh.etcd_key_pem, err, sizeof(err))) < 0) {
        fprintf(stderr, "store_master: SIGHUP: etcd TLS files taken by the OpLog's etcd client "
                "but not by the election's, which keeps those loaded before: %s\n", err);
        goto free_fresh;
    }
    /* m->files keeps the new text, for the clients opened from now on */
    char *swap[3] = {m->files.etcd_ca_pem, m->files.etcd_cert_pem, m->files.etcd_key_pem};
    m->files.etcd_ca_pem = fresh.etcd_ca_pem;
    m->files.etcd_cert_pem = fresh.etcd_cert_pem;
    m->files.etcd_key_pem = fresh.etcd_key_pem;
    fresh.etcd_ca_pem = swap[0];
    fresh.etcd_cert_pem = swap[1];
    fresh.etcd_key_pem = swap[2];
    master_tls_note_expiry(m);
    fprintf(stderr, "store_master: SIGHUP: etcd TLS files reloaded (ha.etcd_tls_ca %s%s%s): new "
            "connections to etcd use them\n", cfg->ha_etcd_tls_ca,
            cfg->ha_etcd_tls_cert[0] ? ", ha.etcd_tls_cert " : "", cfg->ha_etcd_tls_cert);
free_fresh:
    host_config_files_free(&fresh);
}

void master_reload_tls(master *m)
{
    const host_config *cfg = m->cfg;
    char err[1600], what[512];
    SSL_CTX *ctx = NULL;
    reload_etcd_tls(m);
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
    master_tls_note_expiry(m);
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
