/* llm.c token files: a header of 256 little-endian int32 (magic, version,
 * token count, the rest zero) followed by the tokens, uint16 for magic
 * 20240520 version 1 (GPT-2) or uint32 for magic 20240801 version 7
 * (llm.c's LLaMA-3 files). One document per file. The reader's and the
 * writer's format-specific halves (data/dataset.c, data/tokwriter.c). */
#ifndef TRI_DATA_LLMC_H
#define TRI_DATA_LLMC_H

#include <stddef.h>
#include <stdio.h>

#include "data/format.h"

/* Checks the header of an llm.c token file mapped whole at map (size bytes;
 * NULL when size is 0) against its size and fills *out. path names the file
 * in messages. Returns 0, or -1 after printing "trident: PATH: ..." naming
 * the byte offset or the sizes at fault (*out then undefined). */
int tri_llmc_parse(const char *path, const unsigned char *map, size_t size, tri_token_layout *out);

/* Writes the final header of a file of n_tokens (<= INT32_MAX) tokens of
 * dtype TRI_DT_U16 or TRI_DT_U32 at offset 0 of f, an open file that path
 * names. Returns 0, or -1 after printing. */
int tri_llmc_write_header(FILE *f, const char *path, int dtype, size_t n_tokens);

#endif
