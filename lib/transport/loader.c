/* Plugin loader: finds swy-transport-<name>.so along the search path and
 * validates its ABI before anyone calls into it (the pattern of NCCL's
 * plugin loaders: newest versioned symbol first). */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "transport/transport.h"
#include "util/abi.h"
#include "util/alloc.h"
#include "util/config.h"
#include "util/log.h"
#include "util/status.h"

/* ABI versions this host understands, newest first. A v2 plugin that also
 * exports v1 keeps working with an older host. */
static const struct {
    uint32_t abi_version;
    const char *symbol;
} known_versions[] = {
    {SWY_TRANSPORT_ABI_V1, SWY_TRANSPORT_PLUGIN_SYMBOL_V1},
};

int swy_plugin_table(void *dl_handle, const char *path, const char *symbol,
                     uint32_t abi_version, void *table, size_t table_size,
                     size_t first_size, char *why, size_t why_len)
{
    /* Every plugin table starts with these two. */
    const struct {
        uint32_t abi_version, struct_size;
    } *head;
    dlerror();
    head = dlsym(dl_handle, symbol);
    if (head == NULL)
        return 0;
    if (head->abi_version != abi_version) {
        snprintf(why, why_len, "plugin %s: wrong ABI version %u of %s "
                 "(expected %u)", path, head->abi_version, symbol,
                 abi_version);
        return -1;
    }
    if (swy_struct_import(table, table_size, head, head->struct_size,
                          first_size) != 0) {
        snprintf(why, why_len, "plugin %s: struct size %u of %s is below "
                 "the %zu bytes of its first release", path,
                 head->struct_size, symbol, first_size);
        return -1;
    }
    return 1;
}

/* Optional entries: without event_fd/arm the host polls; without
 * describe_peer it prints the transport's name. */
static const char *loader_missing_function(const swy_transport_v1_t *ops)
{
    if (ops->name == NULL)
        return "name";
    if (ops->init == NULL)
        return "init";
    if (ops->query == NULL)
        return "query";
    if (ops->get_address == NULL)
        return "get_address";
    if (ops->connect == NULL)
        return "connect";
    if (ops->isend == NULL)
        return "isend";
    if (ops->irecv == NULL)
        return "irecv";
    if (ops->cancel == NULL)
        return "cancel";
    if (ops->progress == NULL)
        return "progress";
    if (ops->finalize == NULL)
        return "finalize";
    return NULL;
}

swy_status_t swy_transport_plugin_open(const char *path,
                                       swy_transport_v1_t *table,
                                       const swy_transport_v1_t **ops_p,
                                       void **dl_handle_p, char *why,
                                       size_t why_len)
{
    if (access(path, F_OK) != 0) {
        snprintf(why, why_len, "plugin %s: not found (%s)", path,
                 strerror(errno));
        return SWY_ERR_UNSUPPORTED;
    }
    dlerror();
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        const char *err = dlerror();
        snprintf(why, why_len, "plugin %s: cannot load: %s", path,
                 err != NULL ? err : "unknown dlopen error");
        return SWY_ERR_INVALID_ARG;
    }

    size_t v;
    int found = 0;
    for (v = 0; v < SWY_ARRAY_SIZE(known_versions) && found == 0; v++)
        found = swy_plugin_table(handle, path, known_versions[v].symbol,
                                 known_versions[v].abi_version, table,
                                 sizeof(*table), SWY_TRANSPORT_V1_SIZE_V1,
                                 why, why_len);
    if (found < 0)
        goto err_close;
    if (found == 0) {
        /* Name every symbol looked for, newest first. */
        size_t out = (size_t)snprintf(why, why_len, "plugin %s: no symbol",
                                      path);
        for (v = 0; v < SWY_ARRAY_SIZE(known_versions) && out < why_len; v++)
            out += (size_t)snprintf(why + out, why_len - out, "%s %s",
                                    v == 0 ? "" : " or",
                                    known_versions[v].symbol);
        goto err_close;
    }
    const char *missing = loader_missing_function(table);
    if (missing != NULL) {
        snprintf(why, why_len, "plugin %s: %s is NULL in %s", path, missing,
                 known_versions[v - 1].symbol);
        goto err_close;
    }
    /* Its variables are known before its init() reads them (and typos
     * under its prefix warn, whether it has variables or not). */
    if (swy_config_register(table->name, table->config, table->config_count,
                            table->config_var_size) != SWY_OK) {
        snprintf(why, why_len, "plugin %s: %s", path, swy_err_last());
        goto err_close;
    }
    *ops_p = table;
    *dl_handle_p = handle;
    return SWY_OK;

err_close:
    dlclose(handle);
    return SWY_ERR_INVALID_ARG;
}

/* "<dir of libswitchyard>/switchyard", or "" when unknown (e.g. linked
 * statically into a test: then it is the executable's directory). */
static void loader_lib_dir(char *dir, size_t len)
{
    Dl_info info;
    dir[0] = '\0';
    if (dladdr((void *)(uintptr_t)&swy_plugin_find, &info) == 0 ||
        info.dli_fname == NULL)
        return;
    const char *slash = strrchr(info.dli_fname, '/');
    if (slash == NULL)
        return;
    snprintf(dir, len, "%.*s/switchyard", (int)(slash - info.dli_fname),
             info.dli_fname);
}

swy_status_t swy_plugin_find(const char *kind, const char *name, char *path,
                             size_t path_len, char *why, size_t why_len)
{
    const char *user_path = swy_config_get("SWY_PLUGIN_PATH");
    char lib_dir[1024];
    loader_lib_dir(lib_dir, sizeof(lib_dir));
    /* One colon list, in search order; empty entries are skipped. No
     * directory is compiled in: an installed library finds its plugins
     * beside itself wherever the tree was moved, and programs in the build
     * tree get SWY_PLUGIN_PATH (meson test, meson devenv). */
    char search[8192];
    int n_search = snprintf(search, sizeof(search), "%s:%s",
                            user_path != NULL ? user_path : "", lib_dir);
    if (n_search < 0 || (size_t)n_search >= sizeof(search)) {
        snprintf(why, why_len, "SWY_PLUGIN_PATH is longer than %zu "
                 "characters", sizeof(search) - sizeof(lib_dir) - 2);
        return SWY_ERR_INVALID_ARG;
    }

    char tried[4096] = "";
    size_t tried_len = 0;
    const char *seen[64];
    size_t n_seen = 0;
    for (char *save = NULL, *dir = strtok_r(search, ":", &save); dir != NULL;
         dir = strtok_r(NULL, ":", &save)) {
        /* SWY_PLUGIN_PATH may name the library's own directory too. */
        int repeated = 0;
        for (size_t i = 0; i < n_seen; i++)
            if (strcmp(seen[i], dir) == 0)
                repeated = 1;
        if (repeated)
            continue;
        if (n_seen < SWY_ARRAY_SIZE(seen))
            seen[n_seen++] = dir;
        char candidate[4096];
        int n = snprintf(candidate, sizeof(candidate),
                         "%s/swy-%s-%s.so", dir, kind, name);
        if (n < 0 || (size_t)n >= sizeof(candidate))
            continue;
        if (access(candidate, F_OK) == 0) {
            if ((size_t)n >= path_len) {
                snprintf(why, why_len, "plugin path %s is longer than %zu",
                         candidate, path_len - 1);
                return SWY_ERR_INVALID_ARG;
            }
            memcpy(path, candidate, (size_t)n + 1);
            return SWY_OK;
        }
        if (tried_len < sizeof(tried))
            tried_len += (size_t)snprintf(tried + tried_len,
                                          sizeof(tried) - tried_len, "%s%s",
                                          tried_len > 0 ? ", " : "", dir);
    }
    snprintf(why, why_len, "plugin swy-%s-%s.so not found in: %s", kind,
             name, tried_len > 0 ? tried : "(no directories)");
    return SWY_ERR_UNSUPPORTED;
}

void swy_transport_plugins_config(void)
{
    const char *list = swy_config_get_text("SWY_TRANSPORT_PLUGINS");
    char names[1024];
    snprintf(names, sizeof(names), "%s", list != NULL ? list : "");
    for (char *save = NULL, *name = strtok_r(names, ", ^", &save);
         name != NULL; name = strtok_r(NULL, ", ^", &save)) {
        char path[4096], why[2048];
        swy_transport_v1_t table;
        const swy_transport_v1_t *ops;
        void *handle;
        if (strcmp(name, "self") == 0)
            continue;
        if (swy_transport_plugin_find(name, path, sizeof(path), why,
                                      sizeof(why)) != SWY_OK) {
            /* Its SWY_<NAME>_* names are no one's: they warn. */
            swy_config_register(name, NULL, 0, 0);
            continue;
        }
        if (swy_transport_plugin_open(path, &table, &ops, &handle, why,
                                      sizeof(why)) != SWY_OK)
            continue;
        dlclose(handle);
    }
}

swy_status_t swy_transport_plugin_find(const char *name, char *path,
                                       size_t path_len, char *why,
                                       size_t why_len)
{
    return swy_plugin_find("transport", name, path, path_len, why, why_len);
}

swy_status_t swy_send_hints_plugin_symbol(void *dl_handle, const char *path,
                                          swy_send_hints_v1_t *table,
                                          const swy_send_hints_v1_t **hints_p,
                                          char *why, size_t why_len)
{
    *hints_p = NULL;
    int found = swy_plugin_table(dl_handle, path,
                                 SWY_SEND_HINTS_PLUGIN_SYMBOL_V1,
                                 SWY_SEND_HINTS_ABI_V1, table, sizeof(*table),
                                 SWY_SEND_HINTS_V1_SIZE_V1, why, why_len);
    if (found <= 0)
        return found == 0 ? SWY_OK : SWY_ERR_INVALID_ARG;
    if (table->isend_hinted == NULL) {
        snprintf(why, why_len, "plugin %s: isend_hinted is NULL in %s", path,
                 SWY_SEND_HINTS_PLUGIN_SYMBOL_V1);
        return SWY_ERR_INVALID_ARG;
    }
    *hints_p = table;
    return SWY_OK;
}
