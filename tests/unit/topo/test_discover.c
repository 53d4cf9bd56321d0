/* Topology discovery: the DGX-like XML fixture (counts, GPU and NIC bus ids
 * and locality, read off the XML by hand), synthetic strings, invalid
 * sources, the SWY_TOPO_* variables, and the real host. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "topo/topo.h"
#include "util/config.h"
#include "util/status.h"

static char fixture_xml[4096];

/* The boot id as the test reads it, independently of lib/topo. */
static void read_boot_id(char *buf, size_t len)
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");

    buf[0] = '\0';
    if (f == NULL)
        return;
    if (fgets(buf, (int)len, f) == NULL)
        buf[0] = '\0';
    fclose(f);
    buf[strcspn(buf, "\n")] = '\0';
}

static void expect_host_identity(const swy_topo_local_t *local)
{
    char hostname[256];
    char boot_id[64];
    char expected_id[512];

    CHECK(gethostname(hostname, sizeof(hostname)) == 0);
    read_boot_id(boot_id, sizeof(boot_id));
    CHECK(strlen(boot_id) == 36);
    snprintf(expected_id, sizeof(expected_id), "%s:%s", hostname, boot_id);
    CHECK(strcmp(local->hostname, hostname) == 0);
    CHECK(strcmp(local->host_id, expected_id) == 0);
    CHECK(strstr(local->host_id, boot_id) != NULL);
}

/* The fixture's PUs 0-15 are package 0 / NUMA 0 and PUs 16-31 package 1 /
 * NUMA 1 (cpusets 0x0000ffff and 0xffff0000 in the XML). The real
 * binding counts only when all of it lies in the fixture's PUs. */
static int expected_fixture_numa(void)
{
    cpu_set_t set;
    int low = 0, high = 0, outside = 0;

    CHECK(sched_getaffinity(0, sizeof(set), &set) == 0);
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &set))
            continue;
        if (cpu < 16)
            low++;
        else if (cpu < 32)
            high++;
        else
            outside++;
    }
    if (outside > 0 || (low > 0 && high > 0) || (low == 0 && high == 0))
        return -1;
    return low > 0 ? 0 : 1;
}

static void test_fixture(void)
{
    /* Read by hand from dgx-like-8gpu-2nic.xml: PCI class 0302, vendor
     * 10de; the first four under package 0 (nodeset 0x1), the rest under
     * package 1 (nodeset 0x2). */
    static const struct {
        const char *bus_id;
        int numa;
    } gpus[8] = {
        {"0000:12:00.0", 0}, {"0000:13:00.0", 0}, {"0000:22:00.0", 0},
        {"0000:23:00.0", 0}, {"0000:92:00.0", 1}, {"0000:93:00.0", 1},
        {"0000:a2:00.0", 1}, {"0000:a3:00.0", 1},
    };
    /* Two ConnectX-6 adapters, each with an OpenFabrics (osdev_type 3)
     * and a network (osdev_type 2) OS device. */
    static const struct {
        const char *name;
        const char *bus_id;
        int numa;
    } nics[4] = {
        {"mlx5_0", "0000:19:00.0", 0},
        {"ib0", "0000:19:00.0", 0},
        {"mlx5_1", "0000:99:00.0", 1},
        {"ib1", "0000:99:00.0", 1},
    };
    swy_topo_local_t local;
    char text[4096];
    int expected_numa = expected_fixture_numa();

    CHECK(swy_topo_discover_from(fixture_xml, NULL, &local) == SWY_OK);
    CHECK(strcmp(local.source, "xml") == 0);
    CHECK(local.n_packages == 2);
    CHECK(local.n_numa == 2);
    CHECK(local.n_cores == 16);
    CHECK(local.n_pus == 32);
    CHECK(local.n_gpus == 8);
    for (int i = 0; i < 8; i++) {
        int found = 0;

        for (int g = 0; g < local.n_gpus; g++) {
            if (strcmp(local.gpus[g].bus_id, gpus[i].bus_id) == 0) {
                found++;
                CHECK(local.gpus[g].numa == gpus[i].numa);
            }
        }
        if (found != 1)
            fprintf(stderr, "GPU %s found %d times\n", gpus[i].bus_id, found);
        CHECK(found == 1);
    }
    CHECK(local.n_nics == 4);
    for (int i = 0; i < 4; i++) {
        int found = 0;

        for (int n = 0; n < local.n_nics; n++) {
            if (strcmp(local.nics[n].name, nics[i].name) == 0) {
                found++;
                CHECK(strcmp(local.nics[n].bus_id, nics[i].bus_id) == 0);
                CHECK(local.nics[n].numa == nics[i].numa);
            }
        }
        CHECK(found == 1);
    }
    CHECK(local.numa == expected_numa);
    CHECK(local.package == expected_numa); /* one NUMA node per package */
    expect_host_identity(&local);

    swy_topo_describe_local(&local, text, sizeof(text));
    CHECK(strstr(text, "source: xml") != NULL);
    CHECK(strstr(text, "packages: 2, NUMA nodes: 2, cores: 16, PUs: 32") !=
          NULL);
    CHECK(strstr(text, "0000:a3:00.0, NUMA 1") != NULL);
    CHECK(strstr(text, "mlx5_1, bus 0000:99:00.0, NUMA 1") != NULL);
    CHECK(strstr(text, local.host_id) != NULL);

    /* A short buffer is truncated, terminated, never overrun. */
    memset(text, 'x', sizeof(text));
    swy_topo_describe_local(&local, text, 16);
    CHECK(strlen(text) == 15);
    CHECK(text[16] == 'x');
}

static void test_synthetic(void)
{
    static const struct {
        const char *description;
        int packages, numa, cores, pus;
    } cases[] = {
        {"pack:2 numa:2 core:4 pu:2", 2, 4, 16, 32},
        {"pack:1 core:2 pu:1", 1, 1, 2, 2},
        {"numa:3 core:2 pu:1", 0, 3, 6, 6},
        {"pack:4 core:3 pu:4", 4, 1, 12, 48},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        swy_topo_local_t local;

        CHECK(swy_topo_discover_from(NULL, cases[i].description, &local) ==
              SWY_OK);
        CHECK(strcmp(local.source, "synthetic") == 0);
        CHECK(local.n_packages == cases[i].packages);
        CHECK(local.n_numa == cases[i].numa);
        CHECK(local.n_cores == cases[i].cores);
        CHECK(local.n_pus == cases[i].pus);
        CHECK(local.n_gpus == 0);
        CHECK(local.n_nics == 0);
        if (local.n_pus != cases[i].pus)
            fprintf(stderr, "'%s': %d packages %d numa %d cores %d pus\n",
                    cases[i].description, local.n_packages, local.n_numa,
                    local.n_cores, local.n_pus);
    }
}

static void test_invalid_sources(void)
{
    swy_topo_local_t local;
    char bad_xml[] = "/tmp/swy-topo-bad-XXXXXX";
    const char *junk = "<topology><this is not hwloc\n";
    int fd;

    memset(&local, 0x5a, sizeof(local));
    CHECK(swy_topo_discover_from(NULL, "pack:2 bogus:3", &local) ==
          SWY_ERR_INVALID_ARG);
    CHECK(strstr(swy_err_last(), "bogus:3") != NULL);
    CHECK(local.n_pus == 0x5a5a5a5a); /* untouched on failure */

    CHECK(swy_topo_discover_from("/nonexistent/swy-topo.xml", NULL,
                                 &local) == SWY_ERR_INVALID_ARG);
    CHECK(strstr(swy_err_last(), "/nonexistent/swy-topo.xml") != NULL);

    fd = mkstemp(bad_xml);
    CHECK(fd >= 0);
    CHECK(write(fd, junk, strlen(junk)) == (ssize_t)strlen(junk));
    close(fd);
    CHECK(swy_topo_discover_from(bad_xml, NULL, &local) ==
          SWY_ERR_INVALID_ARG);
    CHECK(strstr(swy_err_last(), bad_xml) != NULL);
    unlink(bad_xml);

    /* hwloc would read these without end; they are refused by name. */
    CHECK(swy_topo_discover_from("/dev/zero", NULL, &local) ==
          SWY_ERR_INVALID_ARG);
    CHECK(strstr(swy_err_last(), "'/dev/zero' is a character device") !=
          NULL);
    CHECK(swy_topo_discover_from("/tmp", NULL, &local) ==
          SWY_ERR_INVALID_ARG);
    CHECK(strstr(swy_err_last(), "is a directory") != NULL);

    CHECK(swy_topo_discover_from(fixture_xml, "pack:1 pu:1", &local) ==
          SWY_ERR_INVALID_ARG);
}

/* swy_topo_discover reads SWY_TOPO_XML, then SWY_TOPO_SYNTHETIC. */
static void test_environment(void)
{
    swy_topo_local_t local;

    setenv("SWY_TOPO_SYNTHETIC", "pack:3 core:1 pu:1", 1);
    swy_config_reload();
    CHECK(swy_topo_discover(&local) == SWY_OK);
    CHECK(strcmp(local.source, "synthetic") == 0);
    CHECK(local.n_packages == 3 && local.n_pus == 3);

    setenv("SWY_TOPO_XML", fixture_xml, 1);
    swy_config_reload();
    CHECK(swy_topo_discover(&local) == SWY_OK);
    CHECK(strcmp(local.source, "xml") == 0);
    CHECK(local.n_gpus == 8);

    setenv("SWY_TOPO_XML", "/nonexistent/env.xml", 1);
    swy_config_reload();
    CHECK(swy_topo_discover(&local) == SWY_ERR_INVALID_ARG);

    unsetenv("SWY_TOPO_XML");
    unsetenv("SWY_TOPO_SYNTHETIC");
    swy_config_reload();
}

static void test_real_host(void)
{
    swy_topo_local_t local;
    char text[4096];
    long online = sysconf(_SC_NPROCESSORS_ONLN);

    CHECK(swy_topo_discover(&local) == SWY_OK);
    CHECK(strcmp(local.source, "host") == 0);
    CHECK(local.n_pus >= 1);
    CHECK(local.n_cores >= 1 && local.n_cores <= local.n_pus);
    CHECK(local.n_numa >= 1);
    /* hwloc's PUs are the online CPUs. */
    CHECK(online < 1 || local.n_pus == online);
    CHECK(local.numa >= -1 && local.numa < local.n_numa);
    /* A single-NUMA host: any binding lies inside that node. */
    if (local.n_numa == 1)
        CHECK(local.numa == 0);
    expect_host_identity(&local);

    swy_topo_describe_local(&local, text, sizeof(text));
    CHECK(strstr(text, "source: host") != NULL);
    CHECK(strstr(text, local.hostname) != NULL);
}

int main(void)
{
    const char *fixtures = getenv("SWYTEST_FIXTURES");

    if (fixtures == NULL) {
        fprintf(stderr, "SWYTEST_FIXTURES is not set\n");
        return 1;
    }
    snprintf(fixture_xml, sizeof(fixture_xml),
             "%s/topologies/dgx-like-8gpu-2nic.xml", fixtures);
    unsetenv("SWY_TOPO_XML");
    unsetenv("SWY_TOPO_SYNTHETIC");
    swy_config_reload();

    test_fixture();
    test_synthetic();
    test_invalid_sources();
    test_environment();
    test_real_host();
    if (check_failures != 0)
        fprintf(stderr, "%d failure(s)\n", check_failures);
    return check_failures != 0;
}
