/* config_tree.c -- the first step of loading the configuration: libyaml's
 * event stream into a tree of host_config_node (maps, sequences, scalars
 * with their lines and keys), and the load's one message.
 *
 * The tree refuses what it cannot express faithfully: aliases, tags (a
 * `!!binary` value would otherwise be read as its text), non-scalar keys,
 * duplicate keys, several documents, NUL bytes, nesting past CFG_MAX_DEPTH.
 * The schema that walks the tree is config.c's. */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "config.h"
#include "config_internal.h"

#define CFG_MAX_DEPTH 64 /* deepest nesting accepted */

/* ------------------------------------------------------------------------ */
/* Messages                                                                  */
/* ------------------------------------------------------------------------ */

/* Record the failure of the load as "NAME:LINE: PATH: cause" (LINE left out
 * when 0, PATH when NULL; an empty PATH is the top level). Only the first
 * message of a load is kept. Returns rc so callers can `return cfg_fail(..)`. */
int cfg_fail(cfg_ctx *c, int rc, int line, const char *path, const char *fmt, ...)
{
    char msg[512];
    char where[32] = "";
    va_list ap;

    if (c->failed) return rc;
    c->failed = 1;
    if (c->err == NULL || c->errlen == 0) return rc;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (line > 0) snprintf(where, sizeof(where), ":%d", line);
    if (path != NULL)
        snprintf(c->err, c->errlen, "%s%s: %s: %s", c->name, where,
                 path[0] != '\0' ? path : "top level", msg);
    else
        snprintf(c->err, c->errlen, "%s%s: %s", c->name, where, msg);
    return rc;
}

int cfg_oom(cfg_ctx *c)
{
    return cfg_fail(c, SMP_ENOMEM, 0, NULL, "out of memory");
}

/* Write `text` into buf as a double-quoted, escaped, possibly shortened
 * string fit for a one-line message. */
void cfg_quote_text(char *buf, size_t buflen, const char *text)
{
    size_t o = 0;
    size_t n = 0;
    if (buflen < 8) {
        if (buflen > 0) buf[0] = '\0';
        return;
    }
    buf[o++] = '"';
    for (const char *p = text; *p != '\0'; p++, n++) {
        unsigned char ch = (unsigned char)*p;
        if (n >= CFG_QUOTE_MAX || o + 6 >= buflen) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        if (ch == '"' || ch == '\\') {
            buf[o++] = '\\';
            buf[o++] = (char)ch;
        } else if (ch == '\n') {
            buf[o++] = '\\';
            buf[o++] = 'n';
        } else if (ch < 0x20 || ch == 0x7f) {
            buf[o++] = '?';
        } else {
            buf[o++] = (char)ch;
        }
    }
    buf[o++] = '"';
    buf[o] = '\0';
}

/* Key paths for messages: "listen.tcp", "plugins[0].path". out holds
 * CFG_KEY_PATH_MAX bytes; an absurdly long path is cut short (the message
 * stays useful). */
static void path_append(char *out, size_t used, const char *s)
{
    size_t n = strlen(s);
    if (used >= CFG_KEY_PATH_MAX) used = CFG_KEY_PATH_MAX - 1;
    if (n > CFG_KEY_PATH_MAX - 1 - used) n = CFG_KEY_PATH_MAX - 1 - used;
    memcpy(out + used, s, n);
    out[used + n] = '\0';
}

void cfg_path_key(char *out, const char *parent, const char *key)
{
    out[0] = '\0';
    path_append(out, 0, parent);
    if (out[0] != '\0') path_append(out, strlen(out), ".");
    path_append(out, strlen(out), key);
}

void cfg_path_index(char *out, const char *parent, size_t i)
{
    char idx[32];
    out[0] = '\0';
    path_append(out, 0, parent);
    sprintf(idx, "[%zu]", i);
    path_append(out, strlen(out), idx);
}

/* ------------------------------------------------------------------------ */
/* The document tree                                                         */
/* ------------------------------------------------------------------------ */

void cfg_node_free(host_config_node *n)
{
    if (n == NULL) return;
    for (size_t i = 0; i < n->n_items; i++) cfg_node_free(n->items[i]);
    free(n->items);
    free(n->key);
    free(n->scalar);
    free(n);
}

/* Append child to a MAP or SEQ; the array grows in powers of two. Returns 0
 * or SMP_ENOMEM (child not taken). */
static int node_append(host_config_node *parent, host_config_node *child)
{
    size_t n = parent->n_items;
    if ((n & (n - 1)) == 0) {
        size_t cap = n ? n * 2 : 1;
        host_config_node **items = realloc(parent->items, cap * sizeof(*items));
        if (items == NULL) return SMP_ENOMEM;
        parent->items = items;
    }
    parent->items[n] = child;
    parent->n_items = n + 1;
    return 0;
}

const char *cfg_node_kind_name(const host_config_node *n)
{
    switch (n->kind) {
    case HOST_CFG_SCALAR: return "a scalar";
    case HOST_CFG_MAP: return "a mapping";
    case HOST_CFG_SEQ: return "a sequence";
    }
    return "a node";
}

/* A plain empty, "~" or "null" scalar: YAML's null. */
int cfg_node_is_null(const host_config_node *n)
{
    if (n->kind != HOST_CFG_SCALAR || n->quoted) return 0;
    return strcmp(n->scalar, "") == 0 || strcmp(n->scalar, "~") == 0 ||
           strcmp(n->scalar, "null") == 0 || strcmp(n->scalar, "Null") == 0 ||
           strcmp(n->scalar, "NULL") == 0;
}

/* The child of a MAP under `key`, or NULL (also when the slot was moved out). */
host_config_node *cfg_node_child(const host_config_node *map, const char *key)
{
    if (map == NULL || map->kind != HOST_CFG_MAP) return NULL;
    for (size_t i = 0; i < map->n_items; i++) {
        host_config_node *c = map->items[i];
        if (c != NULL && c->key != NULL && strcmp(c->key, key) == 0) return c;
    }
    return NULL;
}

/* Turn libyaml's error into the load's message (with libyaml's line). */
static int syntax_error(cfg_ctx *c, const yaml_parser_t *p)
{
    int line;
    if (p->error == YAML_MEMORY_ERROR) return cfg_oom(c);
    line = (int)(p->error == YAML_READER_ERROR ? p->mark.line : p->problem_mark.line) + 1;
    if (p->context != NULL)
        return cfg_fail(c, SMP_EINVAL, line, NULL, "YAML syntax error: %s (%s)",
                        p->problem ? p->problem : "unknown problem", p->context);
    return cfg_fail(c, SMP_EINVAL, line, NULL, "YAML syntax error: %s",
                    p->problem ? p->problem : "unknown problem");
}

static int next_event(cfg_ctx *c, yaml_parser_t *p, yaml_event_t *ev)
{
    if (!yaml_parser_parse(p, ev)) return syntax_error(c, p);
    return 0;
}

static int build_node(cfg_ctx *c, yaml_parser_t *p, yaml_event_t *ev,
                      const char *path, int depth, host_config_node **out);

/* Copy a scalar event's text; refuses embedded NUL bytes. *out is owned by
 * the caller. */
static int scalar_copy(cfg_ctx *c, const yaml_event_t *ev, const char *path, char **out)
{
    const char *v = (const char *)ev->data.scalar.value;
    size_t len = ev->data.scalar.length;
    if (ev->data.scalar.tag != NULL)
        return cfg_fail(c, SMP_EINVAL, (int)ev->start_mark.line + 1, path,
                        "YAML tags (%s) are not supported", (const char *)ev->data.scalar.tag);
    if (memchr(v, '\0', len) != NULL)
        return cfg_fail(c, SMP_EINVAL, (int)ev->start_mark.line + 1, path,
                        "contains a NUL character");
    *out = strndup(v, len);
    return *out == NULL ? cfg_oom(c) : 0;
}

/* Read the pairs of a mapping up to its end event into map. Keys must be
 * scalars and unique. Fails with the message written; map keeps what was
 * appended (the caller frees it). */
static int build_map(cfg_ctx *c, yaml_parser_t *p, host_config_node *map,
                     const char *path, int depth)
{
    int rc;
    for (;;) {
        yaml_event_t ev;
        char child_path[CFG_KEY_PATH_MAX];
        char *key = NULL;
        int key_line;
        host_config_node *child = NULL;
        const host_config_node *first;

        if ((rc = next_event(c, p, &ev)) < 0) return rc;
        if (ev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&ev);
            return 0;
        }
        key_line = (int)ev.start_mark.line + 1;
        if (ev.type != YAML_SCALAR_EVENT) {
            yaml_event_delete(&ev);
            return cfg_fail(c, SMP_EINVAL, key_line, path, "a key must be a scalar");
        }
        rc = scalar_copy(c, &ev, path, &key);
        yaml_event_delete(&ev);
        if (rc < 0) return rc;
        cfg_path_key(child_path, path, key);
        first = cfg_node_child(map, key);
        if (first != NULL) {
            rc = cfg_fail(c, SMP_EINVAL, key_line, child_path,
                          "duplicate key (first at line %d)", first->key_line);
            goto free_key;
        }
        if ((rc = next_event(c, p, &ev)) < 0) goto free_key;
        if ((rc = build_node(c, p, &ev, child_path, depth + 1, &child)) < 0) goto free_key;
        child->key = key;
        child->key_line = key_line;
        key = NULL;
        if (node_append(map, child) < 0) {
            cfg_node_free(child);
            return cfg_oom(c);
        }
        continue;
    free_key:
        free(key);
        return rc;
    }
}

/* Read the items of a sequence up to its end event into seq. */
static int build_seq(cfg_ctx *c, yaml_parser_t *p, host_config_node *seq,
                     const char *path, int depth)
{
    int rc;
    for (;;) {
        yaml_event_t ev;
        char child_path[CFG_KEY_PATH_MAX];
        host_config_node *child = NULL;

        if ((rc = next_event(c, p, &ev)) < 0) return rc;
        if (ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            return 0;
        }
        cfg_path_index(child_path, path, seq->n_items);
        if ((rc = build_node(c, p, &ev, child_path, depth + 1, &child)) < 0) return rc;
        if (node_append(seq, child) < 0) {
            cfg_node_free(child);
            return cfg_oom(c);
        }
    }
}

/* Build the node that starts with *ev, reading further events for maps and
 * sequences. *ev is consumed (deleted) in every case. On success *out is a
 * new tree owned by the caller; on failure nothing is returned and the
 * message is written. */
static int build_node(cfg_ctx *c, yaml_parser_t *p, yaml_event_t *ev,
                      const char *path, int depth, host_config_node **out)
{
    int rc;
    int line = (int)ev->start_mark.line + 1;
    host_config_node *n = calloc(1, sizeof(*n));

    if (n == NULL) {
        rc = cfg_oom(c);
        goto delete_event;
    }
    n->line = line;
    switch (ev->type) {
    case YAML_SCALAR_EVENT:
        n->kind = HOST_CFG_SCALAR;
        n->quoted = ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
        if ((rc = scalar_copy(c, ev, path, &n->scalar)) < 0) goto free_node;
        yaml_event_delete(ev);
        *out = n;
        return 0;
    case YAML_MAPPING_START_EVENT:
    case YAML_SEQUENCE_START_EVENT:
        n->kind = ev->type == YAML_MAPPING_START_EVENT ? HOST_CFG_MAP : HOST_CFG_SEQ;
        const yaml_char_t *tag = n->kind == HOST_CFG_MAP ? ev->data.mapping_start.tag
                                                          : ev->data.sequence_start.tag;
        if (tag != NULL) {
            rc = cfg_fail(c, SMP_EINVAL, line, path, "YAML tags (%s) are not supported",
                          (const char *)tag);
            goto free_node;
        }
        if (depth >= CFG_MAX_DEPTH) {
            rc = cfg_fail(c, SMP_EINVAL, line, path, "nested deeper than %d levels",
                          CFG_MAX_DEPTH);
            goto free_node;
        }
        yaml_event_delete(ev);
        if (n->kind == HOST_CFG_MAP)
            rc = build_map(c, p, n, path, depth);
        else
            rc = build_seq(c, p, n, path, depth);
        if (rc < 0) {
            cfg_node_free(n);
            return rc;
        }
        *out = n;
        return 0;
    case YAML_ALIAS_EVENT:
        rc = cfg_fail(c, SMP_EINVAL, line, path, "aliases (*%s) are not supported",
                      (const char *)ev->data.alias.anchor);
        goto free_node;
    default:
        rc = cfg_fail(c, SMP_EINVAL, line, path, "unexpected YAML event %d", (int)ev->type);
        goto free_node;
    }

free_node:
    cfg_node_free(n);
delete_event:
    yaml_event_delete(ev);
    return rc;
}

/* Parse the whole stream into one tree. *root is NULL for a stream without a
 * document (an empty or comment-only file). More than one document is
 * refused. */
static int parse_stream(cfg_ctx *c, yaml_parser_t *p, host_config_node **root)
{
    int rc;
    yaml_event_t ev;
    host_config_node *tree = NULL;

    *root = NULL;
    if ((rc = next_event(c, p, &ev)) < 0) return rc;  /* STREAM-START */
    yaml_event_delete(&ev);
    if ((rc = next_event(c, p, &ev)) < 0) return rc;
    if (ev.type == YAML_STREAM_END_EVENT) {
        yaml_event_delete(&ev);
        return 0;
    }
    yaml_event_delete(&ev);                              /* DOCUMENT-START */
    if ((rc = next_event(c, p, &ev)) < 0) return rc;
    if ((rc = build_node(c, p, &ev, "", 0, &tree)) < 0) return rc;
    if ((rc = next_event(c, p, &ev)) < 0) goto free_tree; /* DOCUMENT-END */
    yaml_event_delete(&ev);
    if ((rc = next_event(c, p, &ev)) < 0) goto free_tree;
    if (ev.type != YAML_STREAM_END_EVENT) {
        rc = cfg_fail(c, SMP_EINVAL, (int)ev.start_mark.line + 1, NULL,
                      "only one YAML document is allowed");
        yaml_event_delete(&ev);
        goto free_tree;
    }
    yaml_event_delete(&ev);
    *root = tree;
    return 0;

free_tree:
    cfg_node_free(tree);
    return rc;
}

int cfg_parse_tree(cfg_ctx *c, const char *yaml, size_t len, host_config_node **root)
{
    yaml_parser_t parser;
    *root = NULL;
    if (!yaml_parser_initialize(&parser)) return cfg_oom(c);
    yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
    int rc = parse_stream(c, &parser, root);
    yaml_parser_delete(&parser);
    return rc;
}
