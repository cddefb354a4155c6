/* A process's record of its own end, for the launcher that runs it.
 *
 * A rank that decides to end itself and the job (the watchdog, the progress
 * heartbeat, an abort of the whole job after an error) writes the exit code
 * it is about to end with, and the one line that says why, before it calls
 * MPI_Abort or exits. The launcher then knows how the rank ended even when
 * the rank's own end is lost: Open MPI's teardown may kill the rank and the
 * wrapper that watches it (tridentrun --rank-exec, src/launch/supervisor.c)
 * before the wrapper records the exit, and mpirun's report of an abort can
 * be garbled. tridentrun's wrapper names the file in TRIDENT_EXIT_RECORD
 * (DIR/rank_<r>.exit); without it nothing is written.
 *
 * The file is one line, "<unix time> <code> <reason>\n" (the reason may be
 * empty), written to a temporary name beside it and renamed: a reader sees
 * the whole line or no file, whenever the writer is killed. Plain POSIX, no
 * state: the CUDA module (libtri_cuda.so) links this file too. */
#ifndef TRI_BASE_EXITREC_H
#define TRI_BASE_EXITREC_H

/* The environment variable that names the file (set by tridentrun's rank
 * wrapper for its command). */
#define TRI_EXIT_RECORD_ENV "TRIDENT_EXIT_RECORD"

/* Test-only (docs/environment.md): "1" makes tri_exit_record, once it has
 * written the record, SIGKILL its parent (tridentrun's rank wrapper) and
 * itself, as Open MPI's teardown does when it kills an aborting rank and its
 * wrapper before the wrapper records the exit and before mpirun reports the
 * abort. Read only when a record was written. */
#define TRI_EXIT_RECORD_DEBUG_ENV "TRIDENT_DEBUG_KILL_AFTER_EXIT_RECORD"

typedef struct tri_exit_rec {
    double t;          /* when it was written (unix time)              */
    int code;          /* the exit code the process ended with         */
    char reason[1024]; /* one line, no newline; "" when none was given */
} tri_exit_rec;

/* Records `code` and `reason` (one line; may be NULL; line breaks become
 * blanks, cut at sizeof reason - 1 bytes) in the file $TRIDENT_EXIT_RECORD
 * names. Returns 0 when written, 1 when the variable is unset or empty (not
 * asked), -1 when it could not be written (errno set; the process goes on to
 * end as it would: the record is an addition, never a condition). */
int tri_exit_record(int code, const char *reason);

/* The same into the file at path, without the debug switch. */
int tri_exit_record_to(const char *path, int code, const char *reason);

/* Reads the record at path into *r: 0, or -1 when the file is missing or is
 * not a record (r->code is then -1). */
int tri_exit_record_read(const char *path, tri_exit_rec *r);

#endif
