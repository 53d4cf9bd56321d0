/* The 128-byte job id (root address + secret) and "host:port" parsing.
 *
 * Layout of swy_unique_id_t.bytes:
 *   [0..5)    magic "SWYID"
 *   [5]       version (1)
 *   [6..8)    port, big endian
 *   [8..72)   numeric host, NUL terminated and NUL padded
 *   [72..104) secret
 *   [104..128) zero */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "boot/boot.h"
#include "boot/wire.h"
#include "util/status.h"

#define ID_MAGIC "SWYID"
#define ID_MAGIC_LEN 5
#define ID_VERSION 1
#define ID_PORT_OFF 6
#define ID_HOST_OFF 8
#define ID_HOST_LEN 64
#define ID_SECRET_OFF (ID_HOST_OFF + ID_HOST_LEN)

_Static_assert(ID_SECRET_OFF + SWY_BOOT_SECRET_LEN <=
                   sizeof(((swy_unique_id_t *)0)->bytes),
               "the job id must fit in swy_unique_id_t");
_Static_assert(sizeof(((swy_boot_addr_t *)0)->host) == ID_HOST_LEN,
               "host field sizes must agree");

swy_status_t swy_boot_id_encode(const swy_boot_addr_t *addr,
                                swy_unique_id_t *id)
{
    if (addr == NULL || id == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                           "swy_boot_id_encode: %s is NULL",
                           addr == NULL ? "addr" : "id");
    size_t host_len = strnlen(addr->host, sizeof(addr->host));
    if (host_len == 0 || host_len == sizeof(addr->host))
        return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                           "swy_boot_id_encode: host is %s",
                           host_len == 0 ? "empty" : "not NUL terminated");
    if (addr->port == 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                           "swy_boot_id_encode: port is 0");

    unsigned char *b = id->bytes;
    memset(b, 0, sizeof(id->bytes));
    memcpy(b, ID_MAGIC, ID_MAGIC_LEN);
    b[ID_MAGIC_LEN] = ID_VERSION;
    b[ID_PORT_OFF] = (unsigned char)(addr->port >> 8);
    b[ID_PORT_OFF + 1] = (unsigned char)(addr->port & 0xff);
    memcpy(b + ID_HOST_OFF, addr->host, host_len);
    memcpy(b + ID_SECRET_OFF, addr->secret, SWY_BOOT_SECRET_LEN);
    return SWY_OK;
}

swy_status_t swy_boot_id_decode(const swy_unique_id_t *id,
                                swy_boot_addr_t *addr_p)
{
    if (id == NULL || addr_p == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                           "swy_boot_id_decode: %s is NULL",
                           id == NULL ? "id" : "addr_p");
    const unsigned char *b = id->bytes;
    if (memcmp(b, ID_MAGIC, ID_MAGIC_LEN) != 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                           "the unique id has a bad magic (%02x %02x %02x "
                           "%02x %02x, expected \"SWYID\"): not made by "
                           "swy_get_unique_id, or corrupted in transit",
                           b[0], b[1], b[2], b[3], b[4]);
    if (b[ID_MAGIC_LEN] != ID_VERSION)
        return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                           "the unique id has version %u, this library "
                           "reads version %u",
                           b[ID_MAGIC_LEN], ID_VERSION);

    swy_boot_addr_t addr;
    memset(&addr, 0, sizeof(addr));
    size_t host_len = strnlen((const char *)b + ID_HOST_OFF, ID_HOST_LEN);
    if (host_len == 0 || host_len == ID_HOST_LEN)
        return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                           "the unique id's root host is %s",
                           host_len == 0 ? "empty" : "not NUL terminated");
    memcpy(addr.host, b + ID_HOST_OFF, host_len);
    addr.port = (uint16_t)((b[ID_PORT_OFF] << 8) | b[ID_PORT_OFF + 1]);
    if (addr.port == 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                           "the unique id's root port is 0");
    memcpy(addr.secret, b + ID_SECRET_OFF, SWY_BOOT_SECRET_LEN);
    *addr_p = addr;
    return SWY_OK;
}

swy_status_t swy_boot_resolve_host(const char *name, char *numeric,
                                   size_t numeric_len)
{
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    struct addrinfo *found = NULL;
    int rc = getaddrinfo(name, NULL, &hints, &found);
    if (rc != 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                           "cannot resolve host \"%s\": %s", name,
                           gai_strerror(rc));
    /* Prefer IPv4: a name that resolves to both is usually reachable over
     * IPv4 in the clusters we run on, and the root binds IPv4 by default. */
    struct addrinfo *pick = found;
    for (struct addrinfo *ai = found; ai != NULL; ai = ai->ai_next) {
        if (ai->ai_family == AF_INET) {
            pick = ai;
            break;
        }
    }
    char text[NI_MAXHOST];
    rc = getnameinfo(pick->ai_addr, pick->ai_addrlen, text, sizeof(text),
                     NULL, 0, NI_NUMERICHOST);
    freeaddrinfo(found);
    if (rc != 0)
        return swy_err_set(SWY_ERR_SYSTEM, "boot",
                           "getnameinfo for host \"%s\" failed: %s", name,
                           gai_strerror(rc));
    if (strlen(text) >= numeric_len)
        return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                           "address %s of host \"%s\" does not fit %zu "
                           "bytes",
                           text, name, numeric_len);
    snprintf(numeric, numeric_len, "%s", text);
    return SWY_OK;
}

swy_status_t swy_boot_parse_hostport(const char *text, char *host,
                                     size_t host_len, uint16_t *port_p)
{
    if (text == NULL || host == NULL || port_p == NULL || host_len == 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                           "swy_boot_parse_hostport: NULL or empty argument");

    char name[256];
    const char *port_text;
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (close == NULL || close[1] != ':')
            return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                               "\"%s\": expected \"[v6-address]:port\"",
                               text);
        size_t len = (size_t)(close - text - 1);
        if (len == 0 || len >= sizeof(name))
            return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                               "\"%s\": bad bracketed host", text);
        memcpy(name, text + 1, len);
        name[len] = '\0';
        port_text = close + 2;
    } else {
        const char *colon = strrchr(text, ':');
        if (colon == NULL)
            return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                               "\"%s\": expected \"host:port\"", text);
        if (memchr(text, ':', (size_t)(colon - text)) != NULL)
            return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                               "\"%s\": an IPv6 address needs brackets, as "
                               "in \"[::1]:port\"",
                               text);
        size_t len = (size_t)(colon - text);
        if (len == 0 || len >= sizeof(name))
            return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                               "\"%s\": %s host", text,
                               len == 0 ? "empty" : "too long a");
        memcpy(name, text, len);
        name[len] = '\0';
        port_text = colon + 1;
    }

    char *end = NULL;
    long port = strtol(port_text, &end, 10);
    if (port_text[0] == '\0' || *end != '\0' || port < 1 || port > 65535)
        return swy_err_set(SWY_ERR_INVALID_ARG, "boot",
                           "\"%s\": port \"%s\" is not a number in "
                           "1..65535",
                           text, port_text);

    SWY_CHECK(swy_boot_resolve_host(name, host, host_len));
    *port_p = (uint16_t)port;
    return SWY_OK;
}
