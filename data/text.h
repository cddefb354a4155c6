/* Reading text files, plain or ".xz" (through `xz -dc`, no shell), whole or
 * in blocks that end at a cut point: the text reader of BPE training
 * (data/tok/train.c) and of the encode pipeline (data/tok/encode.c).
 *
 * Errors print one line "trident: FILE: ..." (base/err.h) and return -1 (or
 * SIZE_MAX); nothing here exits. One reader is used by one thread. */
#ifndef TRI_DATA_TEXT_H
#define TRI_DATA_TEXT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Checks that each of files[0 .. n) is a readable regular file, before any
 * work starts. *total gets the sum of their sizes, or 0 when one is ".xz"
 * (its text's size is unknown). Returns 0, or -1 after printing
 * "trident: FILE: cannot read: ..." or "trident: FILE: not a regular file". */
int tri_text_check(const char *const *files, int n, uint64_t *total);

/* A text file open for reading. */
typedef struct tri_textfile {
    FILE *f;
    int pid; /* xz child process, or 0 */
    char path[1024];
} tri_textfile;
int tri_textfile_open(tri_textfile *tf, const char *path); /* 0 or -1 (printed) */
/* Reads up to n bytes; returns the count (0 at end of file) or SIZE_MAX on a
 * read error (printed). */
size_t tri_textfile_read(tri_textfile *tf, void *buf, size_t n);
/* Closes; returns -1 (printed) if xz failed. NULL-safe and idempotent. */
int tri_textfile_close(tri_textfile *tf);

/* A text file read in blocks of about `block` bytes that end at a cut
 * point: after a '\n' (by_line) or at a safe pre-token cut
 * (tri_tokenizer_cut_before). A block grows beyond `block` when no cut
 * point is found; the last block ends at the end of the file. */
typedef struct tri_textblocks {
    tri_textfile tf;
    char *buf;       /* (cap) */
    size_t cap, len; /* bytes held                                   */
    size_t used;     /* bytes of buf handed out by the last call     */
    size_t block;
    int by_line, eof;
    uint64_t bytes_done; /* bytes handed out so far                      */
} tri_textblocks;
int tri_textblocks_open(tri_textblocks *b, const char *path, size_t block, int by_line); /* 0 / -1 */
/* Sets [*text, *text + *n), valid until the next call. Returns 1, 0 at the
 * end of the file, or -1 (printed). */
int tri_textblocks_next(tri_textblocks *b, const char **text, size_t *n);
/* Frees; returns -1 if reading failed (xz). NULL-safe, zeroes *b. */
int tri_textblocks_close(tri_textblocks *b);

#endif
