#include "tests/fuzz/fuzz_util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

static char g_dir[4096];

void tri_fuzz_report(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(msg, sizeof msg - 1, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k > sizeof msg - 2) k = (int)sizeof msg - 2;
    msg[k++] = '\n';
    ssize_t w = write(2, msg, (size_t)k); /* fd 2 itself, not the silenced stream */
    (void)w;
}

void tri_fuzz_quiet(void) {
    static int done;
    if (done) return;
    done = 1;
    const char *v = getenv("TRIDENT_FUZZ_VERBOSE");
    if (v && *v && strcmp(v, "0") != 0) return;
    /* Only the stream variable is replaced (glibc's stderr is assignable):
     * the parsers' fprintf(stderr, ...) and tri_error() go to /dev/null, while
     * libFuzzer (which took its own copy of the stream at start-up) and the
     * sanitizers (which write to fd 2) still print their reports. */
    FILE *null = fopen("/dev/null", "w");
    if (!null) {
        perror("tri_fuzz_quiet: /dev/null");
        abort();
    }
    fflush(stderr);
    stderr = null;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void remove_dir(void) {
    if (g_dir[0]) nftw(g_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *tri_fuzz_dir(void) {
    if (g_dir[0]) return g_dir;
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/tri-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) {
        tri_fuzz_report("tri_fuzz_dir: mkdtemp %s: %s", g_dir, strerror(errno));
        abort();
    }
    atexit(remove_dir);
    return g_dir;
}

const char *tri_fuzz_write(int slot, const char *name, const void *data, size_t n) {
    static char paths[4][4200];
    if (slot < 0 || slot > 3) abort();
    snprintf(paths[slot], sizeof paths[slot], "%s/%s", tri_fuzz_dir(), name);
    int fd = open(paths[slot], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const char *p = data;
    size_t done = 0;
    while (fd >= 0 && done < n) {
        ssize_t w = write(fd, p + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += (size_t)w;
    }
    if (fd < 0 || done < n || close(fd) != 0) {
        tri_fuzz_report("tri_fuzz_write: %s: %s", paths[slot], strerror(errno));
        abort();
    }
    return paths[slot];
}

char *tri_fuzz_cstr(const uint8_t *data, size_t n) {
    char *s = malloc(n + 1);
    if (!s) abort();
    if (n) memcpy(s, data, n);
    s[n] = '\0';
    return s;
}

size_t tri_fuzz_split(const uint8_t *data, size_t n, const uint8_t **b, size_t *b_len) {
    const uint8_t *nul = n ? memchr(data, 0, n) : NULL;
    if (!nul) {
        *b = data + n;
        *b_len = 0;
        return n;
    }
    *b = nul + 1;
    *b_len = n - (size_t)(nul - data) - 1;
    return (size_t)(nul - data);
}
