/* Finding the programs a tool runs; see tool_find.h. */
#include "tool_find.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* dir/name into buf, where it is an executable and fits; the folder
 * resolved (no "..", absolute), the name kept as it is (mpirun, not the
 * orterun it links to). */
static int executable_in(const char *dir, const char *name, char *buf,
                         size_t len)
{
    char resolved[PATH_MAX];
    int n;

    if (realpath(dir, resolved) == NULL)
        return 0;
    n = snprintf(buf, len, "%s/%s", resolved, name);
    return n > 0 && (size_t)n < len && access(buf, X_OK) == 0;
}

int swy_tool_find(const char *name, const char *build_dir, char *buf,
                  size_t len)
{
    char self[PATH_MAX], sibling[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    char *slash = NULL;

    if (n > 0) {
        self[n] = '\0';
        slash = strrchr(self, '/');
    }
    if (slash != NULL) {
        *slash = '\0';
        if (build_dir != NULL &&
            snprintf(sibling, sizeof(sibling), "%s/../%s", self,
                     build_dir) < (int)sizeof(sibling) &&
            executable_in(sibling, name, buf, len))
            return 1;
        if (executable_in(self, name, buf, len))
            return 1;
    }
    const char *path = getenv("PATH");
    while (path != NULL && *path != '\0') {
        size_t dir_len = strcspn(path, ":");
        char dir[PATH_MAX];

        if (dir_len > 0 && dir_len < sizeof(dir)) {
            memcpy(dir, path, dir_len);
            dir[dir_len] = '\0';
            if (executable_in(dir, name, buf, len))
                return 1;
        }
        path += dir_len;
        path += *path == ':';
    }
    return 0;
}
