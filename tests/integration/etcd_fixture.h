/* etcd_fixture.h -- a real etcd cluster (1 or 3 members) for integration tests.
 *
 * Starts Debian's /usr/bin/etcd as child processes on free loopback ports,
 * each member with its data directory under one mkdtemp directory in /tmp
 * and its log in a file beside it (the tail is printed when a member does
 * not come up), with fast raft timings (heartbeat 50 ms, election 500 ms)
 * and an initial-cluster token unique to the fixture. A test can stop
 * (SIGSTOP), continue, kill (SIGKILL) and restart one member. Everything is
 * stopped and removed by etcd_fixture_cleanup -- and, for a test that
 * failed before it got there, by an atexit handler; the members also die
 * with the test thread (PR_SET_PDEATHSIG). Nothing is mocked. */
#ifndef TEST_ETCD_FIXTURE_H
#define TEST_ETCD_FIXTURE_H

#include <stddef.h>
#include <sys/types.h>

#include "etcd_client.h"

#define ETCD_FIXTURE_MAX_MEMBERS 3

typedef struct etcd_fixture_member {
    char name[16];            /* "m0", "m1", ... */
    char data_dir[300];
    char log[300];
    char endpoint[64];        /* "127.0.0.1:port" (client URL without scheme) */
    int client_port;
    int peer_port;
    pid_t pid;                /* 0 when not running */
} etcd_fixture_member;

typedef struct etcd_fixture {
    char dir[256];            /* the mkdtemp directory holding every member */
    /* TLS (etcd_fixture_start_tls): "" when the members speak plaintext,
     * else the directory of hx_make_certs' files, which the members serve
     * with (server.pem, server.key; clients checked against ca.pem when
     * client_cert_auth) */
    char certs[300];
    int client_cert_auth;
    char *tls_pem[3];         /* ca.pem, client.pem, client.key: what the fixture's client uses */
    char token[96];           /* --initial-cluster-token */
    unsigned auth_token_ttl_s; /* --auth-token-ttl of the members started (or restarted)
                                * after it is set; 0: etcd's (300 s) */
    char auth_token[700];     /* --auth-token of the members started after it is set,
                                * e.g. "jwt,pub-key=...,priv-key=...,sign-method=RS256";
                                * "": etcd's simple tokens */
    char initial_cluster[512];
    char endpoints[256];      /* "h:p,h:p,h:p", every member */
    size_t n;
    etcd_fixture_member m[ETCD_FIXTURE_MAX_MEMBERS];
} etcd_fixture;

/* Start an n-member cluster (n is 1 or 3) named after the test and wait
 * up to timeout_ms until every member answers a Status call and sees a
 * leader; a start that lost a port to another process before etcd bound
 * it is tried again on new ports (up to 5 times). Returns 0, or -1 (a
 * member's log tail is printed, everything started is stopped and
 * removed). */
int etcd_fixture_start(etcd_fixture *f, const char *name, size_t n, int timeout_ms);

/* The same with TLS on every member's client port: certificates made in
 * <dir>/certs (hx_make_certs: server.pem for 127.0.0.1, signed by ca.pem;
 * client.pem / client.key signed by it too; other-ca.pem signs nothing),
 * and with client_cert_auth, a client must present a certificate ca.pem
 * signed (etcd's --client-cert-auth). */
int etcd_fixture_start_tls(etcd_fixture *f, const char *name, size_t n, int timeout_ms,
                           int client_cert_auth);

/* Fill o's TLS fields for f's members (as the fixture's own client: ca.pem
 * and the client certificate); nothing for a plaintext fixture. */
void etcd_fixture_client_tls(const etcd_fixture *f, etcd_client_options *o);

/* Every member's client endpoint, comma-separated. */
const char *etcd_fixture_endpoints(const etcd_fixture *f);

/* Member i's "127.0.0.1:port". */
const char *etcd_fixture_endpoint(const etcd_fixture *f, size_t i);

/* SIGSTOP / SIGCONT member i. Return 0 or -1. */
int etcd_fixture_pause(etcd_fixture *f, size_t i);
int etcd_fixture_resume(etcd_fixture *f, size_t i);

/* SIGKILL member i and reap it (its data directory stays). 0 or -1. */
int etcd_fixture_kill(etcd_fixture *f, size_t i);

/* Start member i again on its data directory and wait up to timeout_ms
 * until it answers and sees a leader. 0 or -1. */
int etcd_fixture_restart(etcd_fixture *f, size_t i, int timeout_ms);

/* Start every member that is not running on its data directory, all
 * before any wait (members that need each other for a quorum), and wait up
 * to timeout_ms until each answers and sees a leader. 0 or -1. */
int etcd_fixture_restart_all(etcd_fixture *f, int timeout_ms);

/* Run Debian's etcdctl (v3 API) with args on f's members: over TLS
 * trusting the fixture's CA when it serves TLS, with the fixture's client
 * certificate when it asks for one, and as "user:password" when as is set
 * (may be NULL). Its output is appended to <dir>/etcdctl.log. 0 when it
 * exits 0, else -1. */
int etcd_fixture_etcdctl(const etcd_fixture *f, const char *as, const char *args);

/* Kill every member and remove the directory. Safe to call twice. */
void etcd_fixture_cleanup(etcd_fixture *f);

/* An unused loopback TCP port (bound and released), or -1. */
int etcd_fixture_free_port(void);

#endif /* TEST_ETCD_FIXTURE_H */
