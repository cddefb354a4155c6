/* Running scripts/plot.py from the programs (`log.plot = true` at the end of
 * `trident train`, the `"plot": true` of a sweep file). Plotting is a
 * convenience: every failure here is a warning, never the run's failure. */
#ifndef TRI_PLOT_H
#define TRI_PLOT_H

/* Runs `PYTHON PLOT_PY args...` and waits for it, its output going to this
 * process's stdout and stderr. PLOT_PY is $TRIDENT_PLOT if set, else
 * scripts/plot.py beside the directory of this executable (build/trident ->
 * scripts/plot.py); PYTHON is $TRIDENT_PYTHON if set, else /usr/bin/python3
 * if it exists, else python3 on $PATH. `args` ends with NULL. Returns the
 * script's exit code (0: PNGs written; the script says what it drew), or -1
 * when it could not be started; every failure prints one line
 * "trident: warning: <what>: ..." to stderr. */
int tri_plot_run(const char *what, const char *const *args);

#endif
