/* The safetensors reader (tri_st_open, tri_st_read_piece): the input is the
 * whole file. An accepted file must be readable: every tensor (F32, BF16 or
 * F16) spans its element count times its dtype's size, its corner box,
 * plain and transposed, reads without error, and tri_st_expect finds each
 * tensor under its own name and shape. */
#include <string.h>

#include "model/ckpt/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tri_fuzz_quiet();
    const char *path = tri_fuzz_write(0, "model.safetensors", data, size);
    tri_st_file f;
    if (tri_st_open(&f, path) != 0) return 0;
    FUZZ_ASSERT(f.fd >= 0);
    for (size_t i = 0; i < f.layout.n; i++) {
        const tri_st_entry *e = &f.layout.entries[i];
        /* F32, BF16 or F16: read back as floats */
        FUZZ_ASSERT(e->end - e->begin == (uint64_t)tri_st_numel(e) * tri_dtype_size(e->dtype));
        FUZZ_ASSERT(e->end <= f.layout.data_bytes);
        /* the bottom-right corner, at most 3 x 3 */
        size_t nr = e->rows < 3 ? e->rows : 3, nc = e->cols < 3 ? e->cols : 3;
        float buf[9];
        tri_st_piece p = {e->rows - nr, e->cols - nc, nr, nc, buf, nc, 0};
        FUZZ_ASSERT(tri_st_read_piece(f.fd, &f.layout, (int)i, &p) == 0);
        tri_st_piece t = {e->rows - nr, e->cols - nc, nr, nc, buf, nr ? nr : 1, 1};
        FUZZ_ASSERT(tri_st_read_piece(f.fd, &f.layout, (int)i, &t) == 0);
        FUZZ_ASSERT(tri_st_expect(&f, e->name, e->ndim, e->shape) == (int)i);
    }
    (void)tri_st_get_metadata(&f, "format");
    tri_st_close(&f);
    FUZZ_ASSERT(f.fd == -1);
    return 0;
}
