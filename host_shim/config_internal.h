/* config_internal.h -- what the parts of the config loader share: the load
 * in progress and its single message, key paths for messages, the document
 * tree and its lookups (config_tree.c), used by the schema (config.c) and
 * the sections parsed in files of their own (config_auth.c, ...). Not part
 * of the loader's API (config.h). */
#ifndef HOST_CONFIG_INTERNAL_H
#define HOST_CONFIG_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

#define CFG_KEY_PATH_MAX 256 /* "a.b[3].c" buffer */
#define CFG_QUOTE_MAX 64     /* longest value echoed in a message */

/* One load in progress: where its single message goes. */
typedef struct cfg_ctx {
    const char *name;   /* file name for messages */
    char *err;          /* caller's buffer, may be NULL */
    size_t errlen;
    int failed;         /* a message was written; later ones are dropped */
} cfg_ctx;

/* Record the failure of the load as "NAME:LINE: PATH: cause" (LINE left out
 * when 0, PATH when NULL; an empty PATH is the top level). Only the first
 * message of a load is kept. Returns rc so callers can `return cfg_fail(..)`. */
int cfg_fail(cfg_ctx *c, int rc, int line, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
int cfg_oom(cfg_ctx *c);

/* Read the whole file at path (at most max bytes) into a NUL-terminated
 * heap buffer *out (caller frees), *out_len its length (may be NULL).
 * SMP_OK, or SMP_EIO / SMP_EINVAL (larger than max) / SMP_ENOMEM with why
 * saying so ("cannot open: ...", "larger than N bytes", "cannot read: ...").
 * The config file and the PEM files the etcd client is given
 * (config_files.c). */
int cfg_read_text(const char *path, size_t max, char **out, size_t *out_len, char *why,
                  size_t whylen);

/* Write `text` into buf as a double-quoted, escaped string fit for a
 * one-line message, cut after CFG_QUOTE_MAX bytes (buf holds CFG_QUOTE_MAX +
 * 16). */
void cfg_quote_text(char *buf, size_t buflen, const char *text);

/* Key paths for messages: "listen.tcp", "plugins[0].path" (out holds
 * CFG_KEY_PATH_MAX bytes). */
void cfg_path_key(char *out, const char *parent, const char *key);
void cfg_path_index(char *out, const char *parent, size_t i);

/* The len bytes of YAML as a document tree in *root (NULL for a stream
 * without a document; the caller frees it with cfg_node_free). Refuses, with
 * the load's message, what the tree cannot hold faithfully: aliases, tags,
 * non-scalar or duplicate keys, several documents, NUL bytes, deep nesting,
 * and libyaml's syntax errors. 0 or the load's code. */
int cfg_parse_tree(cfg_ctx *c, const char *yaml, size_t len, host_config_node **root);
/* A tree and every node below it (NULL is fine). */
void cfg_node_free(host_config_node *n);

/* "a mapping", "a sequence", "a string", ... for messages. */
const char *cfg_node_kind_name(const host_config_node *n);
/* 1 for an unquoted null scalar ("", ~, null). */
int cfg_node_is_null(const host_config_node *n);
/* The child of a MAP under key, or NULL. */
host_config_node *cfg_node_child(const host_config_node *map, const char *key);

/* An integer scalar n checked against [min, max] (and type_max, the width of
 * its field) into *out; the message names path. 0 or the load's code. */
int cfg_check_uint(cfg_ctx *c, const host_config_node *n, const char *path, uint64_t min,
                   uint64_t max, uint64_t type_max, uint64_t *out);

/* -- config_auth.c ---------------------------------------------------------- */

/* auth.tokens into cfg->auth_tokens (seq is a SEQ). 0 or the load's code. */
int cfg_apply_tokens(cfg_ctx *c, host_config *cfg, host_config_node *seq, const char *path);
/* auth.limits into cfg->auth_limits (map is a MAP). 0 or the load's code. */
int cfg_apply_limits(cfg_ctx *c, host_config *cfg, host_config_node *map, const char *path);

/* auth.certificates into cfg->auth_certs (seq is a SEQ). 0 or the load's code. */
int cfg_apply_certificates(cfg_ctx *c, host_config *cfg, host_config_node *seq, const char *path);
/* The rules across auth.* and listen.tcp, once the whole file is applied. */
int cfg_check_auth(cfg_ctx *c, const host_config *cfg, const host_config_node *root);

/* -- config_node.c ---------------------------------------------------------- */

/* node.local_peers ("uid:N" / "gid:N" each) into cfg->node_local_peers (seq
 * is a SEQ). 0 or the load's code. */
int cfg_apply_local_peers(cfg_ctx *c, host_config *cfg, host_config_node *seq, const char *path);
/* The rules across node.* (and listen.*), once the whole file is applied. */
int cfg_check_node(cfg_ctx *c, const host_config *cfg, const host_config_node *root);

/* -- config_listen.c -------------------------------------------------------- */

/* The master process's own listeners (listen.tcp, listen.admin, the
 * embedded node's node.data_listen; listen.unix and node.local_socket) must
 * not share an address and port (or a path): once the whole file is
 * applied and its paths resolved (root may be NULL: all defaults). 0 or the
 * load's code. */
int cfg_check_listeners(cfg_ctx *c, const host_config *cfg, const host_config_node *root);

#endif /* HOST_CONFIG_INTERNAL_H */
