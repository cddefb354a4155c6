#include "testutil.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Every test process gets an Open MPI session directory base of its own.
 * Open MPI 4 keeps the session directories of all jobs of a user under one
 * $TMPDIR/ompi.<host>.<uid>, and a job that ends removes that directory when
 * it is empty: another mpirun starting at that moment sees its mkdir fail
 * ("A call to mkdir was unable to create the desired directory ... File
 * exists", open-mpi/ompi#8510) and the test fails for nothing. Tests start
 * mpirun from several processes at once (Criterion's jobs, ctest -j), so each
 * process (Criterion execs a fresh one per test, running this again) points
 * OMPI_MCA_orte_tmpdir_base at /tmp/trident-ompi-<pid>, which only its own
 * jobs use. Open MPI creates it when a job starts (a process that starts none
 * leaves nothing behind); the process removes it at exit. A value set by the
 * user, not by a parent test process, is kept. */
static char tt_ompi_base[64];
static pid_t tt_ompi_owner;

static void tt_ompi_base_remove(void) {
    if (tt_ompi_owner == getpid() && access(tt_ompi_base, F_OK) == 0) tt_rmrf(tt_ompi_base);
}

__attribute__((constructor)) static void tt_ompi_base_set(void) {
    const char *cur = getenv("OMPI_MCA_orte_tmpdir_base"), *ours = getenv("TT_OMPI_BASE");
    if (cur && (!ours || strcmp(cur, ours) != 0)) return;
    tt_ompi_owner = getpid();
    snprintf(tt_ompi_base, sizeof tt_ompi_base, "/tmp/trident-ompi-%ld", (long)tt_ompi_owner);
    setenv("OMPI_MCA_orte_tmpdir_base", tt_ompi_base, 1);
    setenv("TT_OMPI_BASE", tt_ompi_base, 1);
    atexit(tt_ompi_base_remove);
}

void tt_limit_as(rlim_t bytes) {
#ifndef TT_ASAN
    struct rlimit as = {bytes, bytes};
    setrlimit(RLIMIT_AS, &as);
#else
    (void)bytes;
#endif
}

char *tt_mkdtemp(void) {
    char *t = strdup("/tmp/trident-test-XXXXXX");
    if (!mkdtemp(t)) {
        perror("mkdtemp");
        abort();
    }
    return t;
}

void tt_rmrf(const char *path) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", path);
}

int tt_run(const char *cmd, char **out) {
    char full[16384];
    snprintf(full, sizeof full, "( %s ) 2>&1", cmd);
    FILE *p = popen(full, "r");
    if (!p) return -1;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += got;
        if (cap - len < 2048) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
    }
    buf[len] = 0;
    int st = pclose(p);
    if (out)
        *out = buf;
    else
        free(buf);
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return -1;
}

const char *tt_bin(const char *name) {
    static __thread char buf[8][1024];
    static __thread int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", TRI_BINARY_DIR, name);
    return buf[k];
}

void tt_write_llmc(const char *path, const uint16_t *tok, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        abort();
    }
    int32_t h[256] = {0};
    h[0] = 20240520;
    h[1] = 1;
    h[2] = (int32_t)n;
    if (fwrite(h, sizeof h, 1, f) != 1 || fwrite(tok, sizeof *tok, n, f) != n) {
        perror(path);
        abort();
    }
    fclose(f);
}

void tt_write_llmc_random(const char *path, size_t n, int vocab, uint64_t seed) {
    uint16_t *t = malloc(n * sizeof *t);
    uint64_t s = seed * 2654435761ULL + 1;
    /* a stream with structure (repeated short patterns) so a model can learn it */
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        uint64_t r = s >> 33;
        t[i] = (uint16_t)((r % 4 == 0) ? (r >> 8) % (uint64_t)vocab : (i * 7 + (i / 5)) % (uint64_t)vocab);
    }
    tt_write_llmc(path, t, n);
    free(t);
}

char *tt_read(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    size_t got = fread(b, 1, (size_t)n, f);
    b[got] = 0;
    fclose(f);
    return b;
}

void tt_expect_same_file(const char *dir_a, const char *dir_b, const char *name) {
    char pa[4400], pb[4400];
    snprintf(pa, sizeof pa, "%s/%s", dir_a, name);
    snprintf(pb, sizeof pb, "%s/%s", dir_b, name);
    FILE *fa = fopen(pa, "rb"), *fb = fopen(pb, "rb");
    if (!fa || !fb) {
        if (fa) fclose(fa);
        if (fb) fclose(fb);
        cr_assert_fail("%s or %s cannot be read", pa, pb);
    }
    struct stat sa, sb;
    int stat_ok = fstat(fileno(fa), &sa) == 0 && fstat(fileno(fb), &sb) == 0;
    long off = 0;
    int ca, cb;
    while ((ca = fgetc(fa)) == (cb = fgetc(fb)) && ca != EOF) off++;
    fclose(fa);
    fclose(fb);
    cr_assert(stat_ok, "%s, %s: fstat failed", pa, pb);
    cr_expect(ca == cb, "%s (%lld bytes) and %s (%lld bytes) differ at byte %ld", pa, (long long)sa.st_size, pb,
              (long long)sb.st_size, off);
}

int tt_has_entry(const char *dir, const char *prefix, char *found, size_t n) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int hit = 0;
    struct dirent *e;
    while (!hit && (e = readdir(d)) != NULL)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
            hit = 1;
            if (found) snprintf(found, n, "%s", e->d_name);
        }
    closedir(d);
    return hit;
}

int tt_losses(const char *metrics_path, double **out) {
    char *text = tt_read(metrics_path);
    *out = NULL;
    if (!text) return 0;
    int n = 0, cap = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *p = strstr(line, "\"loss\":");
        if (!p) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            *out = realloc(*out, (size_t)cap * sizeof **out);
        }
        (*out)[n++] = strtod(p + 7, NULL);
    }
    free(text);
    return n;
}

void tt_capture_begin(tt_capture *c, const char *path) {
    snprintf(c->path, sizeof c->path, "%s", path);
    fflush(stderr);
    c->saved = dup(2);
    int fd = open(c->path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (c->saved < 0 || fd < 0 || dup2(fd, 2) != 2) {
        perror(c->path);
        abort();
    }
    close(fd);
}

char *tt_capture_end(tt_capture *c) {
    fflush(stderr);
    if (dup2(c->saved, 2) != 2) abort();
    close(c->saved);
    char *text = tt_read(c->path);
    if (!text) abort();
    unlink(c->path);
    return text;
}

/* The capture in progress (tests only: one thread, one at a time). */
static struct {
    tt_capture cap;
    char *dir, *buf;
    size_t n;
} err_cap;

void tt_err_capture(char *buf, size_t n) {
    if (err_cap.dir != NULL) {
        char *text = tt_capture_end(&err_cap.cap);
        const char *msg = strncmp(text, "trident: ", 9) == 0 ? text + 9 : text;
        size_t len = strcspn(msg, "\n");
        snprintf(err_cap.buf, err_cap.n, "%.*s", (int)len, msg);
        free(text);
        tt_rmrf(err_cap.dir);
        free(err_cap.dir);
        err_cap.dir = NULL;
    }
    if (buf == NULL || n == 0) return;
    buf[0] = '\0';
    err_cap.buf = buf;
    err_cap.n = n;
    err_cap.dir = tt_mkdtemp();
    char path[sizeof err_cap.cap.path - 16];
    snprintf(path, sizeof path, "%s/stderr", err_cap.dir);
    tt_capture_begin(&err_cap.cap, path);
}
