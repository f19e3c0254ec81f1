/* npy_write_sample.c: writes one .npy file of each dtype (plus a scalar, an empty and an
 * 8-d tensor) into the folder given, for tests/npy_numpy.sh to check with numpy.
 * Without an argument it checks itself: every sample written to a temporary folder reads
 * back with the same dtype, shape and bytes ([CASE-NPY-WRITE]). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "npy.h"

typedef struct sample {
    const char *name;
    qs_dtype dtype;
    int ndim;
    int64_t shape[QS_MAX_DIMS];
    const void *data; /* in memory, host order; E2M1 packed */
    size_t nbytes;
} sample;

static const float fp32[] = {0.0f, 1.0f, -2.0f, 0.5f, 3.25f, 1.0f / 0.0f};
static const double fp64[] = {1.5, -0.25, 1e300, 0.0, -0.0, 2.0};
static const uint16_t fp16[] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x0000, 0x8000};
static const uint16_t bf16[] = {0x3F80, 0xC040, 0x7F80, 0x0000, 0x8000, 0x4000};
static const uint8_t u8[] = {0, 1, 2, 253, 254, 255};
static const int32_t i32[] = {-1, INT32_MAX, INT32_MIN, 0, 7, -7};
static const int64_t i64[] = {INT64_MIN, 1234567890123, -1, 0, 1, INT64_MAX};
static const uint8_t e4m3[] = {0x00, 0x38, 0xFE, 0x7F, 0x01, 0x40};
static const uint8_t e5m2[] = {0x3C, 0xFB, 0x7C, 0x01, 0x00, 0x40};
static const uint8_t e8m0[] = {0x7F, 0x00, 0xFE, 0xFF, 0x80, 0x7E};
static const uint8_t e2m1[] = {0x10, 0x72, 0x0B}; /* codes 0 1 2 7 B */
static const uint8_t e2m3[] = {0x08, 0x3F, 0x01, 0x00, 0x1F, 0x10};
static const uint8_t e3m2[] = {0x0C, 0x3F, 0x01, 0x00, 0x1F, 0x10};
static const float scalar[] = {42.0f};
static const uint8_t eight[] = {0, 1, 2, 3};

#define SAMPLE(n, dt, nd, data, ...)                                                               \
    {                                                                                              \
        n, dt, nd, __VA_ARGS__, data, sizeof data                                                  \
    }

static const sample samples[] = {
    SAMPLE("fp32", QS_FP32, 2, fp32, {2, 3}),
    SAMPLE("fp64", QS_FP64, 2, fp64, {2, 3}),
    SAMPLE("fp16", QS_FP16, 2, fp16, {2, 3}),
    SAMPLE("bf16", QS_BF16, 2, bf16, {2, 3}),
    SAMPLE("u8", QS_U8, 2, u8, {2, 3}),
    SAMPLE("i32", QS_I32, 2, i32, {2, 3}),
    SAMPLE("i64", QS_I64, 2, i64, {2, 3}),
    SAMPLE("e4m3", QS_E4M3, 2, e4m3, {2, 3}),
    SAMPLE("e5m2", QS_E5M2, 2, e5m2, {2, 3}),
    SAMPLE("e8m0", QS_E8M0, 2, e8m0, {2, 3}),
    SAMPLE("e2m1", QS_E2M1, 1, e2m1, {5}),
    SAMPLE("e2m3", QS_E2M3, 2, e2m3, {2, 3}),
    SAMPLE("e3m2", QS_E3M2, 2, e3m2, {2, 3}),
    SAMPLE("scalar", QS_FP32, 0, scalar, {0}),
    SAMPLE("eight_d", QS_U8, 8, eight, {1, 2, 1, 1, 1, 1, 1, 2}),
};

/* Builds the tensor of a sample; the empty one has no data. */
static qs_status make(qs_ctx *ctx, const sample *s, qs_tensor *t)
{
    qs_status st = qs_tensor_alloc(ctx, t, s->dtype, s->ndim, s->shape);
    if (st == QS_OK && t->nbytes != s->nbytes)
        st = qs_ctx_error(ctx, QS_ERR_INTERNAL, "sample %s: %zu bytes, tensor has %zu", s->name,
                          s->nbytes, t->nbytes);
    if (st == QS_OK)
        memcpy(t->data, s->data, s->nbytes);
    return st;
}

static int write_all(qs_ctx *ctx, const char *dir)
{
    char path[4096];
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
        qs_tensor t;
        snprintf(path, sizeof path, "%s/%s.npy", dir, samples[i].name);
        qs_status st = make(ctx, &samples[i], &t);
        if (st == QS_OK)
            st = qsk_npy_write(ctx, path, &t);
        qs_tensor_free(&t);
        if (st != QS_OK) {
            fprintf(stderr, "npy_write_sample: %s\n", qs_ctx_errmsg(ctx));
            return -1;
        }
    }
    qs_tensor t;
    qs_status st = qs_tensor_alloc(ctx, &t, QS_I64, 2, (const int64_t[]){0, 2});
    snprintf(path, sizeof path, "%s/empty.npy", dir);
    if (st == QS_OK)
        st = qsk_npy_write(ctx, path, &t);
    qs_tensor_free(&t);
    if (st != QS_OK)
        fprintf(stderr, "npy_write_sample: %s\n", qs_ctx_errmsg(ctx));
    return st == QS_OK ? 0 : -1;
}

/* Reads every sample back from dir; returns the number of mismatches. */
static int check_all(qs_ctx *ctx, const char *dir)
{
    int failed = 0;
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
        const sample *s = &samples[i];
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.npy", dir, s->name);
        qs_tensor want, got;
        int ok = make(ctx, s, &want) == QS_OK && qsk_npy_read(ctx, path, &got) == QS_OK;
        ok = ok && qs_tensor_same_layout(&want, &got) && got.nbytes == s->nbytes &&
             memcmp(got.data, s->data, s->nbytes) == 0;
        printf("%s %zu - %s reads back\n", ok ? "ok" : "FAIL", i + 1, s->name);
        if (!ok)
            failed++;
        remove(path);
        qs_tensor_free(&want);
        qs_tensor_free(&got);
    }
    return failed;
}

int main(int argc, char **argv)
{
    qs_ctx *ctx = qs_ctx_new();
    if (!ctx)
        return 99;
    if (argc == 2) {
        int r = write_all(ctx, argv[1]);
        qs_ctx_free(ctx);
        return r == 0 ? 0 : 1;
    }
    const char *base = getenv("TMPDIR");
    char dir[512];
    snprintf(dir, sizeof dir, "%s/qspec-sample.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(dir) || write_all(ctx, dir) != 0) {
        qs_ctx_free(ctx);
        return 99;
    }
    int failed = check_all(ctx, dir);
    char empty[600];
    snprintf(empty, sizeof empty, "%s/empty.npy", dir);
    remove(empty);
    rmdir(dir);
    qs_ctx_free(ctx);
    printf("# %d samples, %d failed\n", (int)(sizeof samples / sizeof samples[0]), failed);
    return failed ? 1 : 0;
}
