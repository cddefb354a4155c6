/* Megatron-LM indexed datasets: PREFIX.bin (the tokens, no header) and
 * PREFIX.idx ("MMIDIDX", the layout in data/megatron.c). The reader's and
 * the writer's format-specific halves (data/dataset.c, data/tokwriter.c). */
#ifndef TRI_DATA_MEGATRON_H
#define TRI_DATA_MEGATRON_H

#include <stddef.h>
#include <stdint.h>

#include "data/format.h"

/* Checks a Megatron index mapped whole at idx (idx_size bytes) against its
 * .bin (bin_size bytes at bin; either may be NULL when its size is 0): the
 * header, the document indices (from 0, non-decreasing, ending at N), the
 * sequence lengths and pointers (contiguous from 0, covering the .bin
 * exactly). Fills *out. The paths name the files in messages. Returns 0,
 * or -1 after printing "trident: PATH: ..." naming the byte offset at fault. */
int tri_megatron_parse(const char *idx_path, const unsigned char *idx, size_t idx_size, const char *bin_path,
                       const unsigned char *bin, size_t bin_size, tri_token_layout *out);

/* Writes the index of n_seqs sequences of lens[i] tokens of dtype (a token
 * TRI_DT_* code), one document per sequence, to a new file at path
 * (fsynced and closed). Returns 0, or -1 after printing. */
int tri_megatron_write_index(const char *path, int dtype, const int32_t *lens, size_t n_seqs);

#endif
