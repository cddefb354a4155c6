/* safetensors files written and read in pieces, by several ranks at once.
 *
 * File format (little-endian): u64 N, then N bytes of JSON header
 *   {"__metadata__": {str: str}, NAME: {"dtype": "F32", "shape": [..],
 *                                       "data_offsets": [begin, end]}, ...}
 * padded with spaces so that 8 + N is a multiple of 8, then the data section;
 * begin/end are byte offsets into the data section.
 *
 * Writing (a checkpoint): every rank builds the same tri_st_layout from the
 * config alone (same names, shapes, order), so all ranks agree on every
 * tensor's byte range without talking. ONE rank calls tri_st_create, which
 * writes the header and sizes the file; after a barrier, every rank opens the
 * file O_WRONLY and writes the pieces it owns with tri_st_write_piece
 * (positioned writes, so the ranks never overlap or seek). Data nobody
 * writes reads back as zeros. The creator and the writers must pass the
 * same layout. The writers need not know the metadata: the data section is
 * the file's tail, so its start follows from the file's length (and is
 * checked against the header's own N when the fd is readable).
 *
 * Reading (a checkpoint, or a file from another tool): tri_st_open parses
 * and validates the header into a layout with offsets; tri_st_read_piece
 * reads any box of any tensor.
 *
 * Pieces address every tensor through its 2-D view [rows, cols]: cols is the
 * last dimension, rows the product of the others (a 1-D tensor [n] is
 * [1, n]; a 0-D scalar is [1, 1]).
 *
 * Dtypes F32, BF16 and F16. Pieces are fp32 in memory whatever the file
 * holds: a BF16 / F16 tensor is rounded to nearest even as it is written
 * (exact for values of that type, e.g. 16-bit parameters widened to fp32)
 * and widened exactly as it is read. All functions print one line starting
 * "trident: " naming the file and the tensor, and return -1, on error.
 */
#ifndef TRI_MODEL_SAFETENSORS_H
#define TRI_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

#define TRI_ST_MAX_DIM 8
/* Header limit when reading (the same bound the reference reader uses). */
#define TRI_ST_MAX_HEADER ((uint64_t)100000000)
/* Bound of the staging buffer used by strided and transposed pieces. */
#define TRI_ST_STAGE_BYTES ((size_t)4 << 20)

typedef struct tri_st_entry {
    char *name;                   /* owned                                  */
    tri_dtype dtype;              /* TRI_F32, TRI_BF16 or TRI_F16           */
    int ndim;                     /* 0 .. TRI_ST_MAX_DIM                    */
    size_t shape[TRI_ST_MAX_DIM]; /* global shape, as stored                */
    size_t rows, cols;            /* the 2-D view pieces address            */
    uint64_t begin, end;          /* byte range within the data section     */
} tri_st_entry;

typedef struct tri_st_layout {
    tri_st_entry *entries; /* (n) in add order (file: header order)  */
    size_t n, cap;
    uint64_t data_bytes; /* length of the data section             */
} tri_st_layout;

/* A zeroed struct ({0}) is an empty layout too. */
void tri_st_layout_init(tri_st_layout *L);
/* Appends a tensor of dtype F32, shape[ndim] (ndim 0 .. TRI_ST_MAX_DIM; the
 * model uses 1 and 2), placed right after the previous one. Returns its
 * index, or -1 (duplicate or empty name, bad ndim, size overflow, no memory). */
int tri_st_layout_add(tri_st_layout *L, const char *name, int ndim, const size_t *shape);
/* The same with the tensor's dtype in the file: TRI_F32, TRI_BF16 or TRI_F16
 * (anything else: -1). */
int tri_st_layout_add_dtype(tri_st_layout *L, const char *name, tri_dtype dtype, int ndim, const size_t *shape);
/* "F32", "BF16", "F16" (safetensors' spelling); NULL for other dtypes. */
const char *tri_st_dtype_name(tri_dtype t);
/* Index of the tensor called `name`, or -1 (prints nothing). */
int tri_st_layout_find(const tri_st_layout *L, const char *name);
/* NULL-safe; frees the names and zeroes *L. */
void tri_st_layout_free(tri_st_layout *L);
/* Elements of entry e (rows * cols). */
size_t tri_st_numel(const tri_st_entry *e);

/* Creates (or truncates) `path`, writes the header for L and sizes the file
 * to its final length (the data reads as zeros until written). `metadata` is
 * NULL or the text of a JSON object whose values are all strings; it is
 * stored as "__metadata__". Call it on ONE rank, before any writer opens the
 * file. Does not fsync (tri_ckpt_commit does). */
int tri_st_create(const char *path, const tri_st_layout *L, const char *metadata);

/* A box of one tensor's 2-D view: rows [r0, r0+nr), cols [c0, c0+nc).
 *   transposed == 0: box element (i, j) is buf[i*ld + j]   (buf: nr x ld, ld >= nc)
 *   transposed != 0: box element (i, j) is buf[j*ld + i]   (buf: nc x ld, ld >= nr)
 * The transposed form is how a linear weight kept [out, in] in memory is
 * stored [in, out] (Hugging Face Conv1D): a rank's [out_slice, in] block is
 * the box rows [0, in), cols [out_slice) with transposed = 1, ld = in.
 * A box with nr == 0 or nc == 0 is a no-op (buf may then be NULL). */
typedef struct tri_st_piece {
    size_t r0, c0, nr, nc;
    float *buf;
    size_t ld;
    int transposed;
} tri_st_piece;

/* Writes piece p of tensor `entry` into the file open on fd (writable), which
 * must have been made by tri_st_create with the same layout (checked: the
 * file's length must leave room for a header, and when fd is also readable
 * the header's length field must match; O_WRONLY is fine). A full-width
 * contiguous box is one pwrite; a column range is one pwrite per row;
 * strided full-width and transposed boxes go through a staging buffer of at
 * most TRI_ST_STAGE_BYTES. Safe to call from several processes on the same
 * file for disjoint boxes. buf is only read. */
int tri_st_write_piece(int fd, const tri_st_layout *L, int entry, const tri_st_piece *p);
/* Reads piece p of tensor `entry` into p->buf (overwrites the box only; the
 * padding between ld and the box width is left as it was). */
int tri_st_read_piece(int fd, const tri_st_layout *L, int entry, const tri_st_piece *p);

/* A safetensors file open for reading. */
typedef struct tri_st_file {
    int fd;               /* -1 when closed                                */
    char *path;           /* owned, for messages                           */
    uint64_t header_len;  /* N; the data section starts at 8 + N           */
    tri_st_layout layout; /* every tensor, in header order, with offsets   */
    void *metadata;       /* cJSON object of "__metadata__", or NULL       */
} tri_st_file;

/* Opens and validates `path`: header length sane and inside the file, JSON
 * valid, every tensor F32, BF16 or F16 with a shape whose size matches its data_offsets,
 * inside the data section, no two tensors overlapping, no bytes after the
 * last tensor, "__metadata__" an object of strings. On error *f is left
 * closed (tri_st_close not needed). */
int tri_st_open(tri_st_file *f, const char *path);
/* NULL-safe; closes the fd, frees everything and zeroes *f (fd = -1). */
void tri_st_close(tri_st_file *f);
/* The string value of "__metadata__"[key], or NULL when absent. The pointer
 * lives until tri_st_close. */
const char *tri_st_get_metadata(const tri_st_file *f, const char *key);
/* Index of tensor `name` in f, checked against the expected shape[ndim].
 * Returns -1 with a message naming the file, the tensor and both shapes
 * (or saying it is missing). */
int tri_st_expect(const tri_st_file *f, const char *name, int ndim, const size_t *shape);

#endif
