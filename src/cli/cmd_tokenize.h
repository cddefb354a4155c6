/* `trident tokenize`: train a byte-level BPE tokenizer, encode text into
 * token files, decode token files back to text (src/cli/cmd_tokenize.c). */
#ifndef TRI_CMD_TOKENIZE_H
#define TRI_CMD_TOKENIZE_H

/* argv[0] == "tokenize".
 *   tokenize train --vocab-size N --out tok.json [--pattern gpt2|llama3] [--threads K] CORPUS...
 *   tokenize encode (--tokenizer tok.json | --bytes) --format llmc|megatron --out PREFIX
 *                   [--jsonl] [--threads K] [--quiet] [--split-special-tokens] INPUT...
 *   tokenize decode (--tokenizer tok.json | --bytes) [--format llmc|megatron] INPUT
 * `--help` after a sub-command prints its options; `tokenize --help` all.
 * Returns the exit code (base/exit.h): TRI_EXIT_OK, TRI_EXIT_BAD_INPUT (one
 * line naming the culprit), TRI_EXIT_FAILURE (writing the output), or
 * 128 + S when stopped by signal S (nothing written). */
int tri_cmd_tokenize(int argc, char **argv);

#endif
