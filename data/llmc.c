/* llm.c token files (data/llmc.h). */
#include "data/llmc.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "base/err.h"

int tri_llmc_parse(const char *path, const unsigned char *map, size_t size, tri_token_layout *out) {
    const char *f = path;
    const unsigned char *h = map;
    memset(out, 0, sizeof *out);
    if (size < TRI_LLMC_HEADER_BYTES) {
        tri_error("%s: truncated header: the file holds %zu bytes, an llm.c token file "
                  "starts with a %d-byte header",
                  f, size, TRI_LLMC_HEADER_BYTES);
        return -1;
    }
    int32_t magic = tri_ld_i32(h), version = tri_ld_i32(h + 4), count = tri_ld_i32(h + 8);
    int want_version;
    if (magic == TRI_LLMC_MAGIC) {
        want_version = TRI_LLMC_VERSION;
        out->dtype = TRI_DT_U16;
    } else if (magic == TRI_LLMC_MAGIC_U32) {
        want_version = TRI_LLMC_VERSION_U32;
        out->dtype = TRI_DT_U32;
    } else {
        tri_error("%s: bad magic %d at byte offset 0 (llm.c token files have %d)", f, (int)magic, TRI_LLMC_MAGIC);
        return -1;
    }
    if (version != want_version) {
        tri_error("%s: unsupported version %d at byte offset 4 (expected %d for magic %d)", f, (int)version,
                  want_version, (int)magic);
        return -1;
    }
    if (count < 0) {
        tri_error("%s: negative token count %d at byte offset 8", f, (int)count);
        return -1;
    }
    out->token_bytes = tri_dtype_bytes(out->dtype);
    size_t need = TRI_LLMC_HEADER_BYTES + (size_t)count * (size_t)out->token_bytes;
    if (size < need) {
        tri_error("%s: truncated: the header says %d tokens (%zu bytes with the header) "
                  "but the file holds %zu bytes",
                  f, (int)count, need, size);
        return -1;
    }
    if (size > need) {
        tri_error("%s: %zu stray bytes after the %d tokens the header announces (file "
                  "size %zu, expected %zu)",
                  f, size - need, (int)count, size, need);
        return -1;
    }
    out->data_offset = TRI_LLMC_HEADER_BYTES;
    out->tokens = h + TRI_LLMC_HEADER_BYTES;
    out->n_tokens = (size_t)count;
    out->n_docs = 1;
    out->n_seqs = 1;
    return 0;
}

int tri_llmc_write_header(FILE *f, const char *path, int dtype, size_t n_tokens) {
    int32_t header[TRI_LLMC_HEADER_INTS]; /* (256,) little-endian on disk */
    memset(header, 0, sizeof header);
    if (dtype == TRI_DT_U32) {
        header[0] = TRI_LLMC_MAGIC_U32;
        header[1] = TRI_LLMC_VERSION_U32;
    } else {
        header[0] = TRI_LLMC_MAGIC;
        header[1] = TRI_LLMC_VERSION;
    }
    TRI_CHECK(n_tokens <= INT32_MAX); /* the writer refuses more */
    header[2] = (int32_t)n_tokens;
    if (fseek(f, 0, SEEK_SET) != 0 || fwrite(header, sizeof header, 1, f) != 1) {
        tri_error("%s: cannot write the header: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}
