/* llm.c token files: a header of 256 little-endian int32 (magic, version,
 * token count, the rest zero) followed by the tokens, uint16 for magic
 * 20240520 version 1 (GPT-2) or uint32 for magic 20240801 version 7
 * (llm.c's LLaMA-3 files). One document per file. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "data/dataset.h"
#include "data/dataset_internal.h"

int tri_llmc_parse(tri_dataset *ds) {
    const char *f = ds->bin_path;
    if (ds->bin_size < TRI_LLMC_HEADER_BYTES) {
        tri_data_err(f,
                     "truncated header: the file holds %zu bytes, an llm.c token file "
                     "starts with a %d-byte header",
                     ds->bin_size, TRI_LLMC_HEADER_BYTES);
        return -1;
    }
    const unsigned char *h = ds->bin_map;
    int32_t magic = tri_ld_i32(h), version = tri_ld_i32(h + 4), count = tri_ld_i32(h + 8);
    int want_version;
    if (magic == TRI_LLMC_MAGIC) {
        want_version = TRI_LLMC_VERSION;
        ds->dtype = TRI_DT_U16;
    } else if (magic == TRI_LLMC_MAGIC_U32) {
        want_version = TRI_LLMC_VERSION_U32;
        ds->dtype = TRI_DT_U32;
    } else {
        tri_data_err(f, "bad magic %d at byte offset 0 (llm.c token files have %d)", (int)magic, TRI_LLMC_MAGIC);
        return -1;
    }
    if (version != want_version) {
        tri_data_err(f, "unsupported version %d at byte offset 4 (expected %d for magic %d)", (int)version,
                     want_version, (int)magic);
        return -1;
    }
    if (count < 0) {
        tri_data_err(f, "negative token count %d at byte offset 8", (int)count);
        return -1;
    }
    ds->token_bytes = tri_dtype_bytes(ds->dtype);
    size_t need = TRI_LLMC_HEADER_BYTES + (size_t)count * (size_t)ds->token_bytes;
    if (ds->bin_size < need) {
        tri_data_err(f,
                     "truncated: the header says %d tokens (%zu bytes with the header) "
                     "but the file holds %zu bytes",
                     (int)count, need, ds->bin_size);
        return -1;
    }
    if (ds->bin_size > need) {
        tri_data_err(f,
                     "%zu stray bytes after the %d tokens the header announces (file "
                     "size %zu, expected %zu)",
                     ds->bin_size - need, (int)count, ds->bin_size, need);
        return -1;
    }
    ds->data_offset = TRI_LLMC_HEADER_BYTES;
    ds->tokens = h + TRI_LLMC_HEADER_BYTES;
    ds->n_tokens = (size_t)count;
    ds->n_docs = 1;
    ds->n_seqs = 1;
    return 0;
}

int tri_llmc_write_header(struct tri_tokwriter *w) {
    int32_t header[TRI_LLMC_HEADER_INTS]; /* (256,) little-endian on disk */
    memset(header, 0, sizeof header);
    if (w->dtype == TRI_DT_U32) {
        header[0] = TRI_LLMC_MAGIC_U32;
        header[1] = TRI_LLMC_VERSION_U32;
    } else {
        header[0] = TRI_LLMC_MAGIC;
        header[1] = TRI_LLMC_VERSION;
    }
    TRI_CHECK(w->n_tokens <= INT32_MAX); /* add_doc refuses more */
    header[2] = (int32_t)w->n_tokens;
    if (fseek(w->bin, 0, SEEK_SET) != 0 || fwrite(header, sizeof header, 1, w->bin) != 1) {
        tri_data_err(w->bin_tmp, "cannot write the header: %s", strerror(errno));
        return -1;
    }
    return 0;
}
