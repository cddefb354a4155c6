/* The crash-safe checkpoint directory protocol (see ckpt_store.h). */
#include "model/ckpt_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/base/file.h"
#include "src/base/fs.h"

#define STEP_PREFIX "step_"
#define TMP_PREFIX ".tmp-"
#define TRASH_PREFIX ".trash-"
#define NFTW_FDS 16

/* ---------------------------------------------------------------- helpers */

/* out = a + "/" + b; -1 (with a message) if it does not fit. */
static int join(char *out, size_t n, const char *a, const char *b)
{
    int k = snprintf(out, n, "%s/%s", a, b);
    if (k < 0 || (size_t)k >= n) {
        fprintf(stderr, "trident: %s/%s: path too long\n", a, b);
        return -1;
    }
    return 0;
}

/* Copies path without trailing slashes ("/" stays "/"). */
static int strip_slashes(char *out, size_t n, const char *path)
{
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/')
        len--;
    if (len == 0 || len >= n) {
        fprintf(stderr, "trident: \"%s\": %s\n", path, len ? "path too long" : "empty path");
        return -1;
    }
    memcpy(out, path, len);
    out[len] = '\0';
    return 0;
}

/* The step of a name "step_<digits>", or -1. */
static long parse_step(const char *name)
{
    size_t p = strlen(STEP_PREFIX);
    if (strncmp(name, STEP_PREFIX, p) != 0 || name[p] == '\0')
        return -1;
    long v = 0;
    for (const char *c = name + p; *c; c++) {
        if (*c < '0' || *c > '9' || v > (LONG_MAX - 9) / 10)
            return -1;
        v = v * 10 + (*c - '0');
    }
    return v;
}

/* The step of ".tmp-step_<digits>-<pid>", or -1. */
static long parse_tmp_step(const char *name)
{
    size_t p = strlen(TMP_PREFIX);
    if (strncmp(name, TMP_PREFIX, p) != 0)
        return -1;
    const char *dash = strrchr(name + p, '-');
    if (!dash || dash[1] == '\0')
        return -1;
    for (const char *c = dash + 1; *c; c++)
        if (*c < '0' || *c > '9')
            return -1;
    char buf[64];
    size_t len = (size_t)(dash - (name + p));
    if (len >= sizeof buf)
        return -1;
    memcpy(buf, name + p, len);
    buf[len] = '\0';
    return parse_step(buf);
}

static int rm_cb(const char *fpath, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    int rc = (type == FTW_DP || type == FTW_D) ? rmdir(fpath) : unlink(fpath);
    if (rc != 0) {
        fprintf(stderr, "trident: %s: cannot remove: %s\n", fpath, strerror(errno));
        return -1;
    }
    return 0;
}

/* rm -rf path (symbolic links are removed, never followed); a missing path is fine. */
static int rm_rf(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -1;
    if (nftw(path, rm_cb, NFTW_FDS, FTW_DEPTH | FTW_PHYS) != 0) {
        fprintf(stderr, "trident: %s: could not remove it completely\n", path);
        return -1;
    }
    return 0;
}

static int sync_cb(const char *fpath, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    switch (type) {
    case FTW_F:
        return tri_fsync_path(fpath, 0);
    case FTW_DP:
        return tri_fsync_path(fpath, 1);
    case FTW_SL:
        return 0;
    default:
        fprintf(stderr, "trident: %s: cannot read it to fsync\n", fpath);
        return -1;
    }
}

/* fsync every regular file and directory under dir, dir itself last. */
static int fsync_tree(const char *dir)
{
    return nftw(dir, sync_cb, NFTW_FDS, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

/* Renames root/name to root/.trash-name-pid, fsyncs root, then deletes it. */
static int trash(const char *root, const char *name)
{
    char from[PATH_MAX], to[PATH_MAX], tname[NAME_MAX + 64];
    snprintf(tname, sizeof tname, TRASH_PREFIX "%s-%ld", name, (long)getpid());
    if (join(from, sizeof from, root, name) != 0 || join(to, sizeof to, root, tname) != 0)
        return -1;
    if (rm_rf(to) != 0)
        return -1;
    if (rename(from, to) != 0) {
        fprintf(stderr, "trident: %s: cannot move it to %s: %s\n", from, to, strerror(errno));
        return -1;
    }
    if (tri_fsync_path(root, 1) != 0)
        return -1;
    return rm_rf(to);
}

/* -------------------------------------------------------------- protocol */

int tri_ckpt_step_name(long step, char *name, size_t n)
{
    if (step < 0) {
        fprintf(stderr, "trident: checkpoint step %ld is negative\n", step);
        return -1;
    }
    int k = snprintf(name, n, STEP_PREFIX "%08ld", step);
    return (k < 0 || (size_t)k >= n) ? -1 : 0;
}

long tri_ckpt_step_of(const char *dir)
{
    char buf[PATH_MAX];
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    if (len == 0 || len >= sizeof buf)
        return -1;
    memcpy(buf, dir, len);
    buf[len] = '\0';
    const char *base = strrchr(buf, '/');
    return parse_step(base ? base + 1 : buf);
}

int tri_ckpt_begin(const char *root, long step, char *tmp, size_t n)
{
    char name[64], tname[128];
    if (tri_ckpt_step_name(step, name, sizeof name) != 0)
        return -1;
    if (tri_mkdir_p(root) != 0)
        return -1;
    snprintf(tname, sizeof tname, TMP_PREFIX "%s-%ld", name, (long)getpid());
    if (join(tmp, n, root, tname) != 0)
        return -1;
    if (rm_rf(tmp) != 0)
        return -1;
    if (mkdir(tmp, 0755) != 0) {
        fprintf(stderr, "trident: %s: cannot create directory: %s\n", tmp, strerror(errno));
        return -1;
    }
    return 0;
}

typedef struct step_dir {
    long step;
    char name[NAME_MAX + 1];
} step_dir;

static int cmp_step(const void *a, const void *b)
{
    long x = ((const step_dir *)a)->step, y = ((const step_dir *)b)->step;
    return x < y ? -1 : x > y ? 1 : 0;
}

/* Pruning and cleaning after a commit of `step` (see ckpt_store.h, step 4). */
static int prune(const char *root, long step, int keep)
{
    DIR *d = opendir(root);
    if (!d) {
        fprintf(stderr, "trident: %s: cannot list: %s\n", root, strerror(errno));
        return -1;
    }
    step_dir *steps = NULL;
    size_t ns = 0, cap = 0;
    int rc = 0;
    char path[PATH_MAX];
    struct dirent *de;
    /* Collect first, act after closedir: removing while listing is unspecified. */
    char(*junk)[NAME_MAX + 1] = NULL;
    size_t nj = 0, capj = 0;
    errno = 0;
    while ((de = readdir(d)) != NULL) {
        const char *nm = de->d_name;
        long s = parse_step(nm);
        int is_tmp = parse_tmp_step(nm) >= 0 && parse_tmp_step(nm) < step;
        int is_trash = strncmp(nm, TRASH_PREFIX, strlen(TRASH_PREFIX)) == 0;
        if (s < 0 && !is_tmp && !is_trash)
            continue;
        struct stat st;
        if (join(path, sizeof path, root, nm) != 0 || lstat(path, &st) != 0 ||
            !S_ISDIR(st.st_mode))
            continue; /* only real directories, never symlinks or files */
        if (s >= 0) {
            if (ns == cap) {
                cap = cap ? 2 * cap : 16;
                step_dir *t = realloc(steps, cap * sizeof *t);
                if (!t) {
                    rc = -1;
                    break;
                }
                steps = t;
            }
            steps[ns].step = s;
            snprintf(steps[ns].name, sizeof steps[ns].name, "%s", nm);
            ns++;
        } else {
            if (nj == capj) {
                capj = capj ? 2 * capj : 8;
                void *t = realloc(junk, capj * sizeof *junk);
                if (!t) {
                    rc = -1;
                    break;
                }
                junk = t;
            }
            snprintf(junk[nj], sizeof junk[nj], "%s", nm);
            nj++;
        }
    }
    if (rc != 0)
        fprintf(stderr, "trident: %s: out of memory while listing\n", root);
    closedir(d);

    if (rc == 0 && keep > 0 && ns > (size_t)keep) {
        qsort(steps, ns, sizeof *steps, cmp_step);
        /* the `keep` newest survive, and the one just committed always does */
        for (size_t i = 0; i + (size_t)keep < ns; i++)
            if (steps[i].step != step && trash(root, steps[i].name) != 0)
                rc = -1;
    }
    for (size_t i = 0; i < nj; i++) {
        if (join(path, sizeof path, root, junk[i]) != 0 || rm_rf(path) != 0)
            rc = -1;
    }
    free(steps);
    free(junk);
    return rc;
}

int tri_ckpt_commit(const char *root, long step, const char *tmp, int keep)
{
    char name[64], final[PATH_MAX], latest[PATH_MAX], line[80];
    if (tri_ckpt_step_name(step, name, sizeof name) != 0)
        return -1;
    if (join(final, sizeof final, root, name) != 0 || join(latest, sizeof latest, root, "latest") != 0)
        return -1;
    struct stat st;
    if (lstat(tmp, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "trident: %s: not a directory (tri_ckpt_begin not called?)\n", tmp);
        return -1;
    }
    if (fsync_tree(tmp) != 0)
        return -1;

    /* Into place. */
    char aside[PATH_MAX] = "";
    if (lstat(final, &st) != 0) {
        if (errno != ENOENT) {
            fprintf(stderr, "trident: %s: %s\n", final, strerror(errno));
            return -1;
        }
        if (rename(tmp, final) != 0) {
            fprintf(stderr, "trident: cannot rename %s to %s: %s\n", tmp, final, strerror(errno));
            return -1;
        }
    } else if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "trident: %s: exists and is not a directory\n", final);
        return -1;
    } else if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
        snprintf(aside, sizeof aside, "%s", tmp); /* now holds the old checkpoint */
    } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
        /* No atomic exchange here: move the old one aside, then rename. */
        char tname[128];
        snprintf(tname, sizeof tname, TRASH_PREFIX "%s-%ld", name, (long)getpid());
        if (join(aside, sizeof aside, root, tname) != 0 || rm_rf(aside) != 0)
            return -1;
        if (rename(final, aside) != 0) {
            fprintf(stderr, "trident: cannot move %s aside to %s: %s\n", final, aside,
                    strerror(errno));
            return -1;
        }
        if (rename(tmp, final) != 0) {
            fprintf(stderr, "trident: cannot rename %s to %s: %s\n", tmp, final, strerror(errno));
            if (rename(aside, final) != 0)
                fprintf(stderr, "trident: %s: could not restore it from %s: %s\n", final, aside,
                        strerror(errno));
            return -1;
        }
    } else {
        fprintf(stderr, "trident: cannot exchange %s with %s: %s\n", tmp, final, strerror(errno));
        return -1;
    }
    if (tri_fsync_path(root, 1) != 0)
        return -1;

    /* Repoint latest. */
    int k = snprintf(line, sizeof line, "%s\n", name);
    if (tri_write_file_atomic(latest, line, (size_t)k) != 0)
        return -1;

    /* The new checkpoint is committed; what follows is housekeeping, whose
     * failure (reported above) does not undo the save. */
    int rc = 0;
    if (aside[0] && rm_rf(aside) != 0)
        rc = 1;
    if (prune(root, step, keep) != 0)
        rc = 1;
    return rc;
}

int tri_ckpt_latest(const char *root, char *path, size_t n)
{
    char r[PATH_MAX], latest[PATH_MAX];
    if (strip_slashes(r, sizeof r, root) != 0 || join(latest, sizeof latest, r, "latest") != 0)
        return -1;
    struct stat st;
    if (lstat(latest, &st) != 0) {
        if (errno == ENOENT)
            fprintf(stderr, "trident: no checkpoint in %s (no %s)\n", r, latest);
        else
            fprintf(stderr, "trident: %s: %s\n", latest, strerror(errno));
        return -1;
    }
    size_t len = 0;
    char *txt = tri_slurp(latest, "checkpoint pointer", 4096, &len);
    if (!txt)
        return -1;
    while (len > 0 && (txt[len - 1] == '\n' || txt[len - 1] == '\r' || txt[len - 1] == ' '))
        txt[--len] = '\0';
    if (parse_step(txt) < 0) {
        fprintf(stderr, "trident: %s: expected one line \"step_<N>\", got \"%.40s\"\n", latest,
                txt);
        free(txt);
        return -1;
    }
    int rc = join(path, n, r, txt);
    if (rc == 0 && (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))) {
        fprintf(stderr, "trident: %s names %s, but %s is missing\n", latest, txt, path);
        rc = -1;
    }
    free(txt);
    return rc;
}

int tri_ckpt_resolve(const char *path_or_root, char *out, size_t n)
{
    char p[PATH_MAX], probe[PATH_MAX];
    if (strip_slashes(p, sizeof p, path_or_root) != 0)
        return -1;
    struct stat st;
    if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "trident: %s: no such checkpoint directory\n", p);
        return -1;
    }
    if (join(probe, sizeof probe, p, "latest") != 0)
        return -1;
    if (lstat(probe, &st) == 0)
        return tri_ckpt_latest(p, out, n);
    int is_ckpt = tri_ckpt_step_of(p) >= 0;
    if (!is_ckpt) {
        if (join(probe, sizeof probe, p, "config.json") != 0)
            return -1;
        is_ckpt = stat(probe, &st) == 0 && S_ISREG(st.st_mode);
    }
    if (!is_ckpt) {
        fprintf(stderr,
                "trident: no checkpoint in %s (no %s/latest, and it is neither a step_<N> "
                "directory nor one with a config.json)\n",
                p, p);
        return -1;
    }
    int k = snprintf(out, n, "%s", p);
    if (k < 0 || (size_t)k >= n) {
        fprintf(stderr, "trident: %s: path too long\n", p);
        return -1;
    }
    return 0;
}
