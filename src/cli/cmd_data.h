/* `trident data`: inspect token files (src/cli/cmd_data.c). */
#ifndef TRI_CMD_DATA_H
#define TRI_CMD_DATA_H

/* argv[0] == "data". `data info PATH [--json] [--vocab V] [--seq-len T]`
 * prints the format, token dtype, documents, sequences, tokens and id
 * range; `data dump PATH --doc N [--vocab V]` prints document N's token ids.
 * `--help` after a sub-command prints its options; `data --help` both.
 * Returns the exit code (base/exit.h): TRI_EXIT_OK, TRI_EXIT_BAD_INPUT (one
 * line naming the culprit), TRI_EXIT_FAILURE (a read or a write failed). */
int tri_cmd_data(int argc, char **argv);

#endif
