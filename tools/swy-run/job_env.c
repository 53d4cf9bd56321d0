/* Job-wide variables; see job_env.h. */
#include "job_env.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

bool swy_run_job_key_generate(char key_p[SWY_RUN_JOB_KEY_HEX_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    uint8_t           bytes[SWY_RUN_JOB_KEY_HEX_LEN / 2];
    size_t            filled = 0;

    while (filled < sizeof(bytes)) {
        ssize_t got = getrandom(bytes + filled, sizeof(bytes) - filled, 0);

        if (got < 0) {
            if (errno == EINTR) {
                continue;
            }
            fprintf(stderr, "swy-run: getrandom: %s\n", strerror(errno));
            return false;
        }
        filled += (size_t)got;
    }
    for (size_t i = 0; i < sizeof(bytes); ++i) {
        key_p[2 * i]     = hex[bytes[i] >> 4];
        key_p[2 * i + 1] = hex[bytes[i] & 0xf];
    }
    key_p[SWY_RUN_JOB_KEY_HEX_LEN] = '\0';
    return true;
}

bool swy_run_free_port_find(const char *ip, int *port_p)
{
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
    socklen_t          addr_len = sizeof(addr);
    int                fd;

    if (inet_pton(AF_INET, ip, &addr.sin_addr) != 1) {
        fprintf(stderr, "swy-run: '%s' is not an IPv4 address\n", ip);
        return false;
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fprintf(stderr, "swy-run: socket: %s\n", strerror(errno));
        return false;
    }
    if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 ||
        getsockname(fd, (struct sockaddr *)&addr, &addr_len) != 0) {
        fprintf(stderr, "swy-run: cannot find a free port on %s: %s\n", ip,
                strerror(errno));
        close(fd);
        return false;
    }
    close(fd);
    *port_p = ntohs(addr.sin_port);
    return true;
}

static bool env_set(const char *name, const char *value)
{
    if (setenv(name, value, 1) != 0) {
        fprintf(stderr, "swy-run: setenv %s: %s\n", name, strerror(errno));
        return false;
    }
    return true;
}

bool swy_run_job_env_set(int world_size, int local_world_size,
                         const char *root_ip)
{
    char text[SWY_RUN_JOB_KEY_HEX_LEN + 1];
    int  port;

    snprintf(text, sizeof(text), "%d", world_size);
    if (!env_set("SWY_WORLD_SIZE", text)) {
        return false;
    }
    snprintf(text, sizeof(text), "%d", local_world_size);
    if (!env_set("SWY_LOCAL_WORLD_SIZE", text)) {
        return false;
    }

    /* An explicit root (e.g. a port opened in a firewall) wins. */
    if (getenv("SWY_ROOT") == NULL || getenv("SWY_ROOT")[0] == '\0') {
        char root[64];

        if (!swy_run_free_port_find(root_ip, &port)) {
            return false;
        }
        snprintf(root, sizeof(root), "%s:%d", root_ip, port);
        if (!env_set("SWY_ROOT", root)) {
            return false;
        }
    }

    if (getenv("SWY_JOB_KEY") == NULL || getenv("SWY_JOB_KEY")[0] == '\0') {
        if (!swy_run_job_key_generate(text) ||
            !env_set("SWY_JOB_KEY", text)) {
            return false;
        }
    }
    return true;
}
