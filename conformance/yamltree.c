/* yamltree.c: builds a qsk_ynode tree from libyaml parser events. Duplicate mapping keys,
 * non-scalar keys, aliases, anchors and multi-document streams are errors, reported with
 * the parser's mark as path:line:col. */
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "yamltree.h"

static qsk_ynode *node_new(qsk_ykind kind, yaml_mark_t m)
{
    qsk_ynode *n = calloc(1, sizeof *n);
    if (n) {
        n->kind = kind;
        n->line = (int)m.line + 1;
        n->col = (int)m.column + 1;
    }
    return n;
}

void qsk_yaml_free(qsk_ynode *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->n; i++)
        qsk_yaml_free(n->items[i]);
    free(n->items);
    free(n->text);
    free(n);
}

static int node_push(qsk_ynode *parent, qsk_ynode *child)
{
    size_t n = parent->n;
    if ((n & (n - 1)) == 0) { /* n is 0 or a power of two: double the array (linear total) */
        qsk_ynode **grown = realloc(parent->items, (n ? 2 * n : 1) * sizeof *grown);
        if (!grown)
            return -1;
        parent->items = grown;
    }
    parent->items[parent->n++] = child;
    return 0;
}

const qsk_ynode *qsk_yaml_get(const qsk_ynode *map, const char *key)
{
    if (!map || map->kind != QSK_Y_MAP)
        return NULL;
    for (size_t i = 0; i + 1 < map->n; i += 2)
        if (strcmp(map->items[i]->text, key) == 0)
            return map->items[i + 1];
    return NULL;
}

typedef struct builder {
    qs_ctx *ctx;
    const char *path;
    yaml_parser_t parser;
    int depth; /* sequences and mappings open around the node being built */
} builder;

/* A key set of one mapping, open addressing over indices into items (0 = empty slot), so
 * the duplicate-key check stays linear in the number of keys. */
typedef struct keyset {
    size_t *slot;
    size_t cap, used;
} keyset;

static size_t key_hash(const char *s)
{
    size_t h = 1469598103934665603u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}

/* Finds key among the keys of map; returns its slot, empty (0) when absent. */
static size_t *keyset_find(const keyset *ks, const qsk_ynode *map, const char *key)
{
    size_t i = key_hash(key) & (ks->cap - 1);
    while (ks->slot[i] && strcmp(map->items[ks->slot[i] - 1]->text, key) != 0)
        i = (i + 1) & (ks->cap - 1);
    return &ks->slot[i];
}

/* Records item k (a key of map); -1 when out of memory. */
static int keyset_add(keyset *ks, const qsk_ynode *map, size_t k)
{
    if (2 * (ks->used + 1) > ks->cap) {
        keyset bigger = {calloc(ks->cap ? 2 * ks->cap : 16, sizeof(size_t)),
                         ks->cap ? 2 * ks->cap : 16, 0};
        if (!bigger.slot)
            return -1;
        for (size_t i = 0; i < ks->cap; i++)
            if (ks->slot[i]) {
                *keyset_find(&bigger, map, map->items[ks->slot[i] - 1]->text) = ks->slot[i];
                bigger.used++;
            }
        free(ks->slot);
        *ks = bigger;
    }
    *keyset_find(ks, map, map->items[k]->text) = k + 1;
    ks->used++;
    return 0;
}

static qs_status fail_at(builder *b, yaml_mark_t m, const char *what)
{
    return qs_ctx_error(b->ctx, QS_ERR_FORMAT, "%s:%d:%d: %s", b->path, (int)m.line + 1,
                        (int)m.column + 1, what);
}

static qs_status next_event(builder *b, yaml_event_t *ev)
{
    if (!yaml_parser_parse(&b->parser, ev)) {
        yaml_mark_t m = b->parser.problem_mark;
        char msg[256];
        snprintf(msg, sizeof msg, "YAML syntax error: %s%s%s",
                 b->parser.problem ? b->parser.problem : "unknown", b->parser.context ? " " : "",
                 b->parser.context ? b->parser.context : "");
        return fail_at(b, m, msg);
    }
    return QS_OK;
}

static qs_status build_node(builder *b, yaml_event_t *ev, qsk_ynode **out);

static qs_status build_children(builder *b, qsk_ynode *parent, yaml_event_type_t end)
{
    keyset ks = {NULL, 0, 0};
    qs_status st = QS_OK;
    for (;;) {
        yaml_event_t ev;
        st = next_event(b, &ev);
        if (st != QS_OK)
            break;
        if (ev.type == end) {
            yaml_event_delete(&ev);
            break;
        }
        if (parent->kind == QSK_Y_MAP && parent->n % 2 == 0 && ev.type != YAML_SCALAR_EVENT) {
            st = fail_at(b, ev.start_mark, "a mapping key must be a plain scalar");
            yaml_event_delete(&ev);
            break;
        }
        qsk_ynode *child = NULL;
        st = build_node(b, &ev, &child);
        yaml_event_delete(&ev);
        if (st != QS_OK)
            break;
        int is_key = parent->kind == QSK_Y_MAP && parent->n % 2 == 0;
        if (is_key && ks.cap && *keyset_find(&ks, parent, child->text)) {
            char msg[300];
            snprintf(msg, sizeof msg, "duplicate key '%.200s'", child->text);
            yaml_mark_t m = {0, (size_t)child->line - 1, (size_t)child->col - 1};
            qsk_yaml_free(child);
            st = fail_at(b, m, msg);
            break;
        }
        int pushed = node_push(parent, child) == 0;
        if (!pushed)
            qsk_yaml_free(child);
        if (!pushed || (is_key && keyset_add(&ks, parent, parent->n - 1) != 0)) {
            st = qs_ctx_error(b->ctx, QS_ERR_NOMEM, "%s: out of memory", b->path);
            break;
        }
    }
    free(ks.slot);
    return st;
}

static qs_status build_node(builder *b, yaml_event_t *ev, qsk_ynode **out)
{
    *out = NULL;
    switch (ev->type) {
    case YAML_ALIAS_EVENT:
        return fail_at(b, ev->start_mark, "aliases are not allowed in case files");
    case YAML_SCALAR_EVENT: {
        if (ev->data.scalar.anchor)
            return fail_at(b, ev->start_mark, "anchors are not allowed in case files");
        qsk_ynode *n = node_new(QSK_Y_SCALAR, ev->start_mark);
        if (!n)
            return qs_ctx_error(b->ctx, QS_ERR_NOMEM, "%s: out of memory", b->path);
        n->text = malloc(ev->data.scalar.length + 1);
        if (!n->text) {
            free(n);
            return qs_ctx_error(b->ctx, QS_ERR_NOMEM, "%s: out of memory", b->path);
        }
        memcpy(n->text, ev->data.scalar.value, ev->data.scalar.length);
        n->text[ev->data.scalar.length] = '\0';
        n->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
        n->start = ev->start_mark.index;
        n->end = ev->end_mark.index;
        *out = n;
        return QS_OK;
    }
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT: {
        int seq = ev->type == YAML_SEQUENCE_START_EVENT;
        if ((seq ? ev->data.sequence_start.anchor : ev->data.mapping_start.anchor))
            return fail_at(b, ev->start_mark, "anchors are not allowed in case files");
        if (b->depth >= QSK_YAML_MAX_DEPTH) {
            char msg[120];
            snprintf(msg, sizeof msg,
                     "nesting deeper than %d sequences and mappings: not a case file",
                     QSK_YAML_MAX_DEPTH);
            return fail_at(b, ev->start_mark, msg);
        }
        qsk_ynode *n = node_new(seq ? QSK_Y_SEQ : QSK_Y_MAP, ev->start_mark);
        if (!n)
            return qs_ctx_error(b->ctx, QS_ERR_NOMEM, "%s: out of memory", b->path);
        b->depth++;
        qs_status st = build_children(b, n, seq ? YAML_SEQUENCE_END_EVENT : YAML_MAPPING_END_EVENT);
        b->depth--;
        if (st != QS_OK) {
            qsk_yaml_free(n);
            return st;
        }
        *out = n;
        return QS_OK;
    }
    default:
        return fail_at(b, ev->start_mark, "unexpected YAML event");
    }
}

static qs_status expect_event(builder *b, yaml_event_type_t type, const char *what)
{
    yaml_event_t ev;
    qs_status st = next_event(b, &ev);
    if (st != QS_OK)
        return st;
    if (ev.type != type)
        st = fail_at(b, ev.start_mark, what);
    yaml_event_delete(&ev);
    return st;
}

qs_status qsk_yaml_parse(qs_ctx *ctx, const char *path, const char *text, size_t len,
                         qsk_ynode **root)
{
    *root = NULL;
    builder b = {ctx, path, {0}, 0};
    if (!yaml_parser_initialize(&b.parser))
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "%s: cannot start the YAML parser", path);
    yaml_parser_set_input_string(&b.parser, (const unsigned char *)text, len);
    qs_status st = expect_event(&b, YAML_STREAM_START_EVENT, "expected a YAML stream");
    yaml_event_t ev;
    if (st == QS_OK)
        st = next_event(&b, &ev);
    if (st == QS_OK) {
        if (ev.type != YAML_DOCUMENT_START_EVENT)
            st = fail_at(&b, ev.start_mark, "the file holds no YAML document");
        yaml_event_delete(&ev);
    }
    if (st == QS_OK)
        st = next_event(&b, &ev);
    if (st == QS_OK) {
        st = build_node(&b, &ev, root);
        yaml_event_delete(&ev);
    }
    if (st == QS_OK)
        st = expect_event(&b, YAML_DOCUMENT_END_EVENT, "expected the end of the document");
    if (st == QS_OK)
        st = expect_event(&b, YAML_STREAM_END_EVENT,
                          "a case file holds one YAML document, found another");
    yaml_parser_delete(&b.parser);
    if (st != QS_OK) {
        qsk_yaml_free(*root);
        *root = NULL;
    }
    return st;
}
