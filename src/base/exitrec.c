/* A process's record of its own end (base/exitrec.h). */
#include "base/exitrec.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int tri_exit_record_to(const char *path, int code, const char *reason) {
    char line[sizeof(((tri_exit_rec *)0)->reason) + 64];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int at = snprintf(line, sizeof line, "%.6f %d ", (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec, code);
    size_t n = (size_t)at, cap = n + sizeof(((tri_exit_rec *)0)->reason) - 1;
    for (const char *c = reason ? reason : ""; *c && n < cap; c++) line[n++] = *c == '\n' || *c == '\r' ? ' ' : *c;
    line[n++] = '\n';

    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    for (size_t done = 0; done < n;) {
        ssize_t w = write(fd, line + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            unlink(tmp);
            errno = e;
            return -1;
        }
        done += (size_t)w;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return -1;
    }
    return 0;
}

int tri_exit_record(int code, const char *reason) {
    const char *path = getenv(TRI_EXIT_RECORD_ENV);
    if (path == NULL || path[0] == '\0') return 1;
    int rc = tri_exit_record_to(path, code, reason);
    const char *kill_after = getenv(TRI_EXIT_RECORD_DEBUG_ENV);
    if (rc == 0 && kill_after != NULL && kill_after[0] == '1') {
        pid_t parent = getppid();
        if (parent > 1) (void)kill(parent, SIGKILL);
        (void)raise(SIGKILL);
    }
    return rc;
}

int tri_exit_record_read(const char *path, tri_exit_rec *r) {
    memset(r, 0, sizeof *r);
    r->code = -1;
    FILE *f = fopen(path, "r");
    if (f == NULL) return -1;
    char line[sizeof r->reason + 64];
    int ok = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    int used = 0;
    if (!ok || sscanf(line, "%lf %d %n", &r->t, &r->code, &used) != 2 || used == 0) {
        r->t = 0;
        r->code = -1;
        return -1;
    }
    size_t l = strcspn(line + used, "\n");
    if (l >= sizeof r->reason) l = sizeof r->reason - 1;
    memcpy(r->reason, line + used, l);
    r->reason[l] = '\0';
    return 0;
}
