/* A program from outside the tree, built against an installed Switchyard
 * with `pkg-config --cflags --libs switchyard` alone (test_install.sh): it
 * reaches the library through the installed headers, and the library
 * reaches its plugins beside itself (the script sets SWY_POLICY=aging and
 * no SWY_PLUGIN_PATH). One rank: an allreduce checked against the sum it
 * must give, and the policy in effect read back. */
#include <stdio.h>
#include <string.h>

#include <switchyard/list.h>
#include <switchyard/switchyard.h>

#define N 1000

static int fail(const char *what, swy_status_t status)
{
    printf("FAIL: %s: %s: %s\n", what, swy_status_string(status),
           swy_last_error(NULL));
    return 1;
}

int main(int argc, char **argv)
{
    const char *want_policy = argc > 1 ? argv[1] : "aging";
    size_t bytes = 0;
    swy_status_t status = swy_parse_size("4MiB", &bytes);
    if (status != SWY_OK || bytes != (size_t)4 << 20)
        return fail("swy_parse_size(\"4MiB\")", status);

    swy_unique_id_t id;
    swy_comm_t comm;
    if ((status = swy_get_unique_id(&id)) != SWY_OK)
        return fail("swy_get_unique_id", status);
    if ((status = swy_comm_init_rank(&comm, 1, &id, 0)) != SWY_OK)
        return fail("swy_comm_init_rank", status);

    char policy[64] = "";
    if ((status = swy_comm_query(comm, "SWY_POLICY", policy,
                                 sizeof(policy))) != SWY_OK)
        return fail("swy_comm_query(SWY_POLICY)", status);
    if (strcmp(policy, want_policy) != 0) {
        printf("FAIL: policy in effect is \"%s\", expected \"%s\"\n", policy,
               want_policy);
        return 1;
    }

    static float in[N], out[N];
    for (int i = 0; i < N; i++)
        in[i] = (float)(i % 17) - 8.0f;
    if ((status = swy_allreduce(in, out, N, SWY_FLOAT32, SWY_SUM, comm, NULL,
                                NULL)) != SWY_OK)
        return fail("swy_allreduce", status);
    for (int i = 0; i < N; i++)
        if (out[i] != in[i]) { /* one rank: the sum is the input */
            printf("FAIL: out[%d] = %g, expected %g\n", i, out[i], in[i]);
            return 1;
        }

    /* The public list is usable from the installed header alone. */
    swy_list_t head, item;
    swy_list_init(&head);
    swy_list_push_back(&head, &item);
    if (swy_list_empty(&head) || head.next != &item)
        return fail("swy_list", SWY_ERR_INTERNAL);

    /* The installed header's version is the library's (both come from
     * meson.build's one version). */
    char header_version[32];
    snprintf(header_version, sizeof(header_version), "%d.%d.%d",
             SWY_VERSION_MAJOR, SWY_VERSION_MINOR, SWY_VERSION_PATCH);
    if (strcmp(header_version, swy_version()) != 0) {
        printf("FAIL: switchyard/version.h says %s, swy_version() %s\n",
               header_version, swy_version());
        return 1;
    }

    if ((status = swy_comm_destroy(comm)) != SWY_OK)
        return fail("swy_comm_destroy", status);
    printf("PASS: %s, policy %s, allreduce of %d floats\n", swy_version(),
           policy, N);
    return 0;
}
