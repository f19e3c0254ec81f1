/* hadamard.c: the random Hadamard transform NVFP4 applies to its columnwise copy
 * (spec/recipes.md [REC-NV-RHT]): each group of 16 values times diag(s) * H16 / 4 with
 * TE's fixed sign vector s, summed in FP32 in index order, each output rounded to BF16. */
#include "recipe_internal.h"

/* [REC-NV-RHT-SIGNS]: the fixed sign vector. */
static const int rht_signs[16] = {1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1};

/* Entry (i, j) of the Sylvester Hadamard matrix H16: (-1)^popcount(i & j). */
static int hadamard16(int i, int j)
{
    int v = i & j, parity = 0;
    while (v) {
        parity ^= v & 1;
        v >>= 1;
    }
    return parity ? -1 : 1;
}

/* [REC-NV-RHT]: y[j] = bf16(sum_{i=0..15} x[i] * (s[i] * H[i][j] / 4)), FP32 adds in i order. */
void qsi_rht16(const float *v, int64_t n, float *out)
{
    for (int64_t g = 0; g + 16 <= n; g += 16) {
        float x[16];
        for (int i = 0; i < 16; i++)
            x[i] = v[g + i];
        for (int j = 0; j < 16; j++) {
            float acc = 0.0f;
            for (int i = 0; i < 16; i++) {
                float w = (float)(rht_signs[i] * hadamard16(i, j)) * 0.25f;
                float p = x[i] * w;
                acc = acc + p;
            }
            out[g + j] = qs_round_bf16(acc);
        }
    }
}
