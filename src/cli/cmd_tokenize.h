/* `trident tokenize`: train a byte-level BPE tokenizer, encode text into
 * token files, decode token files back to text (src/cli/cmd_tokenize.c). */
#ifndef TRI_CMD_TOKENIZE_H
#define TRI_CMD_TOKENIZE_H

/* argv[0] == "tokenize".
 *   tokenize train --vocab-size N --out tok.json [--threads K] CORPUS...
 *   tokenize encode (--tokenizer tok.json | --bytes) --format llmc|megatron --out PREFIX
 *                   [--jsonl] [--threads K] [--quiet] INPUT...
 *   tokenize decode (--tokenizer tok.json | --bytes) [--format llmc|megatron] INPUT
 * Returns the exit code: 0 ok, 2 bad input (one line naming the culprit),
 * 1 runtime failure (writing the output). */
int tri_cmd_tokenize(int argc, char **argv);

#endif
