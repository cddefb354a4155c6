/* Opening files a user hands in, one checked way: regular files only (a
 * named pipe, a directory or a device is refused at once, never blocked on),
 * errors name the file and what it was wanted for. */
#ifndef TRI_BASE_FILE_H
#define TRI_BASE_FILE_H

#include <stddef.h>
#include <stdio.h>

/* open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK) of a regular file, then back
 * to blocking; `what` names the role in messages ("tokenizer", "config").
 * Returns the fd, or -1 after printing "trident: <what> <path>: <reason>".
 * *size (if non-NULL) gets the file's size. */
int tri_open_regular(const char *path, const char *what, size_t *size);

/* The same check without printing, for a program with its own message
 * prefix (tridentrun): the fd, or -1 with the reason ("cannot open: No such
 * file or directory", "not a regular file (a named pipe)") in why[n]. */
int tri_open_regular_why(const char *path, size_t *size, char *why, size_t n);

/* Reads a whole regular file into a malloc'd buffer with a NUL appended
 * (caller frees); *len (if non-NULL) gets its length without the NUL. Files
 * over max_bytes are refused (0: no limit). NULL after printing. */
char *tri_slurp(const char *path, const char *what, size_t max_bytes, size_t *len);

/* write(2) of all of buf[n], retrying short writes and EINTR: 0, or -1
 * (errno set). */
int tri_write_all(int fd, const void *buf, size_t n);

#endif
