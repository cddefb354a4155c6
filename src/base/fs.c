#include "base/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"

int tri_fsync_path(const char *path, int dir) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | (dir ? O_DIRECTORY : 0));
    if (fd < 0) return tri_error("%s: cannot open for fsync: %s", path, strerror(errno));
    int rc = 0;
    if (fsync(fd) != 0) rc = tri_error("%s: fsync: %s", path, strerror(errno));
    if (close(fd) != 0 && rc == 0) rc = tri_error("%s: close: %s", path, strerror(errno));
    return rc;
}

/* "trident: [what ]path: msg" */
static int fail(const char *what, const char *path, const char *msg) {
    if (what) return tri_error("%s %s: %s", what, path, msg);
    return tri_error("%s: %s", path, msg);
}

int tri_mkdir_p_named(const char *what, const char *path) {
    char buf[PATH_MAX], msg[PATH_MAX + 128];
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--;
    if (len == 0) return what ? tri_error("%s is empty: give a directory", what) : tri_error("empty directory path");
    if (len >= sizeof buf) return fail(what, path, "path too long");
    memcpy(buf, path, len);
    buf[len] = '\0';
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        struct stat st;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
            int e = errno;
            if (e == ENOTDIR || stat(buf, &st) == 0) {
                /* name the component in the way: the longest prefix that is not a directory */
                char up[PATH_MAX];
                snprintf(up, sizeof up, "%s", buf);
                for (char *s = strrchr(up, '/'); s && s > up; s = strrchr(up, '/')) {
                    *s = '\0';
                    if (stat(up, &st) == 0) {
                        if (!S_ISDIR(st.st_mode)) {
                            snprintf(msg, sizeof msg, "%s is a file, not a directory", up);
                            return fail(what, path, msg);
                        }
                        break;
                    }
                }
            }
            snprintf(msg, sizeof msg, "cannot create directory %s: %s", buf, strerror(e));
            return fail(what, path, msg);
        }
        *p = c;
        if (c == '\0') break;
    }
    struct stat st;
    if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode)) return fail(what, path, "exists and is not a directory");
    return 0;
}

int tri_mkdir_p(const char *path) { return tri_mkdir_p_named(NULL, path); }

/* The directory part of path ("." if none). */
static void parent_of(char *out, size_t n, const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(out, n, ".");
    } else if (slash == path) {
        snprintf(out, n, "/");
    } else {
        size_t len = (size_t)(slash - path);
        if (len >= n) len = n - 1;
        memcpy(out, path, len);
        out[len] = '\0';
    }
}

int tri_write_file_atomic(const char *path, const void *data, size_t len) {
    char tmp[PATH_MAX], dir[PATH_MAX];
    int k = snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (k < 0 || (size_t)k >= sizeof tmp) return tri_error("%s: path too long", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return tri_error("%s: cannot create: %s", tmp, strerror(errno));
    const char *p = data;
    size_t left = len;
    int rc = 0;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            rc = tri_error("%s: write of %zu bytes: %s", tmp, left, w < 0 ? strerror(errno) : "no progress");
            break;
        }
        p += w;
        left -= (size_t)w;
    }
    if (rc == 0 && fsync(fd) != 0) rc = tri_error("%s: fsync: %s", tmp, strerror(errno));
    if (close(fd) != 0 && rc == 0) rc = tri_error("%s: close: %s", tmp, strerror(errno));
    if (rc != 0) {
        unlink(tmp); /* best effort: the old file is intact */
        return -1;
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return tri_error("%s: cannot rename %s over it: %s", path, tmp, strerror(e));
    }
    parent_of(dir, sizeof dir, path);
    return tri_fsync_path(dir, 1);
}
