/* etcd_client_auth.c -- etcd's password auth for the etcd client: the
 * Authenticate call that trades the user's password for a token, the one
 * token the client's calls share, and which refusals mean that token is no
 * longer good (etcd_client_internal.h).
 *
 * etcd keeps simple tokens in memory, so a restarted member has forgotten
 * them, a token expires when it goes unused, and a user's password changed
 * drops its tokens; a JWT also turns old with any change of users or roles
 * after it was given. Each is a refusal of the
 * call before it is applied, so ecl_exchange authenticates again and makes
 * the call once more. Like etcd's own client, a client given a user against
 * an etcd whose auth is off sends no token (until a call is refused for
 * the want of one: auth was turned on).
 *
 * Given the password's file, every Authenticate reads it again, so that a
 * password rotated there and then in etcd (which makes every token old) is
 * the one the next login sends, without a restart. */
#include <grpc/grpc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_client_internal.h"
#include "store_plugin.h"
#include "wc_token.h"

int ecl_auth_init(etcd_client *c, const etcd_client_options *o)
{
    if (o->user == NULL) return 0;
    c->user = strdup(o->user);
    c->password = strdup(o->password);
    if (o->password_file != NULL) c->password_file = strdup(o->password_file);
    if (c->user == NULL || c->password == NULL ||
        (o->password_file != NULL && c->password_file == NULL)) {
        ecl_auth_free(c);
        return SMP_ENOMEM;
    }
    return 0;
}

void ecl_auth_free(etcd_client *c)
{
    if (c->password != NULL) explicit_bzero(c->password, strlen(c->password));
    explicit_bzero(c->token, sizeof(c->token));
    free(c->password);
    free(c->user);
    free(c->password_file);
    c->password = c->user = c->password_file = NULL;
}

/* The password the next Authenticate sends, into pw (cap: WC_TOKEN_MAX +
 * 1): the one held, after reading the password file again where there is
 * one. A password changed in the file replaces the held one (said on
 * stderr, once per change); a file that cannot be read leaves the held one,
 * said once until the file reads again. 0 or SMP_ENOMEM. */
static int login_password(etcd_client *c, char *pw, size_t cap)
{
    char fresh[WC_TOKEN_MAX + 1], why[512];
    int rc = 0, read_rc = 0;
    if (c->password_file != NULL)
        read_rc = wc_token_read_file(c->password_file, fresh, sizeof(fresh), why, sizeof(why));
    pthread_mutex_lock(&c->mu);
    if (c->password_file != NULL && read_rc < 0 && !c->password_file_failing) {
        c->password_file_failing = 1;
        fprintf(stderr, "etcd client: %s; user \"%s\" logs in with the password read before\n",
                why, c->user);
    } else if (c->password_file != NULL && read_rc == 0) {
        c->password_file_failing = 0;
        if (strcmp(fresh, c->password) != 0) {
            char *next = strdup(fresh);
            if (next == NULL) {
                rc = SMP_ENOMEM;
                goto unlock;
            }
            explicit_bzero(c->password, strlen(c->password));
            free(c->password);
            c->password = next;
            fprintf(stderr, "etcd client: the password of user \"%s\" changed in %s; logging in "
                            "with the new one\n", c->user, c->password_file);
        }
    }
    snprintf(pw, cap, "%s", c->password);
unlock:
    pthread_mutex_unlock(&c->mu);
    explicit_bzero(fresh, sizeof(fresh));
    return rc;
}

/* Authenticate on member ep: the new token into c and out. */
static int authenticate(etcd_client *c, grpc_channel *ch, const char *ep, char *out, size_t cap,
                        etcd_fail *fail, char *err, size_t errlen)
{
    Etcdserverpb__AuthenticateRequest req = ETCDSERVERPB__AUTHENTICATE_REQUEST__INIT;
    Etcdserverpb__AuthenticateResponse *resp = NULL;
    uint8_t *body = NULL, *answer = NULL;
    size_t answer_len = 0;
    char pw[WC_TOKEN_MAX + 1];
    int rc;
    if (login_password(c, pw, sizeof(pw)) < 0) {
        ecl_set_err(err, errlen, "etcd %s %s: out of memory", ep, M_AUTHENTICATE);
        *fail = FAIL_ETCD;
        return SMP_ENOMEM;
    }
    req.name = c->user;
    req.password = pw;
    size_t len = etcdserverpb__authenticate_request__get_packed_size(&req);
    body = malloc(len ? len : 1);
    if (body != NULL) etcdserverpb__authenticate_request__pack(&req, body);
    explicit_bzero(pw, sizeof(pw));
    if (body == NULL) {
        ecl_set_err(err, errlen, "etcd %s %s: out of memory", ep, M_AUTHENTICATE);
        *fail = FAIL_ETCD;
        return SMP_ENOMEM;
    }
    rc = ecl_exchange(c, ch, ep, M_AUTHENTICATE, body, len, &answer, &answer_len, fail, err, errlen);
    explicit_bzero(body, len);
    free(body);
    if (rc < 0) {
        if (err != NULL && strstr(err, "authentication is not enabled") != NULL) {
            pthread_mutex_lock(&c->mu); /* etcd's auth is off: no token, as etcd's client */
            c->auth_off = 1;
            pthread_mutex_unlock(&c->mu);
            out[0] = '\0';
            *fail = FAIL_NONE;
            return 0;
        }
        size_t n = err ? strlen(err) : 0;
        if (err != NULL && n + 1 < errlen)
            snprintf(err + n, errlen - n, " (authenticating as user \"%s\")", c->user);
        return rc;
    }
    resp = etcdserverpb__authenticate_response__unpack(NULL, answer_len, answer);
    free(answer);
    if (resp == NULL || resp->token == NULL || resp->token[0] == '\0' ||
        strlen(resp->token) >= ETCD_TOKEN_MAX || strlen(resp->token) >= cap) {
        ecl_set_err(err, errlen, "etcd %s %s: %s", ep, M_AUTHENTICATE,
                    resp == NULL ? "the answer does not decode" : "no usable token in the answer");
        *fail = FAIL_ETCD;
        rc = SMP_EPROTO;
        goto free_resp;
    }
    pthread_mutex_lock(&c->mu);
    snprintf(c->token, sizeof(c->token), "%s", resp->token);
    c->auth_off = 0;
    pthread_mutex_unlock(&c->mu);
    snprintf(out, cap, "%s", resp->token);
free_resp:
    if (resp != NULL) {
        if (resp->token != NULL) explicit_bzero(resp->token, strlen(resp->token));
        etcdserverpb__authenticate_response__free_unpacked(resp, NULL);
    }
    return rc;
}

int ecl_auth_token(etcd_client *c, grpc_channel *ch, const char *ep, char *out, size_t cap,
                   etcd_fail *fail, char *err, size_t errlen)
{
    out[0] = '\0';
    if (c->user == NULL) return 0;
    pthread_mutex_lock(&c->mu);
    int off = c->auth_off;
    snprintf(out, cap, "%s", c->token);
    pthread_mutex_unlock(&c->mu);
    if (off || out[0] != '\0') return 0;
    return authenticate(c, ch, ep, out, cap, fail, err, errlen);
}

void ecl_auth_metadata(grpc_op *op, grpc_metadata *md, const char *token)
{
    memset(md, 0, sizeof(*md));
    if (token[0] == '\0') return;
    md->key = grpc_slice_from_static_string("token");
    md->value = grpc_slice_from_static_string(token);
    op->data.send_initial_metadata.count = 1;
    op->data.send_initial_metadata.metadata = md;
}

int ecl_auth_token_refused(etcd_client *c, const char *token, grpc_status_code s,
                           const char *details)
{
    if (c->user == NULL) return 0;
    if (s != GRPC_STATUS_UNAUTHENTICATED && strstr(details, "invalid auth token") == NULL &&
        strstr(details, "revision of auth store is old") == NULL &&
        strstr(details, "user name is empty") == NULL)
        return 0;
    pthread_mutex_lock(&c->mu);
    if (strcmp(c->token, token) == 0) explicit_bzero(c->token, sizeof(c->token));
    c->auth_off = 0;
    pthread_mutex_unlock(&c->mu);
    return 1;
}
