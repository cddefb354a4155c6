/* The checkpoint store: a directory of checkpoints from which a crash, a full
 * disk, a second trainer, a stale pointer or a user's copy never costs a
 * checkpoint, and in which a damaged one is named, never trained on.
 *
 * A store root holds:
 *   step_<8 digits>/         one checkpoint each, never written in place. It is
 *                            COMPLETE when it holds manifest.json (below).
 *   latest                   "step_XXXXXXXX\n", the newest save of the last
 *                            writer: a hint for people and other tools only
 *   .lock                    the writer's advisory lock (flock); its text
 *                            names the holder: "pid P on host H since T"
 *   .tmp-step_<8d>-<pid>/    a checkpoint being written (ignored by readers)
 *   .trash-<name>-<pid>/     a directory being removed (ignored by readers)
 *   replaced-step_<8d>-<t>/  a step dir of another run that a save of the
 *                            same step moved aside (ignored, never removed)
 *
 * manifest.json, the last file written into a step dir:
 *   {"format": "trident-checkpoint", "version": 1, "step": 100,
 *    "run": "<16 hex digits>", "checksum": "crc32c",
 *    "files": [{"name": "config.json", "size": 812, "crc32c": "1c2d3e4f"}, ...]}
 * lists every other regular file under the step dir (name relative, '/'
 * separated, sorted), its size in bytes and its CRC-32C (src/base/crc32c.h)
 * as 8 lowercase hex digits. "run" names the training run and is kept across
 * its resumes: pruning removes only checkpoints of its own run.
 *
 * Saving (the one writing process, holding the store open): tri_ckpt_begin
 * gives a fresh temp dir, the writers (any rank) put their files there and
 * close them, tri_ckpt_commit checksums and fsyncs every file, writes and
 * fsyncs manifest.json, fsyncs the dir, renames it to step_<N>, fsyncs the
 * root, rewrites latest, prunes. A crash before the rename leaves a temp dir
 * (removed by the next writer's open); after it, a complete checkpoint. A
 * save that fails is undone by tri_ckpt_abort.
 *
 * Finding the checkpoint to resume from (tri_ckpt_find): the newest complete
 * step dir, whatever latest says (missing, stale, naming a deleted dir),
 * verified (sizes and checksums). Step dirs without a manifest (written by a
 * trident from before manifests) are used only when latest names one and no
 * complete step dir is newer: their completeness was promised by latest then.
 *
 * All functions print one line starting "trident: " naming the path and the
 * key, and return -1, on error.
 */
#ifndef TRI_MODEL_CKPT_STORE_H
#define TRI_MODEL_CKPT_STORE_H

#include <stddef.h>

#define TRI_CKPT_PATH_MAX 4096
#define TRI_CKPT_MANIFEST "manifest.json"
#define TRI_CKPT_LOCK     ".lock"

/* A store opened for writing. A zeroed struct is a closed store. */
typedef struct tri_ckpt_store {
    int is_open;
    char root[TRI_CKPT_PATH_MAX]; /* without trailing slashes */
    int lock_fd;                  /* root/.lock, open while is_open */
    int locked;                   /* 1: flock held; 0: the file system has no locks (warned) */
    char run[17];                 /* this run's id: 16 hex digits */
    double find_ms;               /* tri_model_ckpt_open with resume, world rank 0: finding and
                                     verifying the checkpoint (read + CRC-32C), in ms */
} tri_ckpt_store;

/* Opens root for writing, before any training. `key` names root in messages
 * ("checkpoint.dir"). In order:
 *   1. root must be non-empty and creatable (mkdir -p; a path under a regular
 *      file is refused naming that file) and writable (.lock is created);
 *   2. the lock: flock(LOCK_EX | LOCK_NB) on root/.lock, held until close;
 *      held by another process: refused naming the holder (pid, host). A
 *      file system without locks: a warning, and no lock;
 *   3. stale temp dirs are removed: holding the lock, every temp dir is one
 *      whose writer died or held no lock; without a lock, those whose pid is
 *      not alive on this host. Leftover .trash-* dirs are removed too.
 * The run id is fresh (random); tri_ckpt_store_adopt continues another's. */
int tri_ckpt_store_open(tri_ckpt_store *s, const char *root, const char *key);

/* NULL-safe, idempotent: releases the lock (the lock file stays). */
void tri_ckpt_store_close(tri_ckpt_store *s);

/* Continues the run of the checkpoint in dir: its manifest's "run" becomes
 * this store's, so that pruning may later remove it and its predecessors. A
 * dir without a manifest leaves the fresh run id (so it is never pruned). */
int tri_ckpt_store_adopt(tri_ckpt_store *s, const char *dir);

/* "step_%08ld" into name[n]. Returns 0, or -1 if step < 0 or n is too small. */
int tri_ckpt_step_name(long step, char *name, size_t n);

/* The step number of a step directory path ("…/step_00000100" -> 100), or -1
 * if its last component is not step_<digits>. */
long tri_ckpt_step_of(const char *dir);

/* Creates root/.tmp-step_<8d>-<pid> (removing a stale one of that exact name
 * first) and writes its path into tmp[n]. */
int tri_ckpt_begin(tri_ckpt_store *s, long step, char *tmp, size_t n);

/* Makes tmp (from tri_ckpt_begin) the complete checkpoint root/step_<8d>:
 *   1. every regular file under tmp is read for its CRC-32C and fsynced;
 *      manifest.json is written and fsynced; every directory is fsynced;
 *   2. tmp is renamed to step_<8d>. If that exists and is of this run, it is
 *      swapped atomically with tmp (renameat2 RENAME_EXCHANGE; where the file
 *      system lacks it, moved aside first) and removed; if it is of another
 *      run (or has no manifest), it is moved aside to replaced-step_<8d>-<t>
 *      and kept;
 *   3. root is fsynced and latest rewritten (a hint: failing is a warning);
 *   4. keep > 0: of the complete step dirs of this run, all but the `keep`
 *      newest are removed, never the one just committed nor the newest
 *      complete one of any run; other runs' checkpoints, step dirs without a
 *      manifest and entries that are not step_<N> directories are never
 *      touched. Stale temp and trash dirs are removed as in open.
 * Removal renames a directory to .trash-* before deleting its contents, so a
 * half-deleted checkpoint never looks like one.
 * Returns 0; -1 when the checkpoint was not committed (tmp is left for
 * tri_ckpt_abort; the checkpoints before are intact); 1 when it was committed
 * but something after the rename failed (reported): a warning, not a failed
 * save. */
int tri_ckpt_commit(tri_ckpt_store *s, long step, const char *tmp, int keep);

/* Removes tmp after a failed save (best effort; reports what it cannot
 * remove). tmp "" or missing: nothing to do. */
void tri_ckpt_abort(tri_ckpt_store *s, const char *tmp);

/* Checks the step dir `dir` against its manifest: every file it lists is a
 * regular file (never blocks on a FIFO) of the listed size and CRC-32C, and
 * the manifest's step is the dir's. Prints nothing. Returns 0 when it
 * verifies, 1 when dir has no manifest.json, -1 when it does not verify,
 * with the reason, naming the file, in why[n]. */
int tri_ckpt_verify(const char *dir, char *why, size_t n);

/* The bytes of the complete checkpoint dir: its manifest's files and the
 * manifest itself; -1 when it has no readable manifest. Prints nothing. */
long long tri_ckpt_bytes(const char *dir);

/* How many checkpoints root holds (step_<N> directories with a manifest.json
 * or a state.json); the newest one's path into newest[n] (may be NULL). A
 * root that does not exist holds 0. Returns -1 (printed) if it cannot be
 * listed. */
long tri_ckpt_count(const char *root, char *newest, size_t n);

/* The checkpoint to resume from in root (see the top), verified. */
typedef struct tri_ckpt_found {
    char dir[TRI_CKPT_PATH_MAX];        /* the step dir; "" when root holds no checkpoint */
    long step;                          /* its step; -1 when none */
    int verified;                       /* 1: complete and verified; 0: without a manifest, named by latest */
    char note[TRI_CKPT_PATH_MAX + 256]; /* "" or one line for the user (latest stale or ignored),
                                           without "note: ": print it with tri_log_note */
} tri_ckpt_found;

/* Returns 0 with f filled (f->dir "" when root holds no checkpoint or does
 * not exist), or -1 with one line naming the file at fault: the newest
 * complete checkpoint does not verify (the line names the previous one that
 * does and how to resume from it), or root holds only step dirs without a
 * manifest that latest does not name (the line says how to name one). */
int tri_ckpt_find(const char *root, tri_ckpt_found *f);

/* For `sample` and `eval`: accepts a store root (resolved as tri_ckpt_find
 * does) or one checkpoint directory (its name is step_<N>, or it holds a
 * config.json, e.g. a copied or Hugging Face style one; verified when it has
 * a manifest). Writes the checkpoint directory's path into out[n]. */
int tri_ckpt_resolve(const char *path_or_root, char *out, size_t n);

#endif
