/* Counting sort of slots into the (rank, expert) send layout, its inverse,
 * and pack / unpack / gather of rows, against naive implementations. */
#include <string.h>

#include "ktest.h"
#include "swy_kernels.h"

/* Random choices with distinct experts per token and some drops. */
static void random_choices(int *idx, int S, int k, int E, int drop_pct)
{
    for (int t = 0; t < S; t++)
        for (int j = 0; j < k; j++) {
            int e, dup;
            do {
                e = kt_int(E);
                dup = 0;
                for (int l = 0; l < j; l++)
                    dup |= idx[t * k + l] == e;
            } while (dup);
            idx[t * k + j] = e;
        }
    for (int s = 0; s < S * k; s++)
        if (kt_int(100) < drop_pct)
            idx[s] = -1;
}

static void check_sort(int S, int k, int n_ranks, int epr, int drop_pct)
{
    int E = n_ranks * epr;
    int *idx = kt_alloc((size_t)(S * k + 1) * sizeof(int));
    int *row = kt_alloc((size_t)(S * k + 1) * sizeof(int));
    int *counts = kt_alloc((size_t)E * sizeof(int));
    int *offsets = kt_alloc((size_t)(E + 1) * sizeof(int));
    int *rank_counts = kt_alloc((size_t)n_ranks * sizeof(int));
    random_choices(idx, S, k, E, drop_pct);
    int n = swy_k_sort_slots(idx, S, k, n_ranks, epr, counts, offsets, row);

    /* Naive layout: walk ranks, then their local experts, then slots in
     * order, handing out rows 0, 1, 2, ... */
    int next = 0, kept = 0;
    for (int r = 0; r < n_ranks; r++)
        for (int i = 0; i < epr; i++) {
            int e = r * epr + i, c = 0;
            CHECK(offsets[e] == next);
            for (int s = 0; s < S * k; s++)
                if (idx[s] == e) {
                    CHECK(row[s] == next);
                    next++;
                    c++;
                }
            CHECK(counts[e] == c);
        }
    for (int s = 0; s < S * k; s++) {
        kept += idx[s] >= 0;
        if (idx[s] < 0)
            CHECK(row[s] == -1);
    }
    CHECK(n == kept && offsets[E] == kept && next == kept);

    /* Structural properties, stated directly: a permutation of [0, n);
     * each row inside its expert's group; rank groups contiguous; stable. */
    char *hit = kt_alloc((size_t)n + 1);
    for (int s = 0; s < S * k; s++) {
        if (row[s] < 0)
            continue;
        CHECK(row[s] < n && !hit[row[s]]);
        hit[row[s]] = 1;
        int e = idx[s];
        CHECK(row[s] >= offsets[e] && row[s] < offsets[e + 1]);
        for (int s2 = s + 1; s2 < S * k; s2++)
            if (idx[s2] == e)
                CHECK(row[s2] > row[s]);
    }
    swy_k_sort_rank_counts(counts, n_ranks, epr, rank_counts);
    int rank_start = 0;
    for (int r = 0; r < n_ranks; r++) {
        CHECK(offsets[r * epr] == rank_start);
        rank_start += rank_counts[r];
        CHECK(offsets[(r + 1) * epr] == rank_start);
        for (int s = 0; s < S * k; s++)
            if (idx[s] >= 0 && idx[s] / epr == r)
                CHECK(row[s] >= offsets[r * epr] &&
                      row[s] < offsets[(r + 1) * epr]);
    }

    /* Inverse. */
    int *slot = kt_alloc((size_t)(n + 1) * sizeof(int));
    swy_k_sort_invert(row, S * k, n, slot);
    for (int r = 0; r < n; r++)
        CHECK(slot[r] >= 0 && row[slot[r]] == r);
    free(slot);
    free(hit);
    free(idx);
    free(row);
    free(counts);
    free(offsets);
    free(rank_counts);
}

static void test_sort_by_hand(void)
{
    /* 2 ranks x 2 experts; tokens 0..3, k = 2. */
    const int idx[8] = {3, 0, 1, 3, -1, 0, 2, 1};
    int counts[4], offsets[5], row[8], slot[8];
    int n = swy_k_sort_slots(idx, 4, 2, 2, 2, counts, offsets, row);
    /* e0: slots 1, 5; e1: slots 2, 7; e2: slot 6; e3: slots 0, 3. */
    const int want_row[8] = {5, 0, 2, 6, -1, 1, 4, 3};
    CHECK(n == 7);
    CHECK(counts[0] == 2 && counts[1] == 2 && counts[2] == 1 &&
          counts[3] == 2);
    CHECK(offsets[0] == 0 && offsets[1] == 2 && offsets[2] == 4 &&
          offsets[3] == 5 && offsets[4] == 7);
    for (int s = 0; s < 8; s++)
        CHECK(row[s] == want_row[s]);
    swy_k_sort_invert(row, 8, 7, slot);
    const int want_slot[7] = {1, 5, 2, 7, 6, 0, 3};
    for (int r = 0; r < 7; r++)
        CHECK(slot[r] == want_slot[r]);
}

static void test_pack(int S, int k, int E, int H)
{
    int *idx = kt_alloc((size_t)(S * k + 1) * sizeof(int));
    int *row = kt_alloc((size_t)(S * k + 1) * sizeof(int));
    int *counts = kt_alloc((size_t)E * sizeof(int));
    int *offsets = kt_alloc((size_t)(E + 1) * sizeof(int));
    random_choices(idx, S, k, E, 20);
    int n = swy_k_sort_slots(idx, S, k, 1, E, counts, offsets, row);
    float *x = kt_alloc((size_t)S * H * sizeof(float) + 1);
    float *send = kt_alloc((size_t)n * H * sizeof(float) + 1);
    float *slots = kt_alloc((size_t)S * k * H * sizeof(float) + 1);
    float *dx = kt_alloc((size_t)S * H * sizeof(float) + 1);
    kt_fill(x, (size_t)S * H, -1, 1);
    swy_k_pack(x, row, S, k, H, send);
    /* Every send row is its slot's token row. */
    for (int s = 0; s < S * k; s++)
        if (row[s] >= 0)
            CHECK(memcmp(send + (size_t)row[s] * H, x + (size_t)(s / k) * H,
                         (size_t)H * sizeof(float)) == 0);
    /* Round trip: unpack gives each kept slot its token back, zeros for a
     * dropped slot. */
    memset(slots, 0xff, (size_t)S * k * H * sizeof(float));
    swy_k_unpack(send, row, S, k, H, slots);
    for (int s = 0; s < S * k; s++)
        for (int h = 0; h < H; h++)
            CHECK(slots[(size_t)s * H + h] ==
                  (row[s] >= 0 ? x[(size_t)(s / k) * H + h] : 0.0f));
    /* pack_bwd sums a token's kept rows (naive: per token, per h). */
    swy_k_pack_bwd(send, row, S, k, H, dx);
    for (int t = 0; t < S; t++)
        for (int h = 0; h < H; h++) {
            double want = 0;
            for (int j = 0; j < k; j++)
                if (row[t * k + j] >= 0)
                    want += send[(size_t)row[t * k + j] * H + h];
            CHECK(fabs(dx[(size_t)t * H + h] - want) <= 1e-6 * k);
        }
    /* gather_rows with the inverse permutation rebuilds the send buffer
     * from the slots. */
    int *slot = kt_alloc((size_t)(n + 1) * sizeof(int));
    float *again = kt_alloc((size_t)n * H * sizeof(float) + 1);
    swy_k_sort_invert(row, S * k, n, slot);
    swy_k_gather_rows(slots, slot, n, H, again);
    CHECK(memcmp(again, send, (size_t)n * H * sizeof(float)) == 0);
    free(slot);
    free(again);
    free(idx);
    free(row);
    free(counts);
    free(offsets);
    free(x);
    free(send);
    free(slots);
    free(dx);
}

int main(void)
{
    kt_seed(7);
    test_sort_by_hand();
    check_sort(50, 2, 4, 2, 10);
    check_sort(33, 1, 3, 3, 0);
    check_sort(17, 4, 2, 4, 30);
    check_sort(1, 3, 1, 8, 0);
    check_sort(0, 2, 2, 2, 0);    /* no tokens */
    check_sort(10, 2, 2, 2, 100); /* everything dropped */
    test_pack(20, 2, 4, 5);
    test_pack(9, 3, 6, 1);
    test_pack(0, 2, 4, 3);
    return kt_finish("kernels_sort_pack");
}
