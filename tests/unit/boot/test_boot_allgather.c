/* Root + 4 ranks (threads of one process): join, 100 rounds of allgather
 * of distinct variable-length blobs (checked byte for byte against the
 * formula that made them) and barrier, then a few multi-MiB rounds, a
 * clean goodbye and the root's release. */
#include "boot_test.h"

#define NRANKS 4
#define ROUNDS 100
#define BIG_ROUNDS 3

static swy_boot_addr_t g_addr;

/* Length and content of rank r's blob in round k: independent of the
 * code under test. Some blobs are empty. */
static size_t blob_len(int r, int k)
{
    if (k >= ROUNDS)
        return (size_t)(3 << 20) + (size_t)r * 4099 + (size_t)k;
    if ((r + k) % 9 == 0)
        return 0;
    return (size_t)((r * 7919 + k * 131) % 4000) + 1;
}

static uint8_t blob_byte(int r, int k, size_t i)
{
    return (uint8_t)(r * 31 + k * 17 + (int)(i * 13) + (int)(i >> 8));
}

static void fill_blob(uint8_t *buf, int r, int k)
{
    size_t len = blob_len(r, k);
    for (size_t i = 0; i < len; i++)
        buf[i] = blob_byte(r, k, i);
}

static void rank_main(int rank, void *arg)
{
    (void)arg;
    swy_boot_t *boot = NULL;
    CHECK_OK_EXIT(swy_boot_connect(&g_addr, rank, NRANKS, 10.0, &boot), NULL);
    CHECK_EXIT(swy_boot_rank(boot) == rank);
    CHECK_EXIT(swy_boot_nranks(boot) == NRANKS);
    CHECK_EXIT(swy_boot_failure_fd(boot) >= 0);

    uint8_t *mine = swy_malloc(blob_len(rank, ROUNDS + BIG_ROUNDS) + 64);
    CHECK_EXIT(mine != NULL);
    for (int k = 0; k < ROUNDS + BIG_ROUNDS; k++) {
        fill_blob(mine, rank, k);
        void *all = NULL;
        size_t lens[NRANKS];
        memset(lens, 0xff, sizeof(lens));
        CHECK_OK_EXIT(swy_boot_allgather(boot, mine, blob_len(rank, k), 10.0,
                                         &all, lens), NULL);
        const uint8_t *cursor = all;
        for (int r = 0; r < NRANKS; r++) {
            CHECK_EXIT(lens[r] == blob_len(r, k));
            for (size_t i = 0; i < lens[r]; i++) {
                if (cursor[i] != blob_byte(r, k, i)) {
                    fprintf(stderr,
                            "rank %d round %d: byte %zu of rank %d's blob "
                            "is %u, expected %u\n",
                            rank, k, i, r, cursor[i], blob_byte(r, k, i));
                    exit(1);
                }
            }
            cursor += lens[r];
        }
        swy_free(all);
        CHECK_OK_EXIT(swy_boot_barrier(boot, 10.0), NULL);
    }
    swy_free(mine);
    CHECK_EXIT(swy_boot_failure(boot, NULL, 0) == SWY_OK);
    swy_boot_finalize(boot);
}

int main(void)
{
    uint8_t secret[SWY_BOOT_SECRET_LEN];
    CHECK_OK_EXIT(swy_boot_secret_random(secret), NULL);
    swy_boot_root_t *root = NULL;
    /* NULL host: this host's first non-loopback IPv4 (or loopback). */
    CHECK_OK_EXIT(swy_boot_root_start(NULL, 0, secret, &root, &g_addr), NULL);
    CHECK_EXIT(g_addr.port != 0);
    CHECK_EXIT(memcmp(g_addr.secret, secret, sizeof(secret)) == 0);

    double t0 = swy_time_s();
    test_run_ranks(NRANKS, NULL, rank_main, NULL);
    double t1 = swy_time_s();
    swy_boot_root_release(root);
    double t2 = swy_time_s();
    /* Every rank said goodbye: the release must not wait. */
    CHECK_EXIT(t2 - t1 < 2.0);
    printf("boot allgather: %d rounds + %d multi-MiB rounds on %s:%u in "
           "%.2f s; release %.3f s\n",
           ROUNDS, BIG_ROUNDS, g_addr.host, g_addr.port, t1 - t0, t2 - t1);

    /* IPv6 loopback root, when the host has IPv6. */
    swy_boot_addr_t addr6;
    swy_status_t status = swy_boot_root_start("::1", 0, secret, &root,
                                              &addr6);
    if (status == SWY_OK) {
        CHECK_EXIT(strcmp(addr6.host, "::1") == 0);
        swy_boot_t *boot = NULL;
        CHECK_OK_EXIT(swy_boot_connect(&addr6, 0, 1, 5.0, &boot), NULL);
        size_t len = 0;
        void *all = NULL;
        CHECK_OK_EXIT(swy_boot_allgather(boot, "v6", 2, 5.0, &all, &len), NULL);
        CHECK_EXIT(len == 2 && memcmp(all, "v6", 2) == 0);
        swy_free(all);
        swy_boot_finalize(boot);
        swy_boot_root_release(root);
    } else {
        printf("no IPv6 loopback here: %s\n", swy_err_last());
    }
    return 0;
}
