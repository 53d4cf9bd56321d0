/* Bounded reading of user-named text files (see file.h). */
#include "util/file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/alloc.h"
#include "util/status.h"

static const char *file_kind(mode_t mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISSOCK(mode))
        return "a socket";
    return "not a regular file";
}

swy_status_t swy_file_read_text(const char *path, const char *what,
                                const char *subsys, size_t max_bytes,
                                char **text_p, size_t *len_p)
{
    if (path == NULL || text_p == NULL)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                           "swy_file_read_text: %s is NULL",
                           path == NULL ? "path" : "text_p");
    /* O_NONBLOCK: opening a FIFO with no writer must not block; the
     * type is checked on the open descriptor, so nothing can swap the
     * file between the check and the read. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                           "cannot open %s '%s': %s", what, path,
                           strerror(errno));
    swy_status_t status;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        status = swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                             "cannot stat %s '%s': %s", what, path,
                             strerror(errno));
        goto err_close;
    }
    if (!S_ISREG(st.st_mode)) {
        status = swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                             "%s '%s' is %s; only regular files are read",
                             what, path, file_kind(st.st_mode));
        goto err_close;
    }
    if ((unsigned long long)st.st_size > max_bytes) {
        status = swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                             "%s '%s' has %lld bytes, over the %zu-byte "
                             "limit",
                             what, path, (long long)st.st_size, max_bytes);
        goto err_close;
    }
    /* Sized by fstat, grown up to one byte past the limit: /proc files
     * say 0 bytes, and a file that grows past the limit is refused. */
    size_t cap = (size_t)st.st_size + 1;
    char *text = swy_malloc(cap + 1);
    if (text == NULL) {
        status = swy_err_set(SWY_ERR_NO_MEMORY, subsys,
                             "out of memory reading %s '%s'", what, path);
        goto err_close;
    }
    size_t len = 0;
    while (len <= max_bytes) {
        if (len == cap) {
            size_t grown_cap = cap * 2 > max_bytes + 1 ? max_bytes + 1
                                                       : cap * 2;
            char *grown = swy_realloc_array(text, grown_cap + 1, 1);
            if (grown == NULL) {
                status = swy_err_set(SWY_ERR_NO_MEMORY, subsys,
                                     "out of memory reading %s '%s'", what,
                                     path);
                goto err_free;
            }
            text = grown;
            cap = grown_cap;
        }
        ssize_t got = read(fd, text + len, cap - len);
        if (got == 0)
            break;
        if (got < 0) {
            if (errno == EINTR)
                continue;
            status = swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                                 "error reading %s '%s': %s", what, path,
                                 strerror(errno));
            goto err_free;
        }
        len += (size_t)got;
    }
    if (len > max_bytes) {
        status = swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                             "%s '%s' is over the %zu-byte limit",
                             what, path, max_bytes);
        goto err_free;
    }
    if (memchr(text, '\0', len) != NULL) {
        status = swy_err_set(SWY_ERR_INVALID_ARG, subsys,
                             "%s '%s' holds a NUL byte: not a text file",
                             what, path);
        goto err_free;
    }
    text[len] = '\0';
    close(fd);
    *text_p = text;
    if (len_p != NULL)
        *len_p = len;
    return SWY_OK;

err_free:
    swy_free(text);
err_close:
    close(fd);
    return status;
}

char *swy_file_next_line(char **cursor_p)
{
    char *line = *cursor_p;
    if (line == NULL || *line == '\0')
        return NULL;
    char *end = strchr(line, '\n');
    if (end != NULL) {
        *cursor_p = end + 1;
        *end = '\0';
    } else {
        *cursor_p = line + strlen(line);
        end = *cursor_p;
    }
    if (end > line && end[-1] == '\r')
        end[-1] = '\0';
    return line;
}
