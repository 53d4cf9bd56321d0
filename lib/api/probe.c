/* SWY_TOPO_PROBE: measure every link at init instead of trusting the
 * per-class defaults. One ordered pair at a time (so nothing else shares
 * the link while it is timed), rank i sends PROBE_BYTES to rank j inside
 * a collective that every rank joins (4 MiB: well past a shaper's burst).
 * The receiver's best of PROBE_REPS, minus the time of an 8-byte exchange
 * (the latency), gives the bandwidth; a pair's figure is the slower of its
 * two directions. Every rank learns the receiver's time through an
 * allreduce, so the matrix — and the partition size derived from it — is
 * the same everywhere. Cost: W*(W-1) timed exchanges; meant for setup,
 * not for every job. */
#include <string.h>

#include "api/comm_impl.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/log.h"

#define PROBE_BYTES (4u << 20)
#define PROBE_REPS 3

/* Best time over PROBE_REPS of src sending n bytes to dst. */
static swy_status_t probe_pair(swy_comm_t comm, int src, int dst, size_t n,
                               char *buf, size_t *counts, double *best_p)
{
    int w = comm->nranks;
    size_t *sendcounts = counts, *recvcounts = counts + w,
           *displs = counts + 2 * w;
    swy_op_attr_t attr = SWY_OP_ATTR_INIT;
    attr.name = "topo-probe";
    double best = 1e30;
    memset(counts, 0, 3 * (size_t)w * sizeof(size_t));
    if (comm->rank == src)
        sendcounts[dst] = n;
    if (comm->rank == dst)
        recvcounts[src] = n;
    for (int rep = 0; rep < PROBE_REPS; rep++) {
        SWY_CHECK(swy_barrier(comm));
        double t0 = swy_time_s();
        SWY_CHECK(swy_alltoallv(buf, sendcounts, displs, buf + PROBE_BYTES,
                                recvcounts, displs, SWY_UINT8, comm, &attr,
                                NULL));
        double t = swy_time_s() - t0;
        best = t < best ? t : best;
    }
    /* The receiver's time is the transfer's: share it. */
    double times[2] = {comm->rank == dst ? best : 0, 0};
    SWY_CHECK(swy_allreduce(times, times, 1, SWY_FLOAT64, SWY_MAX, comm,
                            NULL, NULL));
    *best_p = times[0];
    return SWY_OK;
}

swy_status_t swy_api_probe_links(swy_comm_t comm)
{
    int w = comm->nranks;
    swy_status_t status = SWY_OK;
    char *buf = swy_malloc(2 * (size_t)PROBE_BYTES);
    size_t *counts = swy_calloc(3 * (size_t)w, sizeof(size_t));
    if (buf == NULL || counts == NULL) {
        status = swy_err_set(SWY_ERR_NO_MEMORY, "topo", "out of memory");
        goto out;
    }
    memset(buf, 1, 2 * (size_t)PROBE_BYTES);
    double t0 = swy_time_s();
    for (int i = 0; i < w; i++)
        for (int j = i + 1; j < w; j++) {
            double big_ij, small_ij, big_ji, small_ji;
            SWY_CHECK_GOTO(probe_pair(comm, i, j, PROBE_BYTES, buf, counts,
                                      &big_ij), status, out);
            SWY_CHECK_GOTO(probe_pair(comm, i, j, 8, buf, counts,
                                      &small_ij), status, out);
            SWY_CHECK_GOTO(probe_pair(comm, j, i, PROBE_BYTES, buf, counts,
                                      &big_ji), status, out);
            SWY_CHECK_GOTO(probe_pair(comm, j, i, 8, buf, counts,
                                      &small_ji), status, out);
            double bw_ij = PROBE_BYTES / SWY_MAX(big_ij - small_ij, 1e-9);
            double bw_ji = PROBE_BYTES / SWY_MAX(big_ji - small_ji, 1e-9);
            double lat = SWY_MAX(small_ij, small_ji);
            swy_topo_set_link(comm->topo, i, j, SWY_MIN(bw_ij, bw_ji), lat);
            swy_topo_set_link(comm->topo, j, i, SWY_MIN(bw_ij, bw_ji), lat);
            if (comm->rank == 0)
                swy_info("topo", "probe: ranks %d <-> %d (%s): %.3f GB/s, "
                         "%.1f us", i, j,
                         swy_topo_link_class_name(
                             swy_topo_link_class(comm->topo, i, j)),
                         SWY_MIN(bw_ij, bw_ji) / 1e9, lat * 1e6);
        }
    swy_info("topo", "probe of %d links took %.2f s", w * (w - 1) / 2,
             swy_time_s() - t0);
out:
    swy_free(counts);
    swy_free(buf);
    return status;
}
