/* `trident data`: inspect token files (src/cli/cmd_data.c). */
#ifndef TRI_CMD_DATA_H
#define TRI_CMD_DATA_H

/* argv[0] == "data". `data info PATH [--json] [--vocab V] [--seq-len T]`
 * prints the format, token dtype, documents, sequences, tokens and id
 * range; `data dump PATH --doc N [--vocab V]` prints document N's token ids.
 * Returns the exit code: 0 ok, 2 bad input (one line naming the culprit). */
int tri_cmd_data(int argc, char **argv);

#endif
