/* A reader of TensorBoard event files for the tests, written apart from
 * src/base/tfevents.c: the record framing checked with a bit-at-a-time
 * CRC-32C (not src/base/crc32c.c's table or instruction) and a mask written
 * as a 64-bit rotation, and a protobuf decoder of the Event subset that
 * skips fields it does not know by their wire type, as any protobuf parser
 * would. */
#ifndef TT_TFEVENTS_READ_H
#define TT_TFEVENTS_READ_H

#include <stddef.h>
#include <stdint.h>

typedef struct tt_tb_scalar {
    int64_t step;
    double wall_time;
    char tag[256];
    float value;
} tt_tb_scalar;

typedef struct tt_tb_file {
    int records;            /* records read, the file-version one included */
    char file_version[64];  /* the first record's file_version ("" if none) */
    double first_wall_time; /* the first record's wall_time                */
    int n_scalars;          /* every Summary.Value with a simple_value, in order */
    tt_tb_scalar *scalars;
    int n_starts; /* SessionLog START events, their steps       */
    int64_t start_steps[16];
    char why[256]; /* what was wrong, on failure                 */
} tt_tb_file;

/* Masked CRC-32C from the definitions (bitwise CRC, rotate-by-15 mask). */
uint32_t tt_tb_masked_crc(const void *data, size_t n);

/* Reads path: every record's length and both masked CRCs checked, every
 * Event decoded. Returns 0, or -1 with f->why (the record and byte offset
 * at fault). tt_tb_free releases f->scalars. */
int tt_tb_read(const char *path, tt_tb_file *f);
void tt_tb_free(tt_tb_file *f);

#endif
