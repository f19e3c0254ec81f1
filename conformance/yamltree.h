/* yamltree.h: a YAML document as a small tree of mappings, sequences and scalars, built
 * from libyaml's event API. Every node keeps the line and column (1-based) of its start
 * and, for scalars, the byte range of its text, so the schema can report file:line:col and
 * --update-digests can rewrite a scalar in place. Anchors, aliases and tags are rejected. */
#ifndef QSPEC_KIT_YAMLTREE_H
#define QSPEC_KIT_YAMLTREE_H

#include <stddef.h>

#include "qspec/status.h"

typedef enum { QSK_Y_SCALAR, QSK_Y_SEQ, QSK_Y_MAP } qsk_ykind;

typedef struct qsk_ynode {
    qsk_ykind kind;
    int line, col;
    char *text;               /* scalar text (NUL-terminated) */
    int plain;                /* scalar was unquoted */
    size_t start, end;        /* scalar byte range in the file */
    struct qsk_ynode **items; /* sequence items, or mapping keys and values interleaved */
    size_t n;                 /* item count (a mapping has n/2 pairs) */
} qsk_ynode;

/* The deepest nesting of sequences and mappings a document may have (a JSON file read with
 * this parser, too): deeper input is a load error, never a deep recursion. */
#define QSK_YAML_MAX_DEPTH 256

/* Parses the text of file (named path in messages); on error the message is
 * "path:line:col: reason". */
qs_status qsk_yaml_parse(qs_ctx *ctx, const char *path, const char *text, size_t len,
                         qsk_ynode **root);
void qsk_yaml_free(qsk_ynode *n);
/* The value of key in a mapping, or NULL. */
const qsk_ynode *qsk_yaml_get(const qsk_ynode *map, const char *key);

#endif
