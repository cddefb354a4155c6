/* The exit codes of trident and tridentrun, by name. Every command returns
 * one of these from main (through its tri_cmd_* function); the launcher
 * passes a rank's code on. Scripts and tests match on the numbers, so they
 * never change.
 *
 *   0    TRI_EXIT_OK          the command did what it was asked
 *   1    TRI_EXIT_FAILURE     a runtime failure (a write failed, a rank died,
 *                            out of memory), said in one line
 *   2    TRI_EXIT_BAD_INPUT   bad input (a file, a key, an option, a number),
 *                            said in one line naming the culprit, before any work
 *   3    TRI_EXIT_INJECTED    a fault injected on purpose (debug.fail_step)
 *   124  TRI_EXIT_TIMEOUT     a communication wait passed parallel.timeout_s
 *                            (the watchdog; timeout(1)'s code)
 *   127  TRI_EXIT_EXEC        a child program could not be started (exec failed)
 *   128+S                    stopped by signal S (tri_exit_signal), the shell's rule */
#ifndef TRI_BASE_EXIT_H
#define TRI_BASE_EXIT_H

enum {
    TRI_EXIT_OK = 0,
    TRI_EXIT_FAILURE = 1,
    TRI_EXIT_BAD_INPUT = 2,
    TRI_EXIT_INJECTED = 3,
    TRI_EXIT_TIMEOUT = 124,
    TRI_EXIT_EXEC = 127,
    TRI_EXIT_SIGNAL_BASE = 128
};

/* The exit code of a process stopped by signal sig: 128 + sig. */
static inline int tri_exit_signal(int sig) { return TRI_EXIT_SIGNAL_BASE + sig; }

#endif
