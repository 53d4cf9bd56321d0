/* CUDA routing kernels against the CPU ones on the same seeded inputs: the
 * counting sort (counts, offsets, rows, rank counts, inverse: exact), pack,
 * its backward, unpack, gather_rows and combine (forward, backward), fp32
 * and bf16, with dropped slots and experts that receive nothing, and odd
 * row sizes that take the narrow copy path.  Tolerances in kctest.h. */
#include "kctest.h"

static void check_route(int S, int k, int n_ranks, int epr, int H)
{
    char shape[96];
    snprintf(shape, sizeof(shape), "S=%d k=%d ranks=%d epr=%d H=%d", S, k,
             n_ranks, epr, H);
    int E = n_ranks * epr;
    size_t ns = (size_t)S * k, nx = (size_t)S * H;

    /* Choices: ~10% dropped; experts 1 and E-1 never chosen (when E > 2). */
    int *idx = kct_host(ns * sizeof(int));
    for (size_t s = 0; s < ns; s++) {
        int e = kct_int(E);
        if (E > 2 && (e == 1 || e == E - 1))
            e = 0;
        idx[s] = kct_int(10) == 0 ? -1 : e;
    }
    int *counts = kct_host((size_t)E * sizeof(int));
    int *offsets = kct_host((size_t)(E + 1) * sizeof(int));
    int *row_of_slot = kct_host(ns * sizeof(int));
    int n_rows = swy_k_sort_slots(idx, S, k, n_ranks, epr, counts, offsets,
                                  row_of_slot);
    int *idx_d = kct_up(idx, ns * sizeof(int));
    int *counts_d = kct_dev((size_t)E * sizeof(int));
    int *offsets_d = kct_dev((size_t)(E + 1) * sizeof(int));
    int *ros_d = kct_dev(ns * sizeof(int)), *n_rows_d = kct_dev(sizeof(int));
    KCT_OK(swy_kc_sort_slots(kct_ctx, idx_d, S, k, n_ranks, epr, counts_d,
                             offsets_d, ros_d, n_rows_d));
    kct_cmp_dev_int("swy_kc_sort_slots", shape, "counts", counts_d, counts,
                    (size_t)E);
    kct_cmp_dev_int("swy_kc_sort_slots", shape, "offsets", offsets_d, offsets,
                    (size_t)E + 1);
    kct_cmp_dev_int("swy_kc_sort_slots", shape, "row_of_slot", ros_d,
                    row_of_slot, ns);
    kct_cmp_dev_int("swy_kc_sort_slots", shape, "n_rows", n_rows_d, &n_rows,
                    1);
    /* The rest reads the CPU's layout (the GPU's was just checked). */
    kct_set(ros_d, row_of_slot, ns * sizeof(int));
    kct_set(counts_d, counts, (size_t)E * sizeof(int));

    int *rc = kct_host((size_t)n_ranks * sizeof(int));
    int *rc_d = kct_dev((size_t)n_ranks * sizeof(int));
    swy_k_sort_rank_counts(counts, n_ranks, epr, rc);
    KCT_OK(swy_kc_sort_rank_counts(kct_ctx, counts_d, n_ranks, epr, rc_d));
    kct_cmp_dev_int("swy_kc_sort_rank_counts", shape, "rank_counts", rc_d, rc,
                    (size_t)n_ranks);

    int *sor = kct_host((size_t)n_rows * sizeof(int));
    int *sor_d = kct_dev((size_t)n_rows * sizeof(int));
    swy_k_sort_invert(row_of_slot, (int)ns, n_rows, sor);
    KCT_OK(swy_kc_sort_invert(kct_ctx, ros_d, (int)ns, n_rows, sor_d));
    kct_cmp_dev_int("swy_kc_sort_invert", shape, "slot_of_row", sor_d, sor,
                    (size_t)n_rows);

    size_t nr = (size_t)n_rows * H, nsl = ns * H;
    /* gather_rows map: the inverse's slots, as rows of a [S*k][H] source,
     * with every third set to -1. */
    int *map = kct_host((size_t)n_rows * sizeof(int));
    for (int i = 0; i < n_rows; i++)
        map[i] = i % 3 == 2 ? -1 : sor[i];
    int *map_d = kct_up(map, (size_t)n_rows * sizeof(int));

    for (int bf = 0; bf < 2; bf++) {
        char sh2[128];
        snprintf(sh2, sizeof(sh2), "%s %s", shape, bf ? "bf16" : "fp32");
        float *x = kct_rand(nx, -1, 1), *dsend = kct_rand(nr, -1, 1);
        float *rows = kct_rand(nr, -1, 1), *slot_src = kct_rand(nsl, -1, 1);
        float *dout = kct_rand(nx, -1, 1), *w = kct_rand(ns, 0, 1);
        /* Outputs start from the same sentinel on both sides, so rows
         * that must stay untouched are checked too. */
        float *send = kct_rand(nr, 5, 6), *drows = kct_rand(nr, 5, 6);
        float *dx = kct_host(nx * 4), *slots = kct_host(nsl * 4);
        float *gat = kct_host(nr * 4), *out = kct_host(nx * 4);
        float *dtw = kct_host(ns * 4), *dtw2 = kct_host(ns * 4);
        if (bf) {
            float *all[] = {x, dsend, rows, slot_src, dout, send, drows};
            size_t n[] = {nx, nr, nr, nsl, nx, nr, nr};
            for (int i = 0; i < 7; i++)
                kct_round_bf16(all[i], n[i]);
        }
        float *send_c = kct_dup(send, nr), *drows_c = kct_dup(drows, nr);
        swy_k_pack(x, row_of_slot, S, k, H, send_c);
        swy_k_pack_bwd(dsend, row_of_slot, S, k, H, dx);
        swy_k_unpack(rows, row_of_slot, S, k, H, slots);
        swy_k_gather_rows(slot_src, map, n_rows, H, gat);
        swy_k_combine_fwd(rows, row_of_slot, w, S, k, H, out);
        swy_k_combine_bwd(rows, row_of_slot, w, dout, S, k, H, drows_c, dtw);
        swy_k_combine_bwd(rows, row_of_slot, w, dout, S, k, H, NULL, dtw2);
        float *w_d = kct_up(w, ns * 4), *dtw_d = kct_dev(ns * 4);
        float *dtw2_d = kct_dev(ns * 4);
        if (!bf) {
            float *x_d = kct_up(x, nx * 4), *dsend_d = kct_up(dsend, nr * 4);
            float *rows_d = kct_up(rows, nr * 4);
            float *src_d = kct_up(slot_src, nsl * 4);
            float *dout_d = kct_up(dout, nx * 4);
            float *send_d = kct_up(send, nr * 4);
            float *drows_d = kct_up(drows, nr * 4);
            float *dx_d = kct_dev(nx * 4), *slots_d = kct_dev(nsl * 4);
            float *gat_d = kct_dev(nr * 4), *out_d = kct_dev(nx * 4);
            KCT_OK(swy_kc_pack(kct_ctx, x_d, ros_d, S, k, H, send_d));
            KCT_OK(swy_kc_pack_bwd(kct_ctx, dsend_d, ros_d, S, k, H, dx_d));
            KCT_OK(swy_kc_unpack(kct_ctx, rows_d, ros_d, S, k, H, slots_d));
            KCT_OK(swy_kc_gather_rows(kct_ctx, src_d, map_d, n_rows, H,
                                      gat_d));
            KCT_OK(swy_kc_combine_fwd(kct_ctx, rows_d, ros_d, w_d, S, k, H,
                                      out_d));
            KCT_OK(swy_kc_combine_bwd(kct_ctx, rows_d, ros_d, w_d, dout_d, S,
                                      k, H, drows_d, dtw_d));
            KCT_OK(swy_kc_combine_bwd(kct_ctx, rows_d, ros_d, w_d, dout_d, S,
                                      k, H, NULL, dtw2_d));
            kct_cmp_dev("swy_kc_pack", sh2, "send", send_d, send_c, nr, 0.0);
            kct_cmp_dev("swy_kc_pack_bwd", sh2, "dx", dx_d, dx, nx,
                        KCT_TOL_F32);
            kct_cmp_dev("swy_kc_unpack", sh2, "slots", slots_d, slots, nsl,
                        0.0);
            kct_cmp_dev("swy_kc_gather_rows", sh2, "dst", gat_d, gat, nr,
                        0.0);
            kct_cmp_dev("swy_kc_combine_fwd", sh2, "out", out_d, out, nx,
                        KCT_TOL_F32);
            kct_cmp_dev("swy_kc_combine_bwd", sh2, "drows", drows_d, drows_c,
                        nr, KCT_TOL_F32);
            void *dev[] = {x_d, dsend_d, rows_d, src_d, dout_d, send_d,
                           drows_d, dx_d, slots_d, gat_d, out_d};
            for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
                kct_dfree(dev[i]);
        } else {
            swy_kc_bf16_t *x_d = kct_up_bf16(x, nx);
            swy_kc_bf16_t *dsend_d = kct_up_bf16(dsend, nr);
            swy_kc_bf16_t *rows_d = kct_up_bf16(rows, nr);
            swy_kc_bf16_t *src_d = kct_up_bf16(slot_src, nsl);
            swy_kc_bf16_t *dout_d = kct_up_bf16(dout, nx);
            swy_kc_bf16_t *send_d = kct_up_bf16(send, nr);
            swy_kc_bf16_t *drows_d = kct_up_bf16(drows, nr);
            swy_kc_bf16_t *dx_d = kct_dev(nx * 2), *slots_d = kct_dev(nsl * 2);
            swy_kc_bf16_t *gat_d = kct_dev(nr * 2), *out_d = kct_dev(nx * 2);
            KCT_OK(swy_kc_pack_bf16(kct_ctx, x_d, ros_d, S, k, H, send_d));
            KCT_OK(swy_kc_pack_bwd_bf16(kct_ctx, dsend_d, ros_d, S, k, H,
                                        dx_d));
            KCT_OK(swy_kc_unpack_bf16(kct_ctx, rows_d, ros_d, S, k, H,
                                      slots_d));
            KCT_OK(swy_kc_gather_rows_bf16(kct_ctx, src_d, map_d, n_rows, H,
                                           gat_d));
            KCT_OK(swy_kc_combine_fwd_bf16(kct_ctx, rows_d, ros_d, w_d, S, k,
                                           H, out_d));
            KCT_OK(swy_kc_combine_bwd_bf16(kct_ctx, rows_d, ros_d, w_d,
                                           dout_d, S, k, H, drows_d, dtw_d));
            KCT_OK(swy_kc_combine_bwd_bf16(kct_ctx, rows_d, ros_d, w_d,
                                           dout_d, S, k, H, NULL, dtw2_d));
            kct_cmp_dev_bf16("swy_kc_pack_bf16", sh2, "send", send_d, send_c,
                             nr);
            kct_cmp_dev_bf16("swy_kc_pack_bwd_bf16", sh2, "dx", dx_d, dx, nx);
            kct_cmp_dev_bf16("swy_kc_unpack_bf16", sh2, "slots", slots_d,
                             slots, nsl);
            kct_cmp_dev_bf16("swy_kc_gather_rows_bf16", sh2, "dst", gat_d,
                             gat, nr);
            kct_cmp_dev_bf16("swy_kc_combine_fwd_bf16", sh2, "out", out_d,
                             out, nx);
            kct_cmp_dev_bf16("swy_kc_combine_bwd_bf16", sh2, "drows", drows_d,
                             drows_c, nr);
            void *dev[] = {x_d, dsend_d, rows_d, src_d, dout_d, send_d,
                           drows_d, dx_d, slots_d, gat_d, out_d};
            for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
                kct_dfree(dev[i]);
        }
        double tol = bf ? KCT_TOL_BF16 : KCT_TOL_F32;
        const char *fb = bf ? "swy_kc_combine_bwd_bf16" : "swy_kc_combine_bwd";
        kct_cmp_dev(fb, sh2, "dtopk_w", dtw_d, dtw, ns, tol);
        kct_cmp_dev(fb, sh2, "dtopk_w(2)", dtw2_d, dtw2, ns, tol);
        kct_dfree(w_d);
        kct_dfree(dtw_d);
        kct_dfree(dtw2_d);
        void *host[] = {x, dsend, rows, slot_src, dout, w, send, drows, dx,
                        slots, gat, out, dtw, dtw2, send_c, drows_c};
        for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++)
            free(host[i]);
    }

    void *dev[] = {idx_d, counts_d, offsets_d, ros_d, n_rows_d, rc_d, sor_d,
                   map_d};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
        kct_dfree(dev[i]);
    void *host[] = {idx, counts, offsets, row_of_slot, rc, sor, map};
    for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++)
        free(host[i]);
}

int main(void)
{
    kct_init("test_kc_route");
    kct_seed(20261128);
    check_route(0, 2, 2, 2, 8);
    check_route(1, 1, 1, 1, 4);
    check_route(100, 2, 2, 4, 32);
    check_route(257, 4, 4, 2, 65);
    check_route(1000, 2, 1, 8, 128);
    check_route(3000, 2, 8, 2, 7);
    return kct_finish("test_kc_route");
}
