#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"

int tri_open_regular_why(const char *path, size_t *size, char *why, size_t n) {
    /* O_NONBLOCK: opening a FIFO with no writer would otherwise block forever */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        snprintf(why, n, "cannot open: %s", strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        snprintf(why, n, "cannot stat: %s", strerror(e));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        snprintf(why, n, "not a regular file (%s)",
                 S_ISDIR(st.st_mode)    ? "a directory"
                 : S_ISFIFO(st.st_mode) ? "a named pipe"
                                        : "a device or socket");
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    if (size) *size = (size_t)st.st_size;
    return fd;
}

int tri_open_regular(const char *path, const char *what, size_t *size) {
    char why[256];
    int fd = tri_open_regular_why(path, size, why, sizeof why);
    if (fd < 0) return tri_error("%s %s: %s", what, path, why);
    return fd;
}

char *tri_slurp(const char *path, const char *what, size_t max_bytes, size_t *len) {
    size_t size = 0;
    int fd = tri_open_regular(path, what, &size);
    if (fd < 0) return NULL;
    if (max_bytes && size > max_bytes) {
        close(fd);
        tri_error("%s %s: %zu bytes, more than the %zu this file may have", what, path, size, max_bytes);
        return NULL;
    }
    char *buf = malloc(size + 1);
    if (!buf) {
        close(fd);
        tri_error("%s %s: out of memory reading %zu bytes", what, path, size);
        return NULL;
    }
    size_t n = 0;
    while (n < size) {
        ssize_t r = read(fd, buf + n, size - n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : 0;
            close(fd);
            free(buf);
            tri_error("%s %s: %s", what, path, e ? strerror(e) : "file shrank while being read");
            return NULL;
        }
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

int tri_write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}
