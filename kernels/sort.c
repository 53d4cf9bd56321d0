/* Counting sort of token slots into FastMoE's send layout, grouped by
 * (destination rank, local expert) (laekov/fastmoe cuda/local_exchange.cuh
 * assigns the same positions with a scan over per-expert counts). */
#include <assert.h>
#include <string.h>

#include "swy_kernels.h"

int swy_k_sort_slots(const int *topk_idx, int S, int k, int n_ranks,
                     int experts_per_rank, int *expert_counts,
                     int *expert_offsets, int *row_of_slot)
{
    assert(S >= 0 && k >= 1 && n_ranks >= 1 && experts_per_rank >= 1);
    int E = n_ranks * experts_per_rank;
    size_t n_slots = (size_t)S * k;
    /* Global expert id e = rank * experts_per_rank + local expert, so
     * ascending e is exactly (rank, local expert) order. */
    memset(expert_counts, 0, (size_t)E * sizeof(*expert_counts));
    for (size_t s = 0; s < n_slots; s++) {
        assert(topk_idx[s] < E);
        if (topk_idx[s] >= 0)
            expert_counts[topk_idx[s]]++;
    }
    expert_offsets[0] = 0;
    for (int e = 0; e < E; e++)
        expert_offsets[e + 1] = expert_offsets[e] + expert_counts[e];
    /* Second pass in slot order: each group fills front to back, which is
     * what makes the sort stable by token. expert_counts is reused as the
     * fill cursor and restored by the end of the pass. */
    memset(expert_counts, 0, (size_t)E * sizeof(*expert_counts));
    for (size_t s = 0; s < n_slots; s++) {
        int e = topk_idx[s];
        if (e < 0) {
            row_of_slot[s] = -1;
            continue;
        }
        row_of_slot[s] = expert_offsets[e] + expert_counts[e]++;
    }
    return expert_offsets[E];
}

void swy_k_sort_rank_counts(const int *expert_counts, int n_ranks,
                            int experts_per_rank, int *rank_counts)
{
    assert(n_ranks >= 1 && experts_per_rank >= 1);
    for (int r = 0; r < n_ranks; r++) {
        int sum = 0;
        for (int i = 0; i < experts_per_rank; i++)
            sum += expert_counts[r * experts_per_rank + i];
        rank_counts[r] = sum;
    }
}

void swy_k_sort_invert(const int *row_of_slot, int n_slots, int n_rows,
                       int *slot_of_row)
{
    assert(n_slots >= 0 && n_rows >= 0);
    for (int r = 0; r < n_rows; r++)
        slot_of_row[r] = -1;
    for (int s = 0; s < n_slots; s++) {
        int r = row_of_slot[s];
        assert(r < n_rows);
        if (r >= 0)
            slot_of_row[r] = s;
    }
}
