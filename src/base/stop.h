/* Stop requests: SIGTERM, SIGINT and SIGUSR1 (tridentrun's and Slurm's "save
 * and stop") recorded by a handler and polled by every long loop at a point
 * where stopping is safe: the trainer at step boundaries and between
 * validation batches, `trident eval` between batches, `sample` between
 * tokens, `tokenize` between blocks of text and between BPE merges.
 *
 * The flag is the one piece of mutable process state outside the context
 * structs: a signal handler can reach nothing else. Until tri_stop_install
 * is called (tests, library use) no handler exists and tri_stop_signal()
 * stays 0, so the loops that poll it behave as before. */
#ifndef TRI_BASE_STOP_H
#define TRI_BASE_STOP_H

enum {
    /* A second SIGINT/SIGTERM ends the process at once (the default action),
     * for commands with nothing to save; without it every further signal is
     * only recorded (the trainer finishes saving its checkpoint). */
    TRI_STOP_SECOND_KILLS = 1
};

/* Installs the handler for SIGTERM, SIGINT and SIGUSR1. flags: 0 or
 * TRI_STOP_SECOND_KILLS. Idempotent. */
void tri_stop_install(int flags);

/* The first stop signal received (SIGTERM, SIGINT or SIGUSR1), or 0. Cheap:
 * one load, fit for an inner loop. */
int tri_stop_signal(void);

/* "SIGTERM", "SIGINT", "SIGUSR1" (else "a signal"), for messages. */
const char *tri_stop_name(int sig);

#endif
