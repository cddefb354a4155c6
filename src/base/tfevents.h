/* TensorBoard event files, written from the format's definition (no protobuf
 * library): what TensorBoard, TensorFlow's summary readers and tbparse read.
 *
 * A file is a sequence of TFRecords, each
 *     uint64 length (little endian) | uint32 masked CRC-32C of those 8 bytes |
 *     the data (length bytes)      | uint32 masked CRC-32C of the data
 * with mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (uint32 arithmetic).
 * Each record's data is one serialised tensorflow.Event:
 *     Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
 *               Summary summary = 5; SessionLog session_log = 7; }
 *     Summary { repeated Value value = 1; }
 *     Value   { string tag = 1; float simple_value = 2; }
 *     SessionLog { enum status = 1; }   (START = 1)
 * The first record is Event{wall_time, file_version "brain.Event:2"}.
 *
 * A pure writer: it knows tags, steps and floats, not what they mean. Every
 * record is written with one fwrite and flushed, so a crash loses at most
 * the record being written (a reader stops at a torn last record). */
#ifndef TRI_BASE_TFEVENTS_H
#define TRI_BASE_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TRI_TFEVENTS_VERSION "brain.Event:2"

typedef struct tri_tfevents {
    FILE *f;         /* NULL when closed                                    */
    char path[1400]; /* <dir>/events.out.tfevents.<unix time>.<hostname>[.k] */
} tri_tfevents;

/* The masked CRC-32C of data[n] (the checksum of a record's length and data). */
uint32_t tri_tfevents_masked_crc(const void *data, size_t n);

/* Frames one record: out[n + 16] gets length, its masked CRC, data[n], the
 * data's masked CRC. */
void tri_tfevents_frame(uint8_t *out, const void *data, size_t n);

/* Creates a new event file in dir (which must exist):
 * events.out.tfevents.<floor(wall_time)>.<hostname>, or with a suffix .1,
 * .2, ... when that name is taken (two starts in the same second: an
 * existing file is never truncated or appended to), and writes the
 * file-version record. Returns 0, or -1 said (tri_error names the path). */
int tri_tfevents_open(tri_tfevents *w, const char *dir, double wall_time);

/* One Event at `step` whose Summary holds n scalars (tags[i], values[i]);
 * n may be 0 (an empty summary). Tags are UTF-8 text. Returns 0, or -1 said. */
int tri_tfevents_scalars(tri_tfevents *w, double wall_time, int64_t step, const char *const *tags, const float *values,
                         size_t n);

/* An Event{step, session_log{status START}}: the run (re)started at `step`.
 * On every such record after a log dir's first, TensorBoard's readers drop
 * the points seen so far at steps >= step (what a crashed run logged after
 * its last checkpoint, which the resumed run logs again). Returns 0, or -1
 * said. */
int tri_tfevents_session_start(tri_tfevents *w, double wall_time, int64_t step);

/* Closes the file. NULL-safe; returns 0, or -1 said when the last write
 * fails; zeroes *w. */
int tri_tfevents_close(tri_tfevents *w);

#endif
