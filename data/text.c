/* The text reader (data/text.h): plain files through stdio, ".xz" files
 * through a child `xz -dc` on a pipe, and blocks cut after a line or at a
 * safe pre-token boundary (tri_tokenizer_cut_before). */
#include "data/text.h"

#include <errno.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/err.h"
#include "base/str.h"
#include "data/tok/tokenizer.h"

extern char **environ;

int tri_text_check(const char *const *files, int n, uint64_t *total) {
    uint64_t t = 0;
    int known = 1;
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (stat(files[i], &st) != 0 || access(files[i], R_OK) != 0) {
            tri_error("%s: cannot read: %s", files[i], strerror(errno));
            return -1;
        }
        if (!S_ISREG(st.st_mode)) {
            tri_error("%s: not a regular file", files[i]);
            return -1;
        }
        if (tri_ends_with(files[i], ".xz")) known = 0;
        t += (uint64_t)st.st_size;
    }
    *total = known ? t : 0;
    return 0;
}

int tri_textfile_open(tri_textfile *tf, const char *path) {
    memset(tf, 0, sizeof *tf);
    snprintf(tf->path, sizeof tf->path, "%s", path);
    FILE *f = fopen(path, "rb");
    if (!f) {
        tri_error("%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    if (!tri_ends_with(path, ".xz")) {
        tf->f = f;
        return 0;
    }
    fclose(f);
    int fd[2];
    if (pipe(fd) != 0) {
        tri_error("%s: pipe: %s", path, strerror(errno));
        return -1;
    }
    posix_spawn_file_actions_t fa;
    char *argv[] = {"xz", "-dc", "--", tf->path, NULL};
    pid_t pid;
    int rc = posix_spawn_file_actions_init(&fa);
    if (rc == 0) {
        rc = posix_spawn_file_actions_adddup2(&fa, fd[1], STDOUT_FILENO);
        if (rc == 0) rc = posix_spawn_file_actions_addclose(&fa, fd[0]);
        if (rc == 0) rc = posix_spawn_file_actions_addclose(&fa, fd[1]);
        if (rc == 0) rc = posix_spawnp(&pid, "xz", &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
    }
    close(fd[1]);
    if (rc != 0) {
        close(fd[0]);
        tri_error("%s: cannot run xz to decompress it: %s", path, strerror(rc));
        return -1;
    }
    tf->f = fdopen(fd[0], "rb");
    tf->pid = (int)pid;
    if (!tf->f) {
        close(fd[0]);
        tri_textfile_close(tf);
        tri_error("%s: fdopen: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

size_t tri_textfile_read(tri_textfile *tf, void *buf, size_t n) {
    size_t got = fread(buf, 1, n, tf->f);
    if (got < n && ferror(tf->f)) {
        tri_error("%s: read error: %s", tf->path, strerror(errno));
        return SIZE_MAX;
    }
    return got;
}

int tri_textfile_close(tri_textfile *tf) {
    if (!tf) return 0;
    int rc = 0;
    if (tf->f && fclose(tf->f) != 0 && !tf->pid) rc = -1;
    tf->f = NULL;
    if (tf->pid > 0) {
        int st = 0;
        while (waitpid((pid_t)tf->pid, &st, 0) < 0) {
            if (errno != EINTR) {
                st = -1;
                break;
            }
        }
        if (st != 0) {
            tri_error("%s: xz -dc failed (%s %d)", tf->path, WIFEXITED(st) ? "exit code" : "signal",
                      WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            rc = -1;
        }
        tf->pid = 0;
    }
    return rc;
}

int tri_textblocks_open(tri_textblocks *b, const char *path, size_t block, int by_line) {
    memset(b, 0, sizeof *b);
    b->block = block < 4096 ? 4096 : block;
    b->by_line = by_line;
    b->cap = b->block;
    b->buf = malloc(b->cap);
    if (!b->buf) {
        tri_error("%s: out of memory for a %zu-byte block", path, b->cap);
        return -1;
    }
    if (tri_textfile_open(&b->tf, path)) {
        free(b->buf);
        b->buf = NULL;
        return -1;
    }
    return 0;
}

int tri_textblocks_next(tri_textblocks *b, const char **text, size_t *n) {
    /* drop what the last call handed out */
    memmove(b->buf, b->buf + b->used, b->len - b->used);
    b->len -= b->used;
    b->used = 0;
    size_t want = b->block;
    for (;;) {
        while (!b->eof && b->len < want) {
            if (want > b->cap) {
                char *nb = realloc(b->buf, want);
                if (!nb) {
                    tri_error("%s: out of memory for a %zu-byte block", b->tf.path, want);
                    return -1;
                }
                b->buf = nb;
                b->cap = want;
            }
            size_t got = tri_textfile_read(&b->tf, b->buf + b->len, want - b->len);
            if (got == SIZE_MAX) return -1;
            if (got == 0) b->eof = 1;
            b->len += got;
        }
        size_t cut;
        if (b->eof) {
            cut = b->len;
        } else if (b->by_line) {
            cut = 0;
            for (size_t i = b->len; i > 0; i--)
                if (b->buf[i - 1] == '\n') {
                    cut = i;
                    break;
                }
        } else {
            cut = tri_tokenizer_cut_before(b->buf, b->len, b->len - 1);
        }
        if (cut == 0 && !b->eof) { /* no cut point in the block: read more */
            want = b->len * 2;
            continue;
        }
        if (cut == 0) return 0;
        b->used = cut;
        b->bytes_done += cut;
        *text = b->buf;
        *n = cut;
        return 1;
    }
}

int tri_textblocks_close(tri_textblocks *b) {
    if (!b) return 0;
    int rc = tri_textfile_close(&b->tf);
    free(b->buf);
    memset(b, 0, sizeof *b);
    return rc;
}
