/* The checkpoint store (see ckpt_store.h). */
#include "model/ckpt/store.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/crc32c.h"
#include "base/err.h"
#include "base/fs.h"
#include "base/log.h"

#define STEP_PREFIX        "step_"
#define TMP_PREFIX         ".tmp-"
#define TRASH_PREFIX       ".trash-"
#define REPLACED_PREFIX    "replaced-"
#define MANIFEST_FORMAT    "trident-checkpoint"
#define MANIFEST_VERSION   1
#define MANIFEST_MAX_BYTES ((size_t)16 << 20)
#define READ_CHUNK         ((size_t)1 << 20)
#define NFTW_FDS           16
#define MAX_JSON_INT       9007199254740992.0 /* 2^53: every integer below is exact in a double */

/* ---------------------------------------------------------------- helpers */

/* out = a + "/" + b; -1 (with a message) if it does not fit. */
static int join(char *out, size_t n, const char *a, const char *b) {
    int k = snprintf(out, n, "%s/%s", a, b);
    if (k < 0 || (size_t)k >= n) return tri_error("%s/%s: path too long", a, b);
    return 0;
}

/* snprintf into a message buffer; a message too long for it is cut short. */
__attribute__((format(printf, 3, 4))) static void say(char *buf, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

/* Copies path without trailing slashes ("/" stays "/"). */
static int strip_slashes(char *out, size_t n, const char *path) {
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--;
    if (len == 0 || len >= n) return tri_error("\"%s\": %s", path, len ? "path too long" : "empty path");
    memcpy(out, path, len);
    out[len] = '\0';
    return 0;
}

/* The step of a name "step_<digits>", or -1. */
static long parse_step(const char *name) {
    size_t p = strlen(STEP_PREFIX);
    if (strncmp(name, STEP_PREFIX, p) != 0 || name[p] == '\0') return -1;
    long v = 0;
    for (const char *c = name + p; *c; c++) {
        if (*c < '0' || *c > '9' || v > (LONG_MAX - 9) / 10) return -1;
        v = v * 10 + (*c - '0');
    }
    return v;
}

/* The writer's pid of "<prefix><anything>-<pid>" (a temp or trash dir), or -1. */
static long parse_owner_pid(const char *name, const char *prefix) {
    size_t p = strlen(prefix);
    if (strncmp(name, prefix, p) != 0) return -1;
    const char *dash = strrchr(name + p, '-');
    if (!dash || dash[1] == '\0' || dash[1] == '0') return -1;
    long v = 0;
    for (const char *c = dash + 1; *c; c++) {
        if (*c < '0' || *c > '9' || v > (LONG_MAX - 9) / 10) return -1;
        v = v * 10 + (*c - '0');
    }
    return v;
}

/* Whether process pid exists on this host (EPERM: it does, owned by another user). */
static int pid_alive(long pid) {
    if (pid <= 0 || pid > INT_MAX) return 0;
    return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

static int rm_cb(const char *fpath, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb;
    (void)ftw;
    int rc = (type == FTW_DP || type == FTW_D) ? rmdir(fpath) : unlink(fpath);
    if (rc != 0) return tri_error("%s: cannot remove: %s", fpath, strerror(errno));
    return 0;
}

/* rm -rf path (symbolic links are removed, never followed); a missing path is fine. */
static int rm_rf(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : tri_error("%s: %s", path, strerror(errno));
    if (nftw(path, rm_cb, NFTW_FDS, FTW_DEPTH | FTW_PHYS) != 0)
        return tri_error("%s: could not remove it completely", path);
    return 0;
}

/* Renames root/name to root/.trash-name-pid, fsyncs root, then deletes it. */
static int trash(const char *root, const char *name) {
    char from[PATH_MAX], to[PATH_MAX], tname[NAME_MAX + 64];
    snprintf(tname, sizeof tname, TRASH_PREFIX "%s-%ld", name, (long)getpid());
    if (join(from, sizeof from, root, name) != 0 || join(to, sizeof to, root, tname) != 0) return -1;
    if (rm_rf(to) != 0) return -1;
    if (rename(from, to) != 0) return tri_error("%s: cannot move it to %s: %s", from, to, strerror(errno));
    if (tri_fsync_path(root, 1) != 0) return -1;
    return rm_rf(to);
}

/* open() of a regular file for reading that never blocks (a FIFO or a device
 * is refused, like src/base/file.h's tri_open_regular, but quietly: the
 * reason goes to why[n] so that the caller can say it in one line). */
static int open_quiet(const char *path, size_t *size, char *why, size_t n) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        snprintf(why, n, "%s: %s", path, errno == ENOENT ? "missing" : strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(why, n, "%s: not a regular file", path);
        close(fd);
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    *size = (size_t)st.st_size;
    return fd;
}

/* The whole small file at path, NUL-terminated (malloc'd), quietly. */
static char *slurp_quiet(const char *path, size_t max, char *why, size_t n) {
    size_t size;
    int fd = open_quiet(path, &size, why, n);
    if (fd < 0) return NULL;
    char *buf = size <= max ? malloc(size + 1) : NULL;
    size_t got = 0;
    while (buf && got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            snprintf(why, n, "%s: %s", path, r < 0 ? strerror(errno) : "shrank while being read");
            free(buf);
            close(fd);
            return NULL;
        }
        got += (size_t)r;
    }
    close(fd);
    if (!buf) {
        snprintf(why, n, "%s: %zu bytes, more than %zu", path, size, max);
        return NULL;
    }
    buf[got] = '\0';
    return buf;
}

/* CRC-32C and length of everything readable from fd (buf: READ_CHUNK bytes). */
static int crc_fd(int fd, char *buf, uint32_t *crc, uint64_t *len, const char *path, char *why, size_t n) {
    uint32_t c = 0;
    uint64_t total = 0;
    for (;;) {
        ssize_t r = read(fd, buf, READ_CHUNK);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            snprintf(why, n, "%s: read: %s", path, strerror(errno));
            return -1;
        }
        if (r == 0) break;
        c = tri_crc32c(c, buf, (size_t)r);
        total += (uint64_t)r;
    }
    *crc = c;
    *len = total;
    return 0;
}

/* ------------------------------------------------------------- manifests */

typedef struct man_file {
    char *name; /* relative to the step dir, owned */
    uint64_t size;
    uint32_t crc;
} man_file;

typedef struct manifest {
    long step;
    char run[17];
    man_file *files;
    size_t n, cap;
} manifest;

static void manifest_free(manifest *m) {
    for (size_t i = 0; i < m->n; i++) free(m->files[i].name);
    free(m->files);
    memset(m, 0, sizeof *m);
}

static int manifest_add(manifest *m, const char *name, uint64_t size, uint32_t crc) {
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 16;
        man_file *f = realloc(m->files, cap * sizeof *f);
        if (!f) return -1;
        m->files = f;
        m->cap = cap;
    }
    char *s = strdup(name);
    if (!s) return -1;
    m->files[m->n++] = (man_file){s, size, crc};
    return 0;
}

/* A listed name must stay inside the step dir: relative, no "." or ".."
 * components, no empty ones, not the manifest itself. */
static int name_ok(const char *name) {
    if (!name[0] || name[0] == '/' || strlen(name) >= PATH_MAX / 2 || !strcmp(name, TRI_CKPT_MANIFEST)) return 0;
    for (const char *c = name; *c;) {
        const char *e = strchr(c, '/');
        size_t len = e ? (size_t)(e - c) : strlen(c);
        if (len == 0 || (len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.')) return 0;
        c += len + (e ? 1 : 0);
        if (e && !*c) return 0; /* trailing slash */
    }
    return 1;
}

static int is_hex_run(const char *s) {
    if (strlen(s) != 16) return 0;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f'))) return 0;
    return 1;
}

/* A non-negative integer below 2^53 from a JSON number. */
static int json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || v->valuedouble >= MAX_JSON_INT ||
        v->valuedouble != (double)(uint64_t)v->valuedouble)
        return 0;
    *out = (uint64_t)v->valuedouble;
    return 1;
}

/* Reads and checks the structure of dir/manifest.json. Returns 0; 1 if there
 * is none; -1 with the reason in why. */
static int manifest_read(const char *dir, manifest *m, char *why, size_t n) {
    memset(m, 0, sizeof *m);
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, TRI_CKPT_MANIFEST) >= (int)sizeof path) {
        snprintf(why, n, "%s: path too long", dir);
        return -1;
    }
    struct stat st;
    if (lstat(path, &st) != 0 && errno == ENOENT) return 1;
    char *text = slurp_quiet(path, MANIFEST_MAX_BYTES, why, n);
    if (!text) return -1;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const char *bad = NULL;
    char badbuf[256];
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(root, "step");
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(root, "run");
    const cJSON *sum = cJSON_GetObjectItemCaseSensitive(root, "checksum");
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files");
    uint64_t u;
    if (!root)
        bad = "not valid JSON (truncated?)";
    else if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, MANIFEST_FORMAT) != 0)
        bad = "\"format\" is not \"" MANIFEST_FORMAT "\"";
    else if (!json_uint(ver, &u) || u != MANIFEST_VERSION)
        bad = "\"version\" is not 1";
    else if (!json_uint(step, &u) || u > (uint64_t)LONG_MAX)
        bad = "\"step\" is not a non-negative integer";
    else if (!cJSON_IsString(run) || !is_hex_run(run->valuestring))
        bad = "\"run\" is not 16 hex digits";
    else if (!cJSON_IsString(sum) || strcmp(sum->valuestring, "crc32c") != 0)
        bad = "\"checksum\" is not \"crc32c\"";
    else if (!cJSON_IsArray(files))
        bad = "no \"files\" array";
    if (!bad) {
        m->step = (long)u;
        snprintf(m->run, sizeof m->run, "%s", run->valuestring);
        int i = 0;
        const cJSON *f;
        cJSON_ArrayForEach(f, files) {
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(f, "name");
            const cJSON *fs = cJSON_GetObjectItemCaseSensitive(f, "size");
            const cJSON *fc = cJSON_GetObjectItemCaseSensitive(f, "crc32c");
            uint64_t size;
            char *end = NULL;
            unsigned long crc = 0;
            if (cJSON_IsString(fc) && strlen(fc->valuestring) == 8) crc = strtoul(fc->valuestring, &end, 16);
            if (!cJSON_IsString(fn) || !name_ok(fn->valuestring)) {
                snprintf(badbuf, sizeof badbuf, "files[%d]: \"name\" missing or not a relative path inside the dir", i);
                bad = badbuf;
            } else if (!json_uint(fs, &size)) {
                snprintf(badbuf, sizeof badbuf, "files[%d] (%.100s): \"size\" is not a non-negative integer", i,
                         fn->valuestring);
                bad = badbuf;
            } else if (!end || *end) {
                snprintf(badbuf, sizeof badbuf, "files[%d] (%.100s): \"crc32c\" is not 8 hex digits", i,
                         fn->valuestring);
                bad = badbuf;
            } else if (manifest_add(m, fn->valuestring, size, (uint32_t)crc) != 0) {
                bad = "out of memory";
            }
            if (bad) break;
            i++;
        }
    }
    cJSON_Delete(root);
    if (bad) {
        snprintf(why, n, "%s: %s", path, bad);
        manifest_free(m);
        return -1;
    }
    return 0;
}

int tri_ckpt_verify(const char *dir, char *why, size_t n) {
    manifest m;
    int rc = manifest_read(dir, &m, why, n);
    if (rc != 0) return rc;
    long dstep = tri_ckpt_step_of(dir);
    if (dstep >= 0 && dstep != m.step) {
        snprintf(why, n, "%s/%s: says step %ld, but the directory is step %ld", dir, TRI_CKPT_MANIFEST, m.step, dstep);
        manifest_free(&m);
        return -1;
    }
    char *buf = malloc(READ_CHUNK);
    rc = buf ? 0 : -1;
    if (!buf) snprintf(why, n, "%s: out of memory", dir);
    for (size_t i = 0; i < m.n && rc == 0; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, m.files[i].name);
        size_t size;
        int fd = open_quiet(path, &size, why, n);
        if (fd < 0) {
            rc = -1;
            break;
        }
        uint32_t crc;
        uint64_t len;
        if ((uint64_t)size != m.files[i].size) {
            snprintf(why, n, "%s: %zu bytes, but the manifest says %" PRIu64 " (truncated or rewritten)", path, size,
                     m.files[i].size);
            rc = -1;
        } else if (crc_fd(fd, buf, &crc, &len, path, why, n) != 0) {
            rc = -1;
        } else if (len != m.files[i].size) {
            snprintf(why, n, "%s: changed while being read", path);
            rc = -1;
        } else if (crc != m.files[i].crc) {
            snprintf(why, n, "%s: CRC-32C %08" PRIx32 ", but the manifest says %08" PRIx32 " (the data is damaged)",
                     path, crc, m.files[i].crc);
            rc = -1;
        }
        close(fd); /* read-only */
    }
    free(buf);
    manifest_free(&m);
    return rc;
}

/* ------------------------------------------------------------ listing */

typedef struct step_dir {
    long step;
    int has_manifest, has_state;
    char name[NAME_MAX + 1];
} step_dir;

typedef struct step_list {
    step_dir *v;
    size_t n, cap;
} step_list;

static int cmp_step_desc(const void *a, const void *b) {
    long x = ((const step_dir *)a)->step, y = ((const step_dir *)b)->step;
    return x < y ? 1 : x > y ? -1 : 0;
}

static int exists_in(const char *dir, const char *name) {
    char p[PATH_MAX];
    struct stat st;
    return snprintf(p, sizeof p, "%s/%s", dir, name) < (int)sizeof p && lstat(p, &st) == 0;
}

/* The step_<N> directories of root (real directories, never symbolic links),
 * newest first. A missing root lists nothing. */
static int list_steps(const char *root, step_list *L) {
    memset(L, 0, sizeof *L);
    DIR *d = opendir(root);
    if (!d) {
        if (errno == ENOENT) return 0;
        return tri_error("%s: cannot list: %s", root, strerror(errno));
    }
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        long s = parse_step(de->d_name);
        char path[PATH_MAX];
        struct stat st;
        if (s < 0 || snprintf(path, sizeof path, "%s/%s", root, de->d_name) >= (int)sizeof path ||
            lstat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            continue;
        if (L->n == L->cap) {
            size_t cap = L->cap ? 2 * L->cap : 16;
            step_dir *v = realloc(L->v, cap * sizeof *v);
            if (!v) {
                rc = tri_error("%s: out of memory while listing", root);
                break;
            }
            L->v = v;
            L->cap = cap;
        }
        step_dir *e = &L->v[L->n++];
        e->step = s;
        snprintf(e->name, sizeof e->name, "%s", de->d_name);
        e->has_manifest = exists_in(path, TRI_CKPT_MANIFEST);
        e->has_state = exists_in(path, "state.json");
    }
    closedir(d);
    if (rc == 0 && L->n > 1) /* an empty list has no array: qsort(NULL, ...) is undefined */
        qsort(L->v, L->n, sizeof *L->v, cmp_step_desc);
    return rc;
}

/* The step root/latest names, or -1 (missing, not a regular file, malformed:
 * it is only a hint). */
static long read_latest(const char *root) {
    char path[PATH_MAX], why[PATH_MAX + 64];
    if (snprintf(path, sizeof path, "%s/latest", root) >= (int)sizeof path) return -1;
    char *txt = slurp_quiet(path, 256, why, sizeof why);
    if (!txt) return -1;
    size_t len = strlen(txt);
    while (len > 0 && (txt[len - 1] == '\n' || txt[len - 1] == '\r' || txt[len - 1] == ' ')) txt[--len] = '\0';
    long s = parse_step(txt);
    free(txt);
    return s;
}

long tri_ckpt_count(const char *root, char *newest, size_t n) {
    char r[PATH_MAX];
    step_list L;
    if (strip_slashes(r, sizeof r, root) != 0 || list_steps(r, &L) != 0) return -1;
    long count = 0;
    for (size_t i = 0; i < L.n; i++) {
        if (!L.v[i].has_manifest && !L.v[i].has_state) continue;
        if (count++ == 0 && newest) snprintf(newest, n, "%s/%s", r, L.v[i].name);
    }
    free(L.v);
    return count;
}

/* ------------------------------------------------------------- finding */

int tri_ckpt_find(const char *root, tri_ckpt_found *f) {
    memset(f, 0, sizeof *f);
    f->step = -1;
    char r[PATH_MAX], path[PATH_MAX], why[2 * PATH_MAX], first_why[2 * PATH_MAX];
    step_list L;
    if (strip_slashes(r, sizeof r, root) != 0 || list_steps(r, &L) != 0) return -1;
    long hint = read_latest(r);
    const step_dir *named = NULL, *newest = NULL, *legacy = NULL;
    for (size_t i = 0; i < L.n; i++) {
        if (L.v[i].step == hint && !named) named = &L.v[i];
        if (L.v[i].has_manifest && !newest) newest = &L.v[i];
        if (!L.v[i].has_manifest && L.v[i].has_state && !legacy) legacy = &L.v[i];
    }
    int rc = 0;
    if (named && !named->has_manifest && (!newest || named->step > newest->step)) {
        /* from before manifests: latest promised it was complete */
        if (join(f->dir, sizeof f->dir, r, named->name) != 0) rc = -1;
        f->step = named->step;
        say(f->note, sizeof f->note,
            "%s has no %s (saved by a trident from before manifests); resuming from it as %s/latest "
            "names it, without checksums to verify",
            f->dir, TRI_CKPT_MANIFEST, r);
    } else if (newest) {
        const step_dir *bad = NULL;
        for (size_t i = 0; i < L.n && rc == 0; i++) {
            if (!L.v[i].has_manifest) continue;
            if (join(path, sizeof path, r, L.v[i].name) != 0) {
                rc = -1;
                break;
            }
            if (tri_ckpt_verify(path, why, sizeof why) == 0) {
                if (bad)
                    rc = tri_error("checkpoint %s/%s does not verify: %s. The previous complete checkpoint %s "
                                   "(step %ld) does: move the damaged one aside (mv %s/%s %s/damaged-%s) and run "
                                   "again with --resume to continue from step %ld",
                                   r, bad->name, first_why, path, L.v[i].step, r, bad->name, r, bad->name, L.v[i].step);
                else {
                    memcpy(f->dir, path, sizeof f->dir);
                    f->step = L.v[i].step;
                    f->verified = 1;
                }
                break;
            }
            if (!bad) {
                bad = &L.v[i];
                memcpy(first_why, why, sizeof first_why);
            }
        }
        if (bad && !f->dir[0] && rc == 0)
            rc = tri_error("checkpoint %s/%s does not verify: %s; no earlier complete checkpoint in %s verifies "
                           "either",
                           r, bad->name, first_why, r);
        if (rc == 0 && hint != f->step) {
            if (hint < 0)
                say(f->note, sizeof f->note,
                    "%s/latest is missing or unreadable; %s is the newest "
                    "complete checkpoint",
                    r, f->dir);
            else
                say(f->note, sizeof f->note,
                    "%s/latest names step_%08ld%s, but %s is the newest "
                    "complete checkpoint",
                    r, hint, named ? "" : " (not there)", f->dir);
        }
    } else if (legacy) {
        rc = tri_error("%s holds %s, saved without a %s (by a trident from before manifests), and %s/latest does "
                       "not name it: to resume from it, name it there (echo %s > %s/latest) and run again",
                       r, legacy->name, TRI_CKPT_MANIFEST, r, legacy->name, r);
    } else if (hint >= 0) {
        say(f->note, sizeof f->note, "%s/latest names step_%08ld, which is not there", r, hint);
    }
    free(L.v);
    if (rc != 0) {
        memset(f, 0, sizeof *f);
        f->step = -1;
    }
    return rc;
}

int tri_ckpt_resolve(const char *path_or_root, char *out, size_t n) {
    char p[PATH_MAX], why[2 * PATH_MAX];
    if (strip_slashes(p, sizeof p, path_or_root) != 0) return -1;
    struct stat st;
    if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) return tri_error("%s: no such checkpoint directory", p);
    const char *dir = p;
    tri_ckpt_found f;
    if (tri_ckpt_step_of(p) < 0 && (exists_in(p, "latest") || tri_ckpt_count(p, NULL, 0) > 0)) {
        if (tri_ckpt_find(p, &f) != 0) return -1;
        if (!f.dir[0])
            return tri_error("no checkpoint in %s (no step_<N> directory with a %s there)", p, TRI_CKPT_MANIFEST);
        dir = f.dir;
    } else if (tri_ckpt_step_of(p) < 0 && !exists_in(p, "config.json")) {
        return tri_error("no checkpoint in %s (no step_<N> directory, and it is neither a step_<N> directory nor "
                         "one with a config.json)",
                         p);
    } else if (tri_ckpt_verify(p, why, sizeof why) < 0) {
        return tri_error("checkpoint %s does not verify: %s", p, why);
    }
    int k = snprintf(out, n, "%s", dir);
    if (k < 0 || (size_t)k >= n) return tri_error("%s: path too long", dir);
    return 0;
}

/* -------------------------------------------------------- the writer */

int tri_ckpt_step_name(long step, char *name, size_t n) {
    if (step < 0) return tri_error("checkpoint step %ld is negative", step);
    int k = snprintf(name, n, STEP_PREFIX "%08ld", step);
    return (k < 0 || (size_t)k >= n) ? -1 : 0;
}

long tri_ckpt_step_of(const char *dir) {
    char buf[PATH_MAX];
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    if (len == 0 || len >= sizeof buf) return -1;
    memcpy(buf, dir, len);
    buf[len] = '\0';
    const char *base = strrchr(buf, '/');
    return parse_step(base ? base + 1 : buf);
}

static void new_run_id(char run[17]) {
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = ((uint64_t)ts.tv_sec * 1000000007ULL) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 40);
    }
    snprintf(run, 17, "%016" PRIx64, v);
}

/* Removes the temp and trash dirs no live writer owns (see
 * tri_ckpt_store_open, step 3); says so for temp dirs when `tell`. */
static int clean_stale(const tri_ckpt_store *s, int tell) {
    DIR *d = opendir(s->root);
    if (!d) return tri_error("%s: cannot list: %s", s->root, strerror(errno));
    char(*names)[NAME_MAX + 1] = NULL;
    size_t nn = 0, cap = 0;
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        long pid = parse_owner_pid(de->d_name, TMP_PREFIX);
        if (pid < 0) pid = parse_owner_pid(de->d_name, TRASH_PREFIX);
        if (pid < 0 || (!s->locked && pid_alive(pid))) continue;
        if (nn == cap) {
            cap = cap ? 2 * cap : 8;
            void *t = realloc(names, cap * sizeof *names);
            if (!t) {
                rc = tri_error("%s: out of memory while listing", s->root);
                break;
            }
            names = t;
        }
        snprintf(names[nn++], sizeof names[0], "%s", de->d_name);
    }
    closedir(d); /* act after listing: removing while listing is unspecified */
    for (size_t i = 0; i < nn; i++) {
        char path[PATH_MAX];
        struct stat st;
        if (join(path, sizeof path, s->root, names[i]) != 0 || lstat(path, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        if (rm_rf(path) != 0) {
            rc = -1;
            continue;
        }
        if (tell && strncmp(names[i], TMP_PREFIX, strlen(TMP_PREFIX)) == 0) {
            long pid = parse_owner_pid(names[i], TMP_PREFIX);
            tri_log_note("removed %s, the temporary directory of a save that did not finish (its writer, pid %ld, %s)",
                         path, pid, pid_alive(pid) ? "holds no lock on the store" : "is gone");
        }
    }
    if (tell) fflush(stdout);
    free(names);
    return rc;
}

int tri_ckpt_store_open(tri_ckpt_store *s, const char *root, const char *key) {
    memset(s, 0, sizeof *s);
    s->lock_fd = -1;
    if (!root[0]) return tri_error("%s is empty: give the directory for checkpoints", key);
    if (tri_mkdir_p_named(key, root) != 0 || strip_slashes(s->root, sizeof s->root, root) != 0) return -1;
    char lp[PATH_MAX];
    if (join(lp, sizeof lp, s->root, TRI_CKPT_LOCK) != 0) return -1;
    int fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd < 0) return tri_error("%s %s: cannot write in it (%s: %s)", key, s->root, lp, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return tri_error("%s %s: %s is not a regular file (it must be the store's lock file)", key, s->root, lp);
    }
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
        s->locked = 1;
    } else if (errno == EWOULDBLOCK) {
        char who[256];
        ssize_t k = pread(fd, who, sizeof who - 1, 0);
        close(fd);
        who[k > 0 ? k : 0] = '\0';
        for (char *c = who; *c; c++)
            if (*c == '\n' || *c == '\r')
                *c = '\0';
            else if ((unsigned char)*c < 32 || (unsigned char)*c > 126)
                *c = '?';
        return tri_error("%s %s is in use by another trainer (%s, per %s): two writers would overwrite each "
                         "other's checkpoints; wait for it to end, or choose another %s",
                         key, s->root, who[0] ? who : "holder unknown", lp, key);
    } else if (errno == ENOLCK || errno == EOPNOTSUPP || errno == ENOSYS || errno == EINVAL) {
        tri_log_note("%s %s: the file system does not support locks (%s): a second trainer on it would not be refused",
                     key, s->root, strerror(errno));
        fflush(stdout);
    } else {
        int e = errno;
        close(fd);
        return tri_error("%s %s: cannot lock %s: %s", key, s->root, lp, strerror(e));
    }
    char host[256] = "?", when[64] = "?", text[512];
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    int len = snprintf(text, sizeof text, "pid %ld on host %s since %s\n", (long)getpid(), host, when);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)len, 0) != len) {
        int e = errno;
        close(fd);
        return tri_error("%s %s: cannot write in it (%s: %s)", key, s->root, lp, strerror(e));
    }
    s->lock_fd = fd;
    s->is_open = 1;
    new_run_id(s->run);
    if (clean_stale(s, 1) != 0) {
        tri_ckpt_store_close(s);
        return -1;
    }
    return 0;
}

void tri_ckpt_store_close(tri_ckpt_store *s) {
    if (!s || !s->is_open) return;
    if (s->locked) {
        /* blank the holder first: a reader never names a process that let go */
        if (ftruncate(s->lock_fd, 0) != 0) {
            /* harmless: the text only names a holder while the lock is held */
        }
        flock(s->lock_fd, LOCK_UN);
    }
    close(s->lock_fd);
    s->is_open = 0;
    s->locked = 0;
    s->lock_fd = -1;
}

int tri_ckpt_store_adopt(tri_ckpt_store *s, const char *dir) {
    TRI_CHECK(s->is_open);
    manifest m;
    char why[2 * PATH_MAX];
    int rc = manifest_read(dir, &m, why, sizeof why);
    if (rc < 0) return tri_error("%s", why);
    if (rc == 0) snprintf(s->run, sizeof s->run, "%s", m.run);
    manifest_free(&m);
    return 0;
}

int tri_ckpt_begin(tri_ckpt_store *s, long step, char *tmp, size_t n) {
    TRI_CHECK(s->is_open);
    char name[64], tname[128];
    if (tri_ckpt_step_name(step, name, sizeof name) != 0) return -1;
    snprintf(tname, sizeof tname, TMP_PREFIX "%s-%ld", name, (long)getpid());
    if (join(tmp, n, s->root, tname) != 0 || rm_rf(tmp) != 0) return -1;
    if (mkdir(tmp, 0755) != 0) return tri_error("%s: cannot create directory: %s", tmp, strerror(errno));
    return 0;
}

void tri_ckpt_abort(tri_ckpt_store *s, const char *tmp) {
    if (!tmp || !tmp[0]) return;
    if (rm_rf(tmp) != 0)
        tri_error("%s: the temporary directory of the failed save could not be removed; the next run removes it", tmp);
}

static int cmp_file_name(const void *a, const void *b) {
    return strcmp(((const man_file *)a)->name, ((const man_file *)b)->name);
}

/* Adds every regular file under base/rel to m (checksummed and fsynced), and
 * fsyncs every directory after its contents. */
static int collect(const char *base, const char *rel, manifest *m, char *buf) {
    char dir[PATH_MAX], why[2 * PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s%s%s", base, rel[0] ? "/" : "", rel) >= (int)sizeof dir)
        return tri_error("%s/%s: path too long", base, rel);
    DIR *d = opendir(dir);
    if (!d) return tri_error("%s: cannot list: %s", dir, strerror(errno));
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && rc == 0) {
        const char *nm = de->d_name;
        if (!strcmp(nm, ".") || !strcmp(nm, "..") || (!rel[0] && !strcmp(nm, TRI_CKPT_MANIFEST))) continue;
        char sub[PATH_MAX], path[PATH_MAX];
        if (snprintf(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", nm) >= (int)sizeof sub ||
            snprintf(path, sizeof path, "%s/%s", base, sub) >= (int)sizeof path) {
            rc = tri_error("%s/%s: path too long", dir, nm);
            break;
        }
        struct stat st;
        if (lstat(path, &st) != 0) {
            rc = tri_error("%s: %s", path, strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            rc = collect(base, sub, m, buf);
        } else if (!S_ISREG(st.st_mode)) {
            rc = tri_error("%s: not a regular file or a directory; a checkpoint holds only those", path);
        } else {
            int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
            uint32_t crc;
            uint64_t len;
            if (fd < 0) {
                rc = tri_error("%s: cannot open: %s", path, strerror(errno));
            } else {
                if (crc_fd(fd, buf, &crc, &len, path, why, sizeof why) != 0)
                    rc = tri_error("%s", why);
                else if (fsync(fd) != 0)
                    rc = tri_error("%s: fsync: %s", path, strerror(errno));
                else if (manifest_add(m, sub, len, crc) != 0)
                    rc = tri_error("%s: out of memory", path);
                close(fd); /* read-only */
            }
        }
    }
    closedir(d);
    if (rc == 0) rc = tri_fsync_path(dir, 1);
    return rc;
}

/* Checksums and fsyncs tmp's files and writes tmp/manifest.json (fsynced). */
static int write_manifest(const tri_ckpt_store *s, long step, const char *tmp) {
    manifest m;
    memset(&m, 0, sizeof m);
    char *buf = malloc(READ_CHUNK);
    if (!buf) return tri_error("%s: out of memory", tmp);
    int rc = collect(tmp, "", &m, buf);
    free(buf);
    char *text = NULL;
    if (rc == 0) {
        qsort(m.files, m.n, sizeof *m.files, cmp_file_name);
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "format", MANIFEST_FORMAT);
        cJSON_AddNumberToObject(root, "version", MANIFEST_VERSION);
        cJSON_AddNumberToObject(root, "step", (double)step);
        cJSON_AddStringToObject(root, "run", s->run);
        cJSON_AddStringToObject(root, "checksum", "crc32c");
        cJSON *files = cJSON_AddArrayToObject(root, "files");
        for (size_t i = 0; i < m.n && files; i++) {
            cJSON *f = cJSON_CreateObject();
            char crc[9];
            snprintf(crc, sizeof crc, "%08" PRIx32, m.files[i].crc);
            cJSON_AddStringToObject(f, "name", m.files[i].name);
            cJSON_AddNumberToObject(f, "size", (double)m.files[i].size);
            cJSON_AddStringToObject(f, "crc32c", crc);
            cJSON_AddItemToArray(files, f);
        }
        text = files ? cJSON_Print(root) : NULL;
        cJSON_Delete(root);
        if (!text) rc = tri_error("%s: out of memory writing the manifest", tmp);
    }
    manifest_free(&m);
    if (rc == 0) {
        char path[PATH_MAX];
        rc = join(path, sizeof path, tmp, TRI_CKPT_MANIFEST);
        if (rc == 0) rc = tri_write_file_atomic(path, text, strlen(text)); /* fsyncs it and tmp */
    }
    free(text);
    return rc;
}

/* Whether the step dir at path is of this store's run. */
static int is_ours(const tri_ckpt_store *s, const char *path) {
    manifest m;
    char why[2 * PATH_MAX];
    if (manifest_read(path, &m, why, sizeof why) != 0) return 0;
    int ours = strcmp(m.run, s->run) == 0;
    manifest_free(&m);
    return ours;
}

/* Pruning after a commit of `step` (see ckpt_store.h, step 4). */
static int prune(const tri_ckpt_store *s, long step, int keep) {
    step_list L;
    if (list_steps(s->root, &L) != 0) return -1;
    int rc = 0;
    long newest_complete = -1;
    for (size_t i = 0; i < L.n && newest_complete < 0; i++)
        if (L.v[i].has_manifest) newest_complete = L.v[i].step;
    int kept = 0;
    for (size_t i = 0; i < L.n && keep > 0; i++) { /* newest first */
        char path[PATH_MAX];
        if (!L.v[i].has_manifest || join(path, sizeof path, s->root, L.v[i].name) != 0 || !is_ours(s, path)) continue;
        if (++kept <= keep || L.v[i].step == step || L.v[i].step == newest_complete) continue;
        if (trash(s->root, L.v[i].name) != 0) rc = -1;
    }
    free(L.v);
    if (clean_stale(s, 0) != 0) rc = -1;
    return rc;
}

int tri_ckpt_commit(tri_ckpt_store *s, long step, const char *tmp, int keep) {
    TRI_CHECK(s->is_open);
    char name[64], final[PATH_MAX], latest[PATH_MAX], line[80];
    if (tri_ckpt_step_name(step, name, sizeof name) != 0) return -1;
    if (join(final, sizeof final, s->root, name) != 0 || join(latest, sizeof latest, s->root, "latest") != 0) return -1;
    struct stat st;
    if (lstat(tmp, &st) != 0 || !S_ISDIR(st.st_mode))
        return tri_error("%s: not a directory (tri_ckpt_begin not called?)", tmp);
    if (write_manifest(s, step, tmp) != 0) return -1;

    /* Into place. */
    char aside[PATH_MAX] = "", kept[PATH_MAX] = "";
    if (lstat(final, &st) != 0) {
        if (errno != ENOENT) return tri_error("%s: %s", final, strerror(errno));
        if (rename(tmp, final) != 0) return tri_error("cannot rename %s to %s: %s", tmp, final, strerror(errno));
    } else if (!S_ISDIR(st.st_mode)) {
        return tri_error("%s: exists and is not a directory", final);
    } else if (!is_ours(s, final)) {
        /* another run's (or a pre-manifest) checkpoint of this step: never deleted */
        char kname[128];
        snprintf(kname, sizeof kname, REPLACED_PREFIX "%s-%lld", name, (long long)time(NULL));
        if (join(kept, sizeof kept, s->root, kname) != 0) return -1;
        if (rename(final, kept) != 0) return tri_error("cannot move %s aside to %s: %s", final, kept, strerror(errno));
        if (rename(tmp, final) != 0) {
            int e = errno;
            if (rename(kept, final) != 0)
                tri_error("%s: could not put it back from %s: %s", final, kept, strerror(errno));
            return tri_error("cannot rename %s to %s: %s", tmp, final, strerror(e));
        }
    } else if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
        snprintf(aside, sizeof aside, "%s", tmp); /* now holds the old checkpoint */
    } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
        /* No atomic exchange here: move the old one aside, then rename. */
        char tname[128];
        snprintf(tname, sizeof tname, TRASH_PREFIX "%s-%ld", name, (long)getpid());
        if (join(aside, sizeof aside, s->root, tname) != 0 || rm_rf(aside) != 0) return -1;
        if (rename(final, aside) != 0)
            return tri_error("cannot move %s aside to %s: %s", final, aside, strerror(errno));
        if (rename(tmp, final) != 0) {
            int e = errno;
            if (rename(aside, final) != 0)
                tri_error("%s: could not restore it from %s: %s", final, aside, strerror(errno));
            return tri_error("cannot rename %s to %s: %s", tmp, final, strerror(e));
        }
    } else {
        return tri_error("cannot exchange %s with %s: %s", tmp, final, strerror(errno));
    }

    /* Committed: the step dir is complete whatever happens next, so the rest
     * only warns (latest is a hint; pruning is housekeeping). */
    int rc = 0;
    if (kept[0]) tri_log_note("%s existed, saved by another run; it is kept as %s", final, kept);
    if (tri_fsync_path(s->root, 1) != 0) rc = 1;
    int k = snprintf(line, sizeof line, "%s\n", name);
    if (tri_write_file_atomic(latest, line, (size_t)k) != 0) rc = 1;
    if (aside[0] && rm_rf(aside) != 0) rc = 1;
    if (prune(s, step, keep) != 0) rc = 1;
    return rc;
}

long long tri_ckpt_bytes(const char *dir) {
    manifest m;
    char why[2 * PATH_MAX], path[PATH_MAX];
    if (manifest_read(dir, &m, why, sizeof why) != 0) return -1;
    long long total = 0;
    for (size_t i = 0; i < m.n; i++) total += (long long)m.files[i].size;
    manifest_free(&m);
    struct stat st;
    if (join(path, sizeof path, dir, TRI_CKPT_MANIFEST) == 0 && stat(path, &st) == 0) total += (long long)st.st_size;
    return total;
}
