/* Directories and durable small writes, for every layer: mkdir -p that names
 * the component in the way, and whole-file replacement that a crash never
 * leaves half-written. Errors print one line "trident: ..." naming the path
 * and return -1 (src/base/err.h). Reading a user's file: src/base/file.h. */
#ifndef TRI_BASE_FS_H
#define TRI_BASE_FS_H

#include <stddef.h>

/* mkdir -p (mode 0755); 0 if it exists already as a directory. */
int tri_mkdir_p(const char *path);

/* The same, with the messages naming the role of the path first, e.g.
 * "trident: checkpoint.dir runs/x/ckpt: runs/x is a file, not a directory".
 * An empty path is refused ("<what> is empty"). */
int tri_mkdir_p_named(const char *what, const char *path);

/* Writes data[len] to `path` crash-safely: path.tmp is written, fsynced and
 * renamed over path, then the parent directory is fsynced. A reader sees the
 * old content or the new one, never a mix. One writer per path at a time
 * (path.tmp is a fixed name); on failure path.tmp is removed and path is as
 * it was. */
int tri_write_file_atomic(const char *path, const void *data, size_t len);

/* fsync of a file (dir = 0) or a directory (dir = 1) by path. */
int tri_fsync_path(const char *path, int dir);

#endif
