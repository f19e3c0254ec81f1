/* npy.c: the .npy reader and writer ([CASE-NPY-*] in spec/cases.md).
 * A file is the magic, a version, a header length, a Python-literal header dict and the
 * raw little-endian C-order data. The reader checks the whole file before it allocates;
 * the header parser accepts the literal subset numpy writes. Writes go through
 * qsk_atomic, so a failed write never leaves partial output. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"
#include "npy.h"

#define NPY_MAGIC     "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_ALIGN     64

/* How one dtype is stored in a file: [CASE-NPY-DESCR]. */
typedef struct npy_type {
    qs_dtype dtype;
    const char *descr; /* the descr as written: a type string or a structured list */
    const char *field; /* ml_dtypes field name of the structured form; NULL if plain */
    char kind;         /* numpy kind of the stored items: 'f', 'u' or 'i' */
    size_t itemsize;   /* bytes per element in the file */
    unsigned mask;     /* the bits a code may use: [CASE-NPY-E2M1], [CASE-NPY-FP6] */
} npy_type;

static const npy_type npy_types[] = {
    {QS_FP32, "<f4", NULL, 'f', 4, 0},
    {QS_FP64, "<f8", NULL, 'f', 8, 0},
    {QS_FP16, "<f2", NULL, 'f', 2, 0},
    {QS_U8, "|u1", NULL, 'u', 1, 0},
    {QS_I32, "<i4", NULL, 'i', 4, 0},
    {QS_I64, "<i8", NULL, 'i', 8, 0},
    {QS_BF16, "[('bfloat16', '<u2')]", "bfloat16", 'u', 2, 0},
    {QS_E4M3, "[('float8_e4m3fn', '|u1')]", "float8_e4m3fn", 'u', 1, 0},
    {QS_E5M2, "[('float8_e5m2', '|u1')]", "float8_e5m2", 'u', 1, 0},
    {QS_E8M0, "[('float8_e8m0fnu', '|u1')]", "float8_e8m0fnu", 'u', 1, 0},
    {QS_E2M1, "[('float4_e2m1fn', '|u1')]", "float4_e2m1fn", 'u', 1, 0x0F},
    {QS_E2M3, "[('float6_e2m3fn', '|u1')]", "float6_e2m3fn", 'u', 1, 0x3F},
    {QS_E3M2, "[('float6_e3m2fn', '|u1')]", "float6_e3m2fn", 'u', 1, 0x3F},
};

static const npy_type *type_of_dtype(qs_dtype dt)
{
    for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
        if (npy_types[i].dtype == dt)
            return &npy_types[i];
    return NULL;
}

const char *qsk_npy_descr(qs_dtype dt)
{
    const npy_type *ty = type_of_dtype(dt);
    return ty ? ty->descr : NULL;
}

static int host_is_little_endian(void)
{
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* Copies one item of size bytes, reversing the byte order on a big-endian host. */
static void copy_le(unsigned char *dst, const unsigned char *src, size_t size)
{
    if (host_is_little_endian()) {
        memcpy(dst, src, size);
        return;
    }
    for (size_t b = 0; b < size; b++)
        dst[b] = src[size - 1 - b];
}

/* ------------------------------------------------------------------ header parser */

/* A piece of the header text (a string's contents, without its quotes). */
typedef struct span {
    const char *p;
    size_t n;
} span;

typedef struct npy_header {
    int has_descr, has_fortran, has_shape;
    int structured;   /* descr is a list of fields */
    size_t nfields;   /* fields in that list */
    size_t field_len; /* elements of the first field's tuple */
    span descr;       /* the plain descr, or the first field's type string */
    span field;       /* the first field's name */
    int fortran;
    int ndim; /* may exceed QS_MAX_DIMS: only the first QS_MAX_DIMS extents are kept */
    int64_t shape[QS_MAX_DIMS];
} npy_header;

typedef struct hdr_parser {
    qs_ctx *ctx;
    const char *path;
    const char *s;
    size_t n, i;
} hdr_parser;

static qs_status malformed(hdr_parser *p, const char *what)
{
    return qs_ctx_error(p->ctx, QS_ERR_FORMAT, "%s: malformed header: %s at header offset %zu",
                        p->path, what, p->i);
}

static void skip_ws(hdr_parser *p)
{
    while (p->i < p->n &&
           (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static int peek(hdr_parser *p)
{
    skip_ws(p);
    return p->i < p->n ? (unsigned char)p->s[p->i] : -1;
}

static qs_status expect_char(hdr_parser *p, char c, const char *what)
{
    if (peek(p) != (unsigned char)c)
        return malformed(p, what);
    p->i++;
    return QS_OK;
}

/* A string in ' or " quotes; a backslash escapes the next character (kept raw). */
static qs_status parse_string(hdr_parser *p, span *out)
{
    int q = peek(p);
    if (q != '\'' && q != '"')
        return malformed(p, "expected a string");
    size_t start = ++p->i;
    while (p->i < p->n && p->s[p->i] != q) {
        if (p->s[p->i] == '\n')
            return malformed(p, "unterminated string");
        p->i += p->s[p->i] == '\\' ? 2 : 1;
    }
    if (p->i >= p->n)
        return malformed(p, "unterminated string");
    out->p = p->s + start;
    out->n = p->i - start;
    p->i++;
    return QS_OK;
}

static int match_word(hdr_parser *p, const char *w)
{
    size_t n = strlen(w);
    if (p->n - p->i < n || memcmp(p->s + p->i, w, n) != 0)
        return 0;
    char next = p->i + n < p->n ? p->s[p->i + n] : ' ';
    if ((next >= 'A' && next <= 'Z') || (next >= 'a' && next <= 'z') ||
        (next >= '0' && next <= '9') || next == '_')
        return 0;
    p->i += n;
    return 1;
}

static qs_status parse_bool(hdr_parser *p, int *out)
{
    peek(p);
    if (match_word(p, "True"))
        *out = 1;
    else if (match_word(p, "False"))
        *out = 0;
    else
        return malformed(p, "'fortran_order' is not True or False");
    return QS_OK;
}

/* A non-negative decimal integer as Python writes it (no leading zeros). */
static qs_status parse_dim(hdr_parser *p, int64_t *out)
{
    int c = peek(p);
    if (c == '-')
        return qs_ctx_error(p->ctx, QS_ERR_FORMAT,
                            "%s: malformed header: negative dimension in 'shape'", p->path);
    if (c < '0' || c > '9')
        return malformed(p, "a dimension of 'shape' is not an integer");
    size_t start = p->i;
    int64_t v = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        int d = p->s[p->i++] - '0';
        if (v > (INT64_MAX - d) / 10)
            return qs_ctx_error(p->ctx, QS_ERR_FORMAT,
                                "%s: malformed header: a dimension of 'shape' is too large",
                                p->path);
        v = v * 10 + d;
    }
    if (p->i - start > 1 && p->s[start] == '0')
        return malformed(p, "a dimension of 'shape' has a leading zero");
    c = p->i < p->n ? p->s[p->i] : ' ';
    if (c == '.' || c == 'e' || c == 'E' || c == 'x' || c == '_' || c == 'j' || c == 'L')
        return malformed(p, "a dimension of 'shape' is not an integer");
    *out = v;
    return QS_OK;
}

/* A tuple of dimensions: (), (3,), (2, 3) with an optional trailing comma. */
static qs_status parse_shape(hdr_parser *p, npy_header *h)
{
    qs_status st = expect_char(p, '(', "'shape' is not a tuple");
    h->ndim = 0;
    int trailing_comma = 0;
    while (st == QS_OK && peek(p) != ')') {
        int64_t d = 0;
        st = parse_dim(p, &d);
        if (st != QS_OK)
            return st;
        if (h->ndim < QS_MAX_DIMS)
            h->shape[h->ndim] = d;
        if (h->ndim < 1000)
            h->ndim++;
        trailing_comma = peek(p) == ',';
        if (trailing_comma)
            p->i++;
        else if (peek(p) != ')')
            return malformed(p, "expected ',' or ')' in 'shape'");
    }
    if (st != QS_OK)
        return st;
    if (h->ndim == 1 && !trailing_comma)
        return malformed(p, "'shape' is not a tuple (a one-element tuple needs a trailing comma)");
    p->i++;
    return QS_OK;
}

/* Skips any literal value (a string, a word or number, a tuple or list of values). */
static qs_status skip_value(hdr_parser *p, int depth)
{
    int c = peek(p);
    if (depth > 16)
        return malformed(p, "values nested too deeply");
    if (c == '\'' || c == '"') {
        span s;
        return parse_string(p, &s);
    }
    if (c == '(' || c == '[') {
        int close = c == '(' ? ')' : ']';
        p->i++;
        while (peek(p) != close) {
            qs_status st = skip_value(p, depth + 1);
            if (st != QS_OK)
                return st;
            if (peek(p) == ',')
                p->i++;
            else if (peek(p) != close)
                return malformed(p, "expected ',' or a closing bracket");
        }
        p->i++;
        return QS_OK;
    }
    size_t start = p->i;
    while (p->i < p->n &&
           (strchr("+-._", p->s[p->i]) || (p->s[p->i] >= '0' && p->s[p->i] <= '9') ||
            (p->s[p->i] >= 'A' && p->s[p->i] <= 'Z') || (p->s[p->i] >= 'a' && p->s[p->i] <= 'z')))
        p->i++;
    return p->i > start ? QS_OK : malformed(p, "expected a value");
}

/* One field tuple: ('name', 'type'[, shape]). Only the first field is kept. */
static qs_status parse_field(hdr_parser *p, npy_header *h)
{
    qs_status st = expect_char(p, '(', "a field of 'descr' is not a tuple");
    span name, type;
    if (st == QS_OK)
        st = parse_string(p, &name);
    if (st == QS_OK)
        st = expect_char(p, ',', "expected ',' after a field name");
    if (st == QS_OK)
        st = parse_string(p, &type);
    size_t len = 2;
    while (st == QS_OK && peek(p) == ',') {
        p->i++;
        if (peek(p) == ')')
            break;
        st = skip_value(p, 1);
        len++;
    }
    if (st == QS_OK)
        st = expect_char(p, ')', "expected ')' after a field");
    if (st == QS_OK && h->nfields++ == 0) {
        h->field = name;
        h->descr = type;
        h->field_len = len;
    }
    return st;
}

static qs_status parse_descr(hdr_parser *p, npy_header *h)
{
    int c = peek(p);
    if (c == '\'' || c == '"')
        return parse_string(p, &h->descr);
    if (c != '[')
        return malformed(p, "'descr' is not a string or a list of fields");
    p->i++;
    h->structured = 1;
    while (peek(p) != ']') {
        qs_status st = parse_field(p, h);
        if (st != QS_OK)
            return st;
        if (peek(p) == ',')
            p->i++;
        else if (peek(p) != ']')
            return malformed(p, "expected ',' or ']' in 'descr'");
    }
    p->i++;
    return QS_OK;
}

static int span_is(span s, const char *w)
{
    return s.n == strlen(w) && memcmp(s.p, w, s.n) == 0;
}

static qs_status parse_entry(hdr_parser *p, npy_header *h)
{
    span key;
    qs_status st = parse_string(p, &key);
    if (st == QS_OK)
        st = expect_char(p, ':', "expected ':' after a key");
    if (st != QS_OK)
        return st;
    int *seen = span_is(key, "descr")           ? &h->has_descr
                : span_is(key, "fortran_order") ? &h->has_fortran
                : span_is(key, "shape")         ? &h->has_shape
                                                : NULL;
    if (!seen)
        return qs_ctx_error(p->ctx, QS_ERR_FORMAT, "%s: malformed header: unexpected key '%.*s'",
                            p->path, (int)(key.n > 40 ? 40 : key.n), key.p);
    if (*seen)
        return qs_ctx_error(p->ctx, QS_ERR_FORMAT, "%s: malformed header: duplicate key '%.*s'",
                            p->path, (int)key.n, key.p);
    *seen = 1;
    if (seen == &h->has_descr)
        return parse_descr(p, h);
    if (seen == &h->has_fortran)
        return parse_bool(p, &h->fortran);
    return parse_shape(p, h);
}

/* The header dict: [CASE-NPY-HEADER]. */
static qs_status parse_header(hdr_parser *p, npy_header *h)
{
    memset(h, 0, sizeof *h);
    qs_status st = expect_char(p, '{', "the header is not a dict");
    while (st == QS_OK && peek(p) != '}') {
        st = parse_entry(p, h);
        if (st == QS_OK && peek(p) == ',')
            p->i++;
        else if (st == QS_OK && peek(p) != '}')
            st = malformed(p, "expected ',' or '}'");
    }
    if (st != QS_OK)
        return st;
    p->i++;
    if (peek(p) != -1)
        return malformed(p, "text after the header dict");
    const char *missing = !h->has_descr     ? "descr"
                          : !h->has_fortran ? "fortran_order"
                          : !h->has_shape   ? "shape"
                                            : NULL;
    if (missing)
        return qs_ctx_error(p->ctx, QS_ERR_FORMAT, "%s: malformed header: missing key '%s'",
                            p->path, missing);
    return QS_OK;
}

/* ------------------------------------------------------------------ dtype resolution */

/* Whether a type string is the storage of (kind, itemsize); *big is set if it is the
 * right kind and size but big-endian. One-byte items may have any byte-order mark. */
static int type_string_is(span s, char kind, size_t itemsize, int *big)
{
    if (s.n != 3 || s.p[1] != kind || s.p[2] != (char)('0' + itemsize))
        return 0;
    char order = s.p[0];
    if (itemsize == 1)
        return order == '|' || order == '<' || order == '>' || order == '=';
    if (order == '>' || order == '!')
        *big = 1;
    return order == '<';
}

static qs_status unsupported_descr(qs_ctx *ctx, const char *path, span d, int big)
{
    int n = (int)(d.n > 40 ? 40 : d.n);
    if (big)
        return qs_ctx_error(ctx, QS_ERR_UNSUPPORTED,
                            "%s: dtype '%.*s' is big-endian; only little-endian data is read", path,
                            n, d.p);
    if (span_is(d, "<V1") || span_is(d, "<V2") || span_is(d, "|V1") || span_is(d, "|V2"))
        return qs_ctx_error(ctx, QS_ERR_UNSUPPORTED,
                            "%s: dtype '%.*s' is untyped raw bytes; write ml_dtypes data as a "
                            "one-field structured array, e.g. [('float8_e4m3fn', '|u1')]",
                            path, n, d.p);
    return qs_ctx_error(ctx, QS_ERR_UNSUPPORTED, "%s: unsupported dtype '%.*s'", path, n, d.p);
}

/* Maps the parsed descr to a qspec dtype: [CASE-NPY-DESCR]. */
static qs_status resolve_type(qs_ctx *ctx, const char *path, const npy_header *h,
                              const npy_type **out)
{
    if (h->structured && h->nfields != 1)
        return qs_ctx_error(ctx, QS_ERR_UNSUPPORTED,
                            "%s: unsupported structured dtype with %zu fields (qspec reads one)",
                            path, h->nfields);
    if (h->structured && h->field_len != 2)
        return qs_ctx_error(ctx, QS_ERR_UNSUPPORTED,
                            "%s: unsupported structured dtype: field '%.*s' has a subarray shape",
                            path, (int)h->field.n, h->field.p);
    int big = 0;
    for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++) {
        const npy_type *ty = &npy_types[i];
        if (h->structured != (ty->field != NULL))
            continue;
        if (h->structured && !span_is(h->field, ty->field))
            continue;
        if (type_string_is(h->descr, ty->kind, ty->itemsize, &big)) {
            *out = ty;
            return QS_OK;
        }
        if (h->structured && !big)
            return qs_ctx_error(
                ctx, QS_ERR_UNSUPPORTED, "%s: field '%s' must be stored as '%s', not '%.*s'", path,
                ty->field, ty->itemsize == 2 ? "<u2" : "|u1", (int)h->descr.n, h->descr.p);
    }
    if (h->structured && !big)
        return qs_ctx_error(ctx, QS_ERR_UNSUPPORTED,
                            "%s: unsupported structured dtype field '%.*s' (not an ml_dtypes "
                            "type qspec knows)",
                            path, (int)(h->field.n > 40 ? 40 : h->field.n), h->field.p);
    return unsupported_descr(ctx, path, h->descr, big);
}

/* ------------------------------------------------------------------ reader */

/* The fixed prefix: magic, version and header length: [CASE-NPY-VERSION]. */
static qs_status read_prefix(qs_ctx *ctx, const char *path, const unsigned char *b, size_t len,
                             int *major, size_t *hstart, size_t *hlen)
{
    size_t m = len < NPY_MAGIC_LEN ? len : NPY_MAGIC_LEN;
    if (memcmp(b, NPY_MAGIC, m) != 0)
        return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s: not a .npy file (bad magic)", path);
    if (len < 8)
        return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s: truncated file: %zu bytes, no version", path,
                            len);
    *major = b[6];
    if ((b[6] < 1 || b[6] > 3) || b[7] != 0)
        return qs_ctx_error(ctx, QS_ERR_FORMAT,
                            "%s: unknown .npy format version %u.%u (known: 1.0, 2.0, 3.0)", path,
                            b[6], b[7]);
    *hstart = *major == 1 ? 10 : 12;
    if (len < *hstart)
        return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s: truncated header: %zu bytes, no header length",
                            path, len);
    *hlen = (size_t)b[8] | (size_t)b[9] << 8;
    if (*major > 1)
        *hlen |= (size_t)b[10] << 16 | (size_t)b[11] << 24;
    if (*hlen > len - *hstart)
        return qs_ctx_error(ctx, QS_ERR_FORMAT,
                            "%s: truncated header: it says %zu bytes but %zu follow", path, *hlen,
                            len - *hstart);
    return QS_OK;
}

/* v1/v2 headers are Latin-1 and v3 UTF-8; the dict itself must be ASCII outside strings,
 * which the parser checks. Here: no NUL, and valid UTF-8 for v3. */
static qs_status check_header_text(qs_ctx *ctx, const char *path, const unsigned char *s, size_t n,
                                   int major)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] == 0)
            return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s: malformed header: a NUL byte", path);
        if (major < 3 || s[i] < 0x80)
            continue;
        size_t extra = (s[i] & 0xE0) == 0xC0   ? 1
                       : (s[i] & 0xF0) == 0xE0 ? 2
                       : (s[i] & 0xF8) == 0xF0 ? 3
                                               : 0;
        if (extra == 0 || i + extra >= n)
            return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s: malformed header: invalid UTF-8", path);
        for (size_t k = 1; k <= extra; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s: malformed header: invalid UTF-8",
                                    path);
        i += extra;
    }
    return QS_OK;
}

/* Element count of the shape, or an error if it overflows: [CASE-NPY-SHAPE]. */
static qs_status header_numel(qs_ctx *ctx, const char *path, const npy_header *h, size_t *numel)
{
    if (h->ndim > QS_MAX_DIMS)
        return qs_ctx_error(ctx, QS_ERR_UNSUPPORTED, "%s: %d dimensions; qspec reads at most %d",
                            path, h->ndim, QS_MAX_DIMS);
    size_t n = 1;
    for (int d = 0; d < h->ndim; d++) {
        uint64_t e = (uint64_t)h->shape[d];
        if (e != 0 && n > (SIZE_MAX / 16) / e)
            return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s: shape overflows at dimension %d", path, d);
        n *= (size_t)e;
    }
    *numel = n;
    return QS_OK;
}

/* Codes with bits outside the format are rejected: [CASE-NPY-E2M1], [CASE-NPY-FP6]. */
static qs_status check_codes(qs_ctx *ctx, const char *path, const npy_type *ty,
                             const unsigned char *data, size_t numel)
{
    if (ty->mask == 0)
        return QS_OK;
    for (size_t i = 0; i < numel; i++)
        if (data[i] & ~ty->mask)
            return qs_ctx_error(ctx, QS_ERR_FORMAT,
                                "%s: element %zu has code 0x%02X, outside the %s format", path, i,
                                data[i], qs_dtype_name(ty->dtype));
    return QS_OK;
}

static void unpack_data(qs_tensor *t, const npy_type *ty, const unsigned char *data)
{
    unsigned char *out = t->data;
    if (ty->dtype == QS_E2M1) {
        for (size_t i = 0; i < t->numel; i++)
            out[i / 2] |= (unsigned char)(data[i] << (4 * (i % 2)));
        return;
    }
    for (size_t i = 0; i < t->numel; i++)
        copy_le(out + i * ty->itemsize, data + i * ty->itemsize, ty->itemsize);
}

/* Checks header and data of a file held in memory and fills t. */
static qs_status parse_file(qs_ctx *ctx, const char *path, const unsigned char *b, size_t len,
                            qs_tensor *t)
{
    int major = 0;
    size_t hstart = 0, hlen = 0;
    qs_status st = read_prefix(ctx, path, b, len, &major, &hstart, &hlen);
    if (st == QS_OK)
        st = check_header_text(ctx, path, b + hstart, hlen, major);
    npy_header h;
    hdr_parser p = {ctx, path, (const char *)b + hstart, hlen, 0};
    if (st == QS_OK)
        st = parse_header(&p, &h);
    if (st == QS_OK && h.fortran)
        st = qs_ctx_error(ctx, QS_ERR_UNSUPPORTED,
                          "%s: Fortran order is not supported (C order only)", path);
    const npy_type *ty = NULL;
    if (st == QS_OK)
        st = resolve_type(ctx, path, &h, &ty);
    size_t numel = 0;
    if (st == QS_OK)
        st = header_numel(ctx, path, &h, &numel);
    if (st != QS_OK)
        return st;
    size_t have = len - hstart - hlen, want = numel * ty->itemsize;
    if (have < want)
        return qs_ctx_error(ctx, QS_ERR_FORMAT,
                            "%s: truncated data: the shape needs %zu bytes but %zu follow", path,
                            want, have);
    if (have > want)
        return qs_ctx_error(ctx, QS_ERR_FORMAT,
                            "%s: %zu trailing bytes after the %zu bytes of data the shape needs",
                            path, have - want, want);
    const unsigned char *data = b + hstart + hlen;
    st = check_codes(ctx, path, ty, data, numel);
    if (st == QS_OK)
        st = qs_tensor_alloc(ctx, t, ty->dtype, h.ndim, h.shape);
    if (st == QS_OK)
        unpack_data(t, ty, data);
    return st;
}

qs_status qsk_npy_read(qs_ctx *ctx, const char *path, qs_tensor *t)
{
    if (!path || !t)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "qsk_npy_read: path or tensor is NULL");
    memset(t, 0, sizeof *t);
    char *buf;
    size_t len;
    qs_status st = qsk_read_file(ctx, path, &buf, &len);
    if (st != QS_OK)
        return st;
    st = parse_file(ctx, path, (const unsigned char *)buf, len, t);
    free(buf);
    return st;
}

/* ------------------------------------------------------------------ writer */

/* Checks that t is a well-formed tensor that a file can hold. */
static qs_status check_tensor(qs_ctx *ctx, const char *path, const qs_tensor *t,
                              const npy_type **out)
{
    const npy_type *ty = type_of_dtype(t->dtype);
    if (!ty)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: tensor has invalid dtype %d", path,
                            (int)t->dtype);
    size_t numel;
    qs_status st = qs_shape_numel(ctx, t->ndim, t->shape, &numel);
    if (st != QS_OK)
        return qs_ctx_error(ctx, st, "%s: tensor has a bad shape (ndim %d)", path, t->ndim);
    if (numel != t->numel || qs_dtype_bytes(t->dtype, numel) != t->nbytes ||
        (t->nbytes && !t->data))
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "%s: tensor's numel, nbytes or data disagree with its shape", path);
    if (ty->mask && t->dtype != QS_E2M1) {
        const unsigned char *d = t->data;
        for (size_t i = 0; i < numel; i++)
            if (d[i] & ~ty->mask)
                return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                                    "%s: element %zu has code 0x%02X, outside the %s format", path,
                                    i, d[i], qs_dtype_name(t->dtype));
    }
    *out = ty;
    return QS_OK;
}

/* Builds the padded header (prefix included) into buf: [CASE-NPY-WRITE]. */
static size_t build_header(char *buf, size_t cap, const qs_tensor *t, const npy_type *ty)
{
    char shape[QS_MAX_DIMS * 24 + 4];
    size_t s = 0;
    shape[s++] = '(';
    for (int d = 0; d < t->ndim; d++)
        s += (size_t)snprintf(shape + s, sizeof shape - s, "%s%lld", d ? ", " : "",
                              (long long)t->shape[d]);
    s += (size_t)snprintf(shape + s, sizeof shape - s, "%s)", t->ndim == 1 ? "," : "");
    const char *q = ty->field ? "" : "'";
    char dict[sizeof shape + 128];
    int n = snprintf(dict, sizeof dict, "{'descr': %s%s%s, 'fortran_order': False, 'shape': %s, }",
                     q, ty->descr, q, shape);
    size_t len = (size_t)n, prefix = 10;
    size_t total = (prefix + len + 1 + NPY_ALIGN - 1) / NPY_ALIGN * NPY_ALIGN;
    if (total - prefix > 0xFFFF) {
        prefix = 12;
        total = (prefix + len + 1 + NPY_ALIGN - 1) / NPY_ALIGN * NPY_ALIGN;
    }
    if (total > cap)
        return 0;
    size_t hlen = total - prefix;
    memcpy(buf, NPY_MAGIC, NPY_MAGIC_LEN);
    buf[6] = prefix == 10 ? 1 : 2;
    buf[7] = 0;
    for (size_t k = 0; k < prefix - 8; k++)
        buf[8 + k] = (char)((hlen >> (8 * k)) & 0xFF);
    memcpy(buf + prefix, dict, len);
    memset(buf + prefix + len, ' ', total - prefix - len - 1);
    buf[total - 1] = '\n';
    return total;
}

/* Writes the elements in file order, through a fixed-size buffer. */
static int write_data(FILE *fp, const qs_tensor *t, const npy_type *ty)
{
    unsigned char chunk[4096];
    const unsigned char *in = t->data;
    size_t per = sizeof chunk / ty->itemsize, i = 0;
    while (i < t->numel) {
        size_t m = t->numel - i < per ? t->numel - i : per;
        for (size_t j = 0; j < m; j++, i++) {
            if (ty->dtype == QS_E2M1)
                chunk[j] = (unsigned char)((in[i / 2] >> (4 * (i % 2))) & 0x0F);
            else
                copy_le(chunk + j * ty->itemsize, in + i * ty->itemsize, ty->itemsize);
        }
        if (fwrite(chunk, ty->itemsize, m, fp) != m)
            return -1;
    }
    return 0;
}

qs_status qsk_npy_write(qs_ctx *ctx, const char *path, const qs_tensor *t)
{
    if (!path || !t)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "qsk_npy_write: path or tensor is NULL");
    const npy_type *ty = NULL;
    qs_status st = check_tensor(ctx, path, t, &ty);
    if (st != QS_OK)
        return st;
    char header[1024];
    size_t hn = build_header(header, sizeof header, t, ty);
    if (hn == 0)
        return qs_ctx_error(ctx, QS_ERR_INTERNAL, "%s: header does not fit", path);
    qsk_atomic a;
    st = qsk_atomic_open(ctx, &a, path);
    if (st != QS_OK)
        return st;
    if (fwrite(header, 1, hn, a.fp) != hn || write_data(a.fp, t, ty) != 0) {
        qsk_atomic_abort(&a);
        return qs_ctx_error(ctx, QS_ERR_IO, "%s: write error", path);
    }
    return qsk_atomic_commit(ctx, &a);
}
