/* Notes and warnings: lines that say something went differently from what
 * the user may expect, while nothing failed (failures: base/err.h).
 *
 *   tri_log_note   stdout, "note: <message>": part of a run's log, between
 *                  the trainer's step lines (the trainer's stdout is its log)
 *   tri_note       stderr, "trident: note: <message>": for commands whose
 *                  stdout is their result (eval --json, tokenize, data)
 *   tri_warn       stderr, "trident: warning: <message>": something was left
 *                  undone that the user asked for (no plots, no mpirun log)
 *   tri_note_rank  stderr, "trident: rank R: note: <message>"
 *
 * The prefix is tri_prog_name()'s ("tridentrun" in the launcher). A line
 * that starts "trident: note:" or "trident: warning:" is never taken for a
 * rank's first error by the launcher (src/launch). No state: each call is
 * one formatted write. */
#ifndef TRI_BASE_LOG_H
#define TRI_BASE_LOG_H

void tri_log_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void tri_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void tri_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void tri_note_rank(int rank, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
