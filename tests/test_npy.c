/* test_npy.c: the .npy reader and writer against spec/cases.md "NPY files".
 * Good fixtures (written by numpy, tests/fixtures/npy/make_fixtures.py) load with the
 * dtype, shape and values typed here; every dtype round-trips; every bad fixture is
 * rejected with the right status and a message naming the file and the problem; and a
 * failed write leaves nothing behind and an existing target untouched. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"
#include "npy.h"
#include "qstest.h"

static char fixture_buf[1024];

static const char *npy_fixture(const char *name)
{
    char rel[256];
    snprintf(rel, sizeof rel, "npy/%s", name);
    return QST_FIXTURE(fixture_buf, rel);
}

/* Reads a good fixture and checks its dtype and shape. */
static void load_good(qs_ctx *ctx, qs_tensor *t, const char *name, qs_dtype dt, int ndim,
                      const int64_t *shape)
{
    qs_status st = qsk_npy_read(ctx, npy_fixture(name), t);
    ck_assert_msg(st == QS_OK, "%s: status %s: %s", name, qs_status_name(st), qs_ctx_errmsg(ctx));
    ck_assert_msg(t->dtype == dt, "%s: dtype %s, want %s", name, qs_dtype_name(t->dtype),
                  qs_dtype_name(dt));
    ck_assert_int_eq(t->ndim, ndim);
    for (int d = 0; d < ndim; d++)
        ck_assert_int_eq(t->shape[d], shape[d]);
}

static void assert_bytes(const qs_tensor *t, const void *want, size_t n)
{
    ck_assert_uint_eq(t->nbytes, n);
    const unsigned char *a = t->data, *b = want;
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(a[i] == b[i], "byte %zu: 0x%02X, want 0x%02X", i, a[i], b[i]);
}

/* [CASE-NPY-DESCR] */
START_TEST(test_numpy_native_dtypes_load_with_their_values)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_tensor t;
    const float f32[] = {0.0f, 1.0f, -2.0f, 0.5f, 3.25f, 1.0f / 0.0f};
    load_good(ctx, &t, "f32_2x3.npy", QS_FP32, 2, (int64_t[]){2, 3});
    assert_bytes(&t, f32, sizeof f32);
    qs_tensor_free(&t);
    const double f64[] = {1.5, -0.25, 1e300};
    load_good(ctx, &t, "f64_3.npy", QS_FP64, 1, (int64_t[]){3});
    assert_bytes(&t, f64, sizeof f64);
    qs_tensor_free(&t);
    const uint16_t f16[] = {0x3C00, 0xC000, 0x7BFF, 0x0001};
    load_good(ctx, &t, "f16_4.npy", QS_FP16, 1, (int64_t[]){4});
    assert_bytes(&t, f16, sizeof f16);
    qs_tensor_free(&t);
    const uint8_t u8[] = {0, 1, 254, 255};
    load_good(ctx, &t, "u8_2x2.npy", QS_U8, 2, (int64_t[]){2, 2});
    assert_bytes(&t, u8, sizeof u8);
    qs_tensor_free(&t);
    const int32_t i32[] = {-1, INT32_MAX, INT32_MIN};
    load_good(ctx, &t, "i32_3.npy", QS_I32, 1, (int64_t[]){3});
    assert_bytes(&t, i32, sizeof i32);
    qs_tensor_free(&t);
    const int64_t i64[] = {INT64_MIN, 1234567890123};
    load_good(ctx, &t, "i64_2.npy", QS_I64, 1, (int64_t[]){2});
    assert_bytes(&t, i64, sizeof i64);
    qs_tensor_free(&t);
    qs_ctx_free(ctx);
}
END_TEST

/* [CASE-NPY-DESCR] */
START_TEST(test_ml_dtypes_structured_files_load_with_their_codes)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_tensor t;
    const uint16_t bf16[] = {0x3F80, 0xC040, 0x7F80};
    load_good(ctx, &t, "bf16_3.npy", QS_BF16, 1, (int64_t[]){3});
    assert_bytes(&t, bf16, sizeof bf16);
    qs_tensor_free(&t);
    load_good(ctx, &t, "e4m3_5.npy", QS_E4M3, 1, (int64_t[]){5});
    assert_bytes(&t, (uint8_t[]){0x00, 0x38, 0xFE, 0x7F, 0x01}, 5);
    qs_tensor_free(&t);
    load_good(ctx, &t, "e5m2_4.npy", QS_E5M2, 1, (int64_t[]){4});
    assert_bytes(&t, (uint8_t[]){0x3C, 0xFB, 0x7C, 0x01}, 4);
    qs_tensor_free(&t);
    load_good(ctx, &t, "e8m0_4.npy", QS_E8M0, 1, (int64_t[]){4});
    assert_bytes(&t, (uint8_t[]){0x7F, 0x00, 0xFE, 0xFF}, 4);
    qs_tensor_free(&t);
    load_good(ctx, &t, "e2m3_3.npy", QS_E2M3, 1, (int64_t[]){3});
    assert_bytes(&t, (uint8_t[]){0x08, 0x3F, 0x01}, 3);
    qs_tensor_free(&t);
    load_good(ctx, &t, "e3m2_3.npy", QS_E3M2, 1, (int64_t[]){3});
    assert_bytes(&t, (uint8_t[]){0x0C, 0x3F, 0x01}, 3);
    qs_tensor_free(&t);
    qs_ctx_free(ctx);
}
END_TEST

/* [CASE-NPY-E2M1]: one code per byte in the file, two per byte in memory. */
START_TEST(test_e2m1_file_codes_are_packed_low_nibble_first)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_tensor t;
    load_good(ctx, &t, "e2m1_5.npy", QS_E2M1, 1, (int64_t[]){5});
    /* codes 0x0 0x1 0x2 0x7 0xB */
    assert_bytes(&t, (uint8_t[]){0x10, 0x72, 0x0B}, 3);
    qs_tensor_free(&t);
    qs_ctx_free(ctx);
}
END_TEST

/* [CASE-NPY-SHAPE] */
START_TEST(test_scalar_empty_and_8d_shapes_load)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_tensor t;
    const float v = 42.0f;
    load_good(ctx, &t, "f32_scalar.npy", QS_FP32, 0, NULL);
    ck_assert_uint_eq(t.numel, 1);
    assert_bytes(&t, &v, sizeof v);
    qs_tensor_free(&t);
    load_good(ctx, &t, "f32_empty.npy", QS_FP32, 1, (int64_t[]){0});
    ck_assert_uint_eq(t.numel, 0);
    qs_tensor_free(&t);
    load_good(ctx, &t, "i32_2x0x3.npy", QS_I32, 3, (int64_t[]){2, 0, 3});
    ck_assert_uint_eq(t.nbytes, 0);
    qs_tensor_free(&t);
    load_good(ctx, &t, "u8_8d.npy", QS_U8, 8, (int64_t[]){1, 2, 1, 1, 1, 1, 1, 2});
    assert_bytes(&t, (uint8_t[]){0, 1, 2, 3}, 4);
    qs_tensor_free(&t);
    qs_ctx_free(ctx);
}
END_TEST

/* [CASE-NPY-VERSION], [CASE-NPY-HEADER]: other versions and header spellings. */
START_TEST(test_v2_v3_and_literal_spellings_load)
{
    const char *names[] = {"f32_v2.npy", "f32_v3.npy", "hdr_reordered.npy", "hdr_spacing.npy",
                           "hdr_align16.npy"};
    const float want[] = {1.0f, 2.0f};
    qs_ctx *ctx = qs_ctx_new();
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        qs_tensor t;
        load_good(ctx, &t, names[i], QS_FP32, 1, (int64_t[]){2});
        assert_bytes(&t, want, sizeof want);
        qs_tensor_free(&t);
    }
    qs_tensor t;
    load_good(ctx, &t, "hdr_u1_lt.npy", QS_U8, 1, (int64_t[]){2});
    assert_bytes(&t, (uint8_t[]){7, 9}, 2);
    qs_tensor_free(&t);
    load_good(ctx, &t, "hdr_struct_commas.npy", QS_E4M3, 1, (int64_t[]){2});
    assert_bytes(&t, (uint8_t[]){0x38, 0x01}, 2);
    qs_tensor_free(&t);
    qs_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ rejections */

typedef struct bad_case {
    const char *name;
    qs_status status;
    const char *problem; /* a substring of the message */
} bad_case;

static const bad_case bad_cases[] = {
    /* [CASE-NPY-VERSION] */
    {"bad_magic_short.npy", QS_ERR_FORMAT, "truncated file"},
    {"bad_magic.npy", QS_ERR_FORMAT, "bad magic"},
    {"bad_no_version.npy", QS_ERR_FORMAT, "truncated file"},
    {"bad_no_header_len.npy", QS_ERR_FORMAT, "truncated header"},
    {"bad_header_short.npy", QS_ERR_FORMAT, "truncated header"},
    {"bad_version_4.npy", QS_ERR_FORMAT, "unknown .npy format version 4.0"},
    {"bad_version_1_1.npy", QS_ERR_FORMAT, "unknown .npy format version 1.1"},
    /* [CASE-NPY-HEADER] */
    {"bad_hdr_not_dict.npy", QS_ERR_FORMAT, "the header is not a dict"},
    {"bad_hdr_no_colon.npy", QS_ERR_FORMAT, "expected ':' after a key"},
    {"bad_hdr_unterminated.npy", QS_ERR_FORMAT, "malformed header"},
    {"bad_hdr_missing_shape.npy", QS_ERR_FORMAT, "missing key 'shape'"},
    {"bad_hdr_extra_key.npy", QS_ERR_FORMAT, "unexpected key 'extra'"},
    {"bad_hdr_duplicate.npy", QS_ERR_FORMAT, "duplicate key 'shape'"},
    {"bad_hdr_shape_int.npy", QS_ERR_FORMAT, "needs a trailing comma"},
    {"bad_hdr_shape_float.npy", QS_ERR_FORMAT, "is not an integer"},
    {"bad_hdr_shape_neg.npy", QS_ERR_FORMAT, "negative dimension"},
    {"bad_hdr_shape_huge.npy", QS_ERR_FORMAT, "too large"},
    {"bad_hdr_fortran_int.npy", QS_ERR_FORMAT, "'fortran_order' is not True or False"},
    {"bad_hdr_unclosed.npy", QS_ERR_FORMAT, "malformed header"},
    {"bad_hdr_after.npy", QS_ERR_FORMAT, "text after the header dict"},
    {"bad_hdr_utf8.npy", QS_ERR_FORMAT, "invalid UTF-8"},
    /* [CASE-NPY-ORDER] */
    {"bad_fortran.npy", QS_ERR_UNSUPPORTED, "Fortran order"},
    {"bad_bigendian.npy", QS_ERR_UNSUPPORTED, "'>f4' is big-endian"},
    {"bad_struct_big.npy", QS_ERR_UNSUPPORTED, "'>u2' is big-endian"},
    /* [CASE-NPY-DESCR] */
    {"bad_dtype_c8.npy", QS_ERR_UNSUPPORTED, "unsupported dtype '<c8'"},
    {"bad_dtype_U3.npy", QS_ERR_UNSUPPORTED, "unsupported dtype '<U3'"},
    {"bad_dtype_i1.npy", QS_ERR_UNSUPPORTED, "unsupported dtype '|i1'"},
    {"bad_dtype_object.npy", QS_ERR_UNSUPPORTED, "unsupported dtype '|O'"},
    {"bad_dtype_V1.npy", QS_ERR_UNSUPPORTED, "untyped raw bytes"},
    {"bad_struct_unknown.npy", QS_ERR_UNSUPPORTED, "field 'float8_e4m3fnuz'"},
    {"bad_struct_two.npy", QS_ERR_UNSUPPORTED, "2 fields"},
    {"bad_struct_base.npy", QS_ERR_UNSUPPORTED, "must be stored as '<u2'"},
    /* [CASE-NPY-SHAPE] */
    {"bad_9d.npy", QS_ERR_UNSUPPORTED, "9 dimensions"},
    {"bad_shape_overflow.npy", QS_ERR_FORMAT, "shape overflows"},
    {"bad_data_short.npy", QS_ERR_FORMAT, "truncated data"},
    {"bad_trailing.npy", QS_ERR_FORMAT, "4 trailing bytes"},
    /* [CASE-NPY-E2M1], [CASE-NPY-FP6] */
    {"bad_e2m1_code.npy", QS_ERR_FORMAT, "element 1 has code 0x10, outside the e2m1"},
    {"bad_e2m3_code.npy", QS_ERR_FORMAT, "element 1 has code 0x40, outside the e2m3"},
    {"bad_e3m2_code.npy", QS_ERR_FORMAT, "element 0 has code 0x80, outside the e3m2"},
};

START_TEST(test_bad_fixture_is_rejected_naming_file_and_problem)
{
    const bad_case *c = &bad_cases[_i];
    qs_ctx *ctx = qs_ctx_new();
    qs_tensor t;
    const char *path = npy_fixture(c->name);
    qs_status st = qsk_npy_read(ctx, path, &t);
    ck_assert_msg(st == c->status, "%s: status %s, want %s: %s", c->name, qs_status_name(st),
                  qs_status_name(c->status), qs_ctx_errmsg(ctx));
    const char *msg = qs_ctx_errmsg(ctx);
    ck_assert_msg(strncmp(msg, path, strlen(path)) == 0,
                  "%s: message does not start with the path: %s", c->name, msg);
    ck_assert_msg(strstr(msg, c->problem) != NULL, "%s: message lacks '%s': %s", c->name,
                  c->problem, msg);
    ck_assert_ptr_null(t.data);
    qs_ctx_free(ctx);
}
END_TEST

/* [CASE-NPY-VERSION]: a missing file is an I/O error naming it. */
START_TEST(test_missing_file_is_an_io_error)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_tensor t;
    ck_assert_int_eq(qsk_npy_read(ctx, npy_fixture("no_such_file.npy"), &t), QS_ERR_IO);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "no_such_file.npy: cannot open"));
    ck_assert_int_eq(qsk_npy_read(ctx, NULL, &t), QS_ERR_INVALID_ARG);
    qs_ctx_free(ctx);
}
END_TEST

/* ------------------------------------------------------------------ writing */

static char tmpdir[512];

static void make_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/qspec-npy.XXXXXX", base && *base ? base : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

/* Removes the files of tmpdir and the directory; returns how many files there were. */
static int clean_tmpdir(void)
{
    int n = 0;
    DIR *d = opendir(tmpdir);
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
        remove(p);
        n++;
    }
    closedir(d);
    rmdir(tmpdir);
    return n;
}

static int count_files(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

/* Fills t with a deterministic pattern valid for its dtype. */
static void fill_pattern(qs_tensor *t)
{
    unsigned char *b = t->data;
    for (size_t i = 0; i < t->nbytes; i++) {
        unsigned char v = (unsigned char)(i * 37u + 11u);
        b[i] = t->dtype == QS_E2M3 || t->dtype == QS_E3M2 ? (unsigned char)(v & 0x3F) : v;
    }
    if (t->dtype == QS_E2M1 && t->numel % 2)
        b[t->nbytes - 1] &= 0x0F; /* the unused high nibble of an odd tensor is zero */
}

static void round_trip(qs_ctx *ctx, qs_dtype dt, int ndim, const int64_t *shape)
{
    char path[600];
    snprintf(path, sizeof path, "%s/rt.npy", tmpdir);
    qs_tensor a, b;
    ck_assert_int_eq(qs_tensor_alloc(ctx, &a, dt, ndim, shape), QS_OK);
    fill_pattern(&a);
    qs_status st = qsk_npy_write(ctx, path, &a);
    ck_assert_msg(st == QS_OK, "write %s: %s", qs_dtype_name(dt), qs_ctx_errmsg(ctx));
    st = qsk_npy_read(ctx, path, &b);
    ck_assert_msg(st == QS_OK, "read %s ndim %d: %s", qs_dtype_name(dt), ndim, qs_ctx_errmsg(ctx));
    ck_assert_msg(qs_tensor_same_layout(&a, &b), "%s ndim %d: layout differs", qs_dtype_name(dt),
                  ndim);
    ck_assert_uint_eq(a.nbytes, b.nbytes);
    ck_assert_msg(a.nbytes == 0 || memcmp(a.data, b.data, a.nbytes) == 0,
                  "%s ndim %d: data differs", qs_dtype_name(dt), ndim);
    qs_tensor_free(&a);
    qs_tensor_free(&b);
}

/* [CASE-NPY-WRITE] */
START_TEST(test_every_dtype_round_trips_in_several_shapes)
{
    static const int64_t s1[] = {7}, s2[] = {3, 5}, s3[] = {2, 0, 3},
                         s8[] = {2, 1, 3, 1, 2, 1, 1, 3}, big[] = {3000};
    qs_ctx *ctx = qs_ctx_new();
    make_tmpdir();
    for (int dt = QS_FP32; dt < QS_DTYPE_COUNT; dt++) {
        round_trip(ctx, (qs_dtype)dt, 0, NULL);
        round_trip(ctx, (qs_dtype)dt, 1, s1);
        round_trip(ctx, (qs_dtype)dt, 2, s2);
        round_trip(ctx, (qs_dtype)dt, 3, s3);
        round_trip(ctx, (qs_dtype)dt, 8, s8);
        round_trip(ctx, (qs_dtype)dt, 1, big);
    }
    ck_assert_int_eq(clean_tmpdir(), 1);
    qs_ctx_free(ctx);
}
END_TEST

/* Reads a whole file into buf (at most cap bytes); returns its length. */
static size_t slurp(const char *path, unsigned char *buf, size_t cap)
{
    FILE *fp = fopen(path, "rb");
    ck_assert_ptr_nonnull(fp);
    size_t n = fread(buf, 1, cap, fp);
    fclose(fp);
    return n;
}

/* [CASE-NPY-WRITE], [CASE-NPY-E2M1]: the bytes qspec writes, as numpy writes them. */
START_TEST(test_written_header_is_v1_padded_to_64_and_e2m1_unpacked)
{
    qs_ctx *ctx = qs_ctx_new();
    make_tmpdir();
    char path[600];
    snprintf(path, sizeof path, "%s/e2m1.npy", tmpdir);
    qs_tensor t;
    ck_assert_int_eq(qs_tensor_alloc(ctx, &t, QS_E2M1, 1, (int64_t[]){3}), QS_OK);
    ((unsigned char *)t.data)[0] = 0xA5;
    ((unsigned char *)t.data)[1] = 0x0F;
    ck_assert_int_eq(qsk_npy_write(ctx, path, &t), QS_OK);
    unsigned char buf[256];
    size_t n = slurp(path, buf, sizeof buf);
    ck_assert_uint_eq(n, 128 + 3);
    ck_assert_int_eq(memcmp(buf, "\x93NUMPY\x01\x00", 8), 0);
    ck_assert_uint_eq(buf[8] | buf[9] << 8, 118);
    const char *dict = "{'descr': [('float4_e2m1fn', '|u1')], 'fortran_order': False, "
                       "'shape': (3,), }";
    ck_assert_int_eq(memcmp(buf + 10, dict, strlen(dict)), 0);
    for (size_t i = 10 + strlen(dict); i < 127; i++)
        ck_assert_uint_eq(buf[i], ' ');
    ck_assert_uint_eq(buf[127], '\n');
    ck_assert_uint_eq(buf[128], 0x5);
    ck_assert_uint_eq(buf[129], 0xA);
    ck_assert_uint_eq(buf[130], 0xF);
    ck_assert_str_eq(qsk_npy_descr(QS_FP32), "<f4");
    ck_assert_str_eq(qsk_npy_descr(QS_E8M0), "[('float8_e8m0fnu', '|u1')]");
    ck_assert_ptr_null(qsk_npy_descr(QS_DTYPE_INVALID));
    qs_tensor_free(&t);
    clean_tmpdir();
    qs_ctx_free(ctx);
}
END_TEST

/* [CASE-NPY-WRITE]: a failed write leaves nothing, not even a temporary. */
START_TEST(test_write_into_missing_directory_fails_and_leaves_nothing)
{
    qs_ctx *ctx = qs_ctx_new();
    make_tmpdir();
    char path[600];
    snprintf(path, sizeof path, "%s/missing/x.npy", tmpdir);
    qs_tensor t;
    ck_assert_int_eq(qs_tensor_alloc(ctx, &t, QS_FP32, 1, (int64_t[]){4}), QS_OK);
    ck_assert_int_eq(qsk_npy_write(ctx, path, &t), QS_ERR_IO);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "missing/x.npy: cannot create"));
    ck_assert_int_eq(count_files(tmpdir), 0);
    qs_tensor_free(&t);
    clean_tmpdir();
    qs_ctx_free(ctx);
}
END_TEST

/* Writes a small FP32 tensor to path so that a later failed write can be compared. */
static size_t write_original(qs_ctx *ctx, const char *path, unsigned char *buf, size_t cap)
{
    qs_tensor t;
    ck_assert_int_eq(qs_tensor_alloc(ctx, &t, QS_FP32, 1, (int64_t[]){2}), QS_OK);
    ((float *)t.data)[0] = 1.5f;
    ck_assert_int_eq(qsk_npy_write(ctx, path, &t), QS_OK);
    qs_tensor_free(&t);
    return slurp(path, buf, cap);
}

/* [CASE-NPY-WRITE]: a write that fails midway (the file size limit) keeps the old file. */
START_TEST(test_failed_write_leaves_existing_target_untouched)
{
    qs_ctx *ctx = qs_ctx_new();
    make_tmpdir();
    char path[600];
    snprintf(path, sizeof path, "%s/keep.npy", tmpdir);
    unsigned char before[256], after[256];
    size_t n0 = write_original(ctx, path, before, sizeof before);
    ck_assert_uint_eq(n0, 128 + 8);
    qs_tensor big;
    ck_assert_int_eq(qs_tensor_alloc(ctx, &big, QS_FP64, 1, (int64_t[]){20000}), QS_OK);
    struct rlimit old, lim;
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 4096;
    signal(SIGXFSZ, SIG_IGN);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    qs_status st = qsk_npy_write(ctx, path, &big);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
    ck_assert_msg(st == QS_ERR_IO, "status %s: %s", qs_status_name(st), qs_ctx_errmsg(ctx));
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "keep.npy: write error"));
    ck_assert_uint_eq(slurp(path, after, sizeof after), n0);
    ck_assert_int_eq(memcmp(before, after, n0), 0);
    ck_assert_int_eq(count_files(tmpdir), 1);
    qs_tensor_free(&big);
    clean_tmpdir();
    qs_ctx_free(ctx);
}
END_TEST

/* [CASE-NPY-WRITE]: a target that cannot be replaced (a directory) fails at the rename. */
START_TEST(test_write_over_a_directory_fails_and_leaves_no_temporary)
{
    qs_ctx *ctx = qs_ctx_new();
    make_tmpdir();
    char path[600];
    snprintf(path, sizeof path, "%s/adir", tmpdir);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    qs_tensor t;
    ck_assert_int_eq(qs_tensor_alloc(ctx, &t, QS_U8, 1, (int64_t[]){3}), QS_OK);
    ck_assert_int_eq(qsk_npy_write(ctx, path, &t), QS_ERR_IO);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "adir: cannot rename into place"));
    ck_assert_int_eq(count_files(tmpdir), 1);
    ck_assert_int_eq(count_files(path), 0);
    rmdir(path);
    qs_tensor_free(&t);
    clean_tmpdir();
    qs_ctx_free(ctx);
}
END_TEST

/* [CASE-NPY-FP6], [CASE-NPY-WRITE]: bad tensors are refused before any file is made. */
START_TEST(test_write_rejects_bad_tensors_and_creates_nothing)
{
    qs_ctx *ctx = qs_ctx_new();
    make_tmpdir();
    char path[600];
    snprintf(path, sizeof path, "%s/bad.npy", tmpdir);
    qs_tensor t;
    ck_assert_int_eq(qs_tensor_alloc(ctx, &t, QS_E3M2, 1, (int64_t[]){4}), QS_OK);
    ((unsigned char *)t.data)[2] = 0x40;
    ck_assert_int_eq(qsk_npy_write(ctx, path, &t), QS_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "bad.npy: element 2 has code 0x40"));
    ((unsigned char *)t.data)[2] = 0x3F;
    t.numel = 5; /* disagrees with the shape */
    ck_assert_int_eq(qsk_npy_write(ctx, path, &t), QS_ERR_INVALID_ARG);
    t.numel = 4;
    t.dtype = QS_DTYPE_INVALID;
    ck_assert_int_eq(qsk_npy_write(ctx, path, &t), QS_ERR_INVALID_ARG);
    t.dtype = QS_E3M2;
    t.ndim = 9;
    ck_assert_int_eq(qsk_npy_write(ctx, path, &t), QS_ERR_SHAPE);
    t.ndim = 1;
    ck_assert_int_eq(qsk_npy_write(ctx, NULL, &t), QS_ERR_INVALID_ARG);
    ck_assert_int_eq(count_files(tmpdir), 0);
    ck_assert_int_eq(qsk_npy_write(ctx, path, &t), QS_OK);
    ck_assert_int_eq(count_files(tmpdir), 1);
    qs_tensor_free(&t);
    clean_tmpdir();
    qs_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("npy");
    TCase *rd = tcase_create("read");
    tcase_add_test(rd, test_numpy_native_dtypes_load_with_their_values);
    tcase_add_test(rd, test_ml_dtypes_structured_files_load_with_their_codes);
    tcase_add_test(rd, test_e2m1_file_codes_are_packed_low_nibble_first);
    tcase_add_test(rd, test_scalar_empty_and_8d_shapes_load);
    tcase_add_test(rd, test_v2_v3_and_literal_spellings_load);
    tcase_add_loop_test(rd, test_bad_fixture_is_rejected_naming_file_and_problem, 0,
                        (int)(sizeof bad_cases / sizeof bad_cases[0]));
    tcase_add_test(rd, test_missing_file_is_an_io_error);
    suite_add_tcase(s, rd);
    TCase *wr = tcase_create("write");
    tcase_add_test(wr, test_every_dtype_round_trips_in_several_shapes);
    tcase_add_test(wr, test_written_header_is_v1_padded_to_64_and_e2m1_unpacked);
    tcase_add_test(wr, test_write_into_missing_directory_fails_and_leaves_nothing);
    tcase_add_test(wr, test_failed_write_leaves_existing_target_untouched);
    tcase_add_test(wr, test_write_over_a_directory_fails_and_leaves_no_temporary);
    tcase_add_test(wr, test_write_rejects_bad_tensors_and_creates_nothing);
    suite_add_tcase(s, wr);
    return qst_run(s);
}
