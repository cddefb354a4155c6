/* Status lines of a long command on stderr, for commands whose result goes to
 * a file or stdout (tokenize encode, tokenize train): a line redrawn in
 * place on a terminal or printed as a plain line into a log, and the
 * closing summary when the work is done. Failures go through base/err.h,
 * notes and warnings through base/log.h. No state: each call is one write
 * to stderr (unbuffered). */
#ifndef TRI_BASE_STATUS_H
#define TRI_BASE_STATUS_H

/* Whether stderr is a terminal: progress is then redrawn in place. */
int tri_status_tty(void);

/* Shows one progress line (line holds no '\n'): on a terminal (tty) it
 * replaces the line shown before ("\r<line>\033[K", the cursor stays at its
 * end), otherwise it is a line of its own ("<line>\n"). No prefix. */
void tri_status_line(const char *line, int tty);

/* Ends the line a terminal shows ("\n"), so that what follows starts on a
 * line of its own. */
void tri_status_end(void);

/* The closing summary of work that succeeded: "trident: <message>\n" on
 * stderr (the program's prefix, as tri_error's; it is not a failure). */
void tri_status_done(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
