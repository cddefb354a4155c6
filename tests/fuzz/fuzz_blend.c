/* The data blend spec (data/sampler.c: "a.bin", "0.7:a.bin,0.3:b.bin"): the
 * input is three bytes (seq_len, split fraction, part) and the spec text. It
 * names files of the harness's own directory only (a spec with '/' is
 * skipped): a.bin (llm.c, 300 tokens), b.bin (llm.c, 1000 tokens) and the
 * Megatron pair m.idx + m.bin (500 tokens in 3 documents), all with ids below
 * 256. An accepted spec must place every sample in one of its files, inside
 * that file's windows, and fill batches with ids of the vocabulary. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/sampler.h"
#include "tests/fuzz/fuzz_util.h"

static void write_llmc(const char *name, size_t n, unsigned seed) {
    size_t bytes = 1024 + 2 * n;
    unsigned char *b = calloc(bytes, 1);
    FUZZ_ASSERT(b != NULL);
    int32_t h[3] = {20240520, 1, (int32_t)n};
    memcpy(b, h, sizeof h);
    for (size_t i = 0; i < n; i++) b[1024 + 2 * i] = (unsigned char)(i * 31 + seed);
    tri_fuzz_write(0, name, b, bytes);
    free(b);
}

static void write_megatron(void) {
    const int32_t lens[4] = {100, 150, 50, 200};
    unsigned char idx[34 + 4 * 4 + 8 * 4 + 8 * 4];
    uint64_t version = 1, n = 4, d = 4;
    memcpy(idx, "MMIDIDX\0\0", 9);
    memcpy(idx + 9, &version, 8);
    idx[17] = 8; /* uint16 */
    memcpy(idx + 18, &n, 8);
    memcpy(idx + 26, &d, 8);
    int64_t ptr = 0, docs[4] = {0, 1, 3, 4};
    for (int i = 0; i < 4; i++) {
        memcpy(idx + 34 + 4 * i, &lens[i], 4);
        memcpy(idx + 50 + 8 * i, &ptr, 8);
        ptr += 2 * lens[i];
        memcpy(idx + 82 + 8 * i, &docs[i], 8);
    }
    tri_fuzz_write(0, "m.idx", idx, sizeof idx);
    unsigned char *bin = calloc((size_t)ptr, 1);
    FUZZ_ASSERT(bin != NULL);
    for (int64_t i = 0; i < ptr / 2; i++) bin[2 * i] = (unsigned char)(i * 7 + 3);
    tri_fuzz_write(0, "m.bin", bin, (size_t)ptr);
    free(bin);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tri_fuzz_quiet();
    static int ready;
    if (!ready) {
        write_llmc("a.bin", 300, 1);
        write_llmc("b.bin", 1000, 2);
        write_megatron();
        /* specs name files relative to the working directory; libFuzzer's own
         * paths (corpus, artifacts) are absolute in scripts/fuzz.sh */
        FUZZ_ASSERT(chdir(tri_fuzz_dir()) == 0);
        ready = 1;
    }
    if (size < 3) return 0;
    int seq_len = 1 + data[0] % 64;
    double frac = data[1] < 128 ? 0.0 : (data[1] - 127) / 130.0; /* [0, 1) */
    int part = frac > 0 && (data[2] & 1) ? TRI_SPLIT_VAL : TRI_SPLIT_TRAIN;
    char *spec = tri_fuzz_cstr(data + 3, size - 3);
    if (strchr(spec, '/') != NULL || strlen(spec) != size - 3) {
        free(spec);
        return 0;
    }
    tri_sampler s;
    if (tri_sampler_init_split(&s, spec, seq_len, 256, 99, frac, part) == 0) {
        FUZZ_ASSERT(s.n_sources >= 1 && s.period >= 1 && s.total_windows >= 1);
        for (uint64_t k = 0; k < 64; k++) {
            int src = -1;
            uint64_t w = UINT64_MAX;
            tri_sampler_locate(&s, k * 7919, &src, &w);
            FUZZ_ASSERT(src >= 0 && src < s.n_sources);
            const tri_sampler_source *so = &s.src[src];
            FUZZ_ASSERT(w >= so->first_window && w < so->first_window + so->n_windows);
            FUZZ_ASSERT(w * (uint64_t)seq_len + (uint64_t)seq_len + 1 <= so->ds.n_tokens);
        }
        int32_t *in = malloc(4 * (size_t)seq_len * sizeof *in), *tg = malloc(4 * (size_t)seq_len * sizeof *tg);
        FUZZ_ASSERT(in && tg);
        FUZZ_ASSERT(tri_sampler_fill(&s, 3, 8, 2, 4, in, tg) == 0);
        for (size_t i = 0; i < 4 * (size_t)seq_len; i++)
            FUZZ_ASSERT(in[i] >= 0 && in[i] < 256 && tg[i] >= 0 && tg[i] < 256);
        size_t nb = tri_sampler_eval_batches(&s, 4);
        FUZZ_ASSERT(nb >= 1);
        FUZZ_ASSERT(tri_sampler_fill_eval(&s, nb - 1, 4, in, tg) == 0);
        for (size_t i = 0; i < 4 * (size_t)seq_len; i++) FUZZ_ASSERT(in[i] >= 0 && in[i] < 256);
        free(in);
        free(tg);
        tri_sampler_free(&s);
    }
    free(spec);
    return 0;
}
