/* The crash-safe checkpoint directory protocol.
 *
 * A checkpoint root holds:
 *   step_<8 digits>/         one complete checkpoint each (never written in place)
 *   latest                   "step_XXXXXXXX\n": the newest complete checkpoint
 *   .tmp-step_<8d>-<pid>/    a checkpoint being written (ignored by readers)
 *   .trash-step_<8d>-<pid>/  a checkpoint being removed (ignored by readers)
 *
 * Saving: tri_ckpt_begin gives a fresh temporary directory; the writers put
 * their files there (closing them); tri_ckpt_commit makes it durable, moves
 * it into place with one rename, and then repoints `latest` with another.
 * A crash at any moment leaves `latest` naming a complete directory: the
 * previous checkpoint until the new one is whole, the new one after.
 *
 * begin/commit are called by ONE rank (the others write into the directory
 * between them, separated by barriers). All functions print one line
 * starting "trident: " naming the path and return -1 on error.
 */
#ifndef TRI_MODEL_CKPT_STORE_H
#define TRI_MODEL_CKPT_STORE_H

#include <stddef.h>

/* "step_%08ld" into name[n]. Returns 0, or -1 if step < 0 or n is too small. */
int tri_ckpt_step_name(long step, char *name, size_t n);

/* mkdir -p root, then creates root/.tmp-step_<8d>-<pid> (removing a stale one
 * of that exact name first) and writes its path into tmp[n]. */
int tri_ckpt_begin(const char *root, long step, char *tmp, size_t n);

/* Makes tmp (from tri_ckpt_begin) the checkpoint root/step_<8d>:
 *   1. fsync every file and directory under tmp, then tmp itself;
 *   2. rename tmp to root/step_<8d>; if that exists it is swapped atomically
 *      with tmp (renameat2 RENAME_EXCHANGE; where the filesystem lacks it,
 *      moved aside first, which leaves a moment in which a crash loses that
 *      step) and removed only after the new one is in place;
 *   3. fsync root; write root/latest atomically (tri_write_file_atomic);
 *   4. keep > 0: remove the oldest step_<N> directories beyond `keep` (never
 *      the one just committed; entries that are not step_<N> directories are
 *      never touched); always: remove .tmp-step_<N>-* directories with N
 *      below `step` (abandoned saves) and leftover .trash-* directories.
 * Removal renames a directory to .trash-* before deleting its contents, so a
 * half-deleted checkpoint never looks like a checkpoint.
 * Returns 0; -1 when the checkpoint was not committed (the previous one is
 * intact); 1 when it was committed but removing old ones failed (reported,
 * e.g. files held open on NFS): a warning, not a failed save. */
int tri_ckpt_commit(const char *root, long step, const char *tmp, int keep);

/* The step directory root/latest names, into path[n]. Errors: no latest
 * file ("no checkpoint in ROOT"), malformed latest, or a missing directory. */
int tri_ckpt_latest(const char *root, char *path, size_t n);

/* Accepts either a checkpoint root (has a `latest` file: resolved as in
 * tri_ckpt_latest) or one checkpoint directory (its name is step_<N>, or it
 * holds a config.json, e.g. a copied or Hugging Face style directory), so
 * users can pass `--ckpt runs/x/ckpt` or `--ckpt runs/x/ckpt/step_00000100`.
 * Writes the checkpoint directory's path into out[n]. */
int tri_ckpt_resolve(const char *path_or_root, char *out, size_t n);

/* The step number of a step directory path ("…/step_00000100" -> 100), or -1
 * if its last component is not step_<digits>. */
long tri_ckpt_step_of(const char *dir);

#endif
