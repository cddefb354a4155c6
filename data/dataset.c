/* Token-file reader: path resolution, format detection by magic number,
 * memory mapping, the parallel vocabulary scan, and the stream/document
 * accessors shared by both formats. The format-specific header and index
 * checks live in data/llmc.c and data/megatron.c. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/file.h"
#include "base/str.h"
#include "data/dataset.h"
#include "data/format.h"
#include "data/hash.h"
#include "data/llmc.h"
#include "data/megatron.h"

/* ---- files ------------------------------------------------------------ */

static int is_regular_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Reads up to `cap` leading bytes of `path` into buf. Returns the count, or
 * -1 after printing. */
static long peek_file(const char *path, unsigned char *buf, size_t cap) {
    int fd = tri_open_regular(path, "token file", NULL);
    if (fd < 0) return -1;
    size_t got = 0;
    while (got < cap) {
        ssize_t r = read(fd, buf + got, cap - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            tri_error("%s: cannot read: %s", path, strerror(errno));
            close(fd);
            return -1;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    close(fd);
    return (long)got;
}

/* Maps the whole file read-only. An empty file gives *map == NULL. A named
 * pipe (e.g. a PREFIX.bin beside a real PREFIX.idx) is refused at once. */
static int map_file(const char *path, void **map, size_t *size) {
    *map = NULL;
    *size = 0;
    size_t bytes = 0;
    int fd = tri_open_regular(path, "token file", &bytes);
    if (fd < 0) return -1;
    if (bytes > 0) {
        void *p = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            tri_error("%s: cannot mmap %zu bytes: %s", path, bytes, strerror(errno));
            close(fd);
            return -1;
        }
        *map = p;
        *size = bytes;
    }
    if (close(fd) != 0) {
        tri_error("%s: cannot close: %s", path, strerror(errno));
        if (*map) munmap(*map, *size);
        *map = NULL;
        *size = 0;
        return -1;
    }
    return 0;
}

/* Decides the format and fills ds->bin_path / idx_path / format. */
static int resolve_paths(tri_dataset *ds, const char *path) {
    size_t len = strlen(path);
    if (is_regular_file(path)) {
        unsigned char head[16];
        long got = peek_file(path, head, sizeof head);
        if (got < 0) return -1;
        if (got >= TRI_MMIDX_MAGIC_LEN && memcmp(head, TRI_MMIDX_MAGIC, TRI_MMIDX_MAGIC_LEN) == 0) {
            if (!tri_ends_with(path, ".idx")) {
                tri_error("%s: is a Megatron index but not named PREFIX.idx, so its "
                          "PREFIX.bin cannot be found",
                          path);
                return -1;
            }
            ds->format = TRI_DATA_MEGATRON;
            snprintf(ds->idx_path, sizeof ds->idx_path, "%s", path);
            snprintf(ds->bin_path, sizeof ds->bin_path, "%.*s.bin", (int)(len - 4), path);
            return 0;
        }
        if (got >= 4 && (tri_ld_i32(head) == TRI_LLMC_MAGIC || tri_ld_i32(head) == TRI_LLMC_MAGIC_U32)) {
            ds->format = TRI_DATA_LLMC;
            snprintf(ds->bin_path, sizeof ds->bin_path, "%s", path);
            return 0;
        }
        if (tri_ends_with(path, ".bin")) {
            char idx[TRI_DATA_PATH_MAX];
            snprintf(idx, sizeof idx, "%.*s.idx", (int)(len - 4), path);
            if (is_regular_file(idx)) {
                ds->format = TRI_DATA_MEGATRON;
                snprintf(ds->idx_path, sizeof ds->idx_path, "%s", idx);
                snprintf(ds->bin_path, sizeof ds->bin_path, "%s", path);
                return 0;
            }
        }
        if (got < 4)
            tri_error("%s: not a token file: %ld bytes is too short for an llm.c header, "
                      "and there is no Megatron PREFIX.idx beside it",
                      path, got);
        else
            tri_error("%s: not a token file: bad magic %d at byte offset 0 (llm.c token "
                      "files start with %d) and there is no Megatron PREFIX.idx "
                      "beside it",
                      path, (int)tri_ld_i32(head), TRI_LLMC_MAGIC);
        return -1;
    }
    struct stat st;
    if (stat(path, &st) == 0) {
        tri_error("%s: not a regular file", path);
        return -1;
    }
    int why = errno; /* ENOENT: maybe a Megatron prefix; else the real reason (a loop, a permission) */
    char idx[TRI_DATA_PATH_MAX];
    snprintf(idx, sizeof idx, "%s.idx", path);
    if (is_regular_file(idx)) {
        ds->format = TRI_DATA_MEGATRON;
        snprintf(ds->idx_path, sizeof ds->idx_path, "%s", idx);
        snprintf(ds->bin_path, sizeof ds->bin_path, "%s.bin", path);
        return 0;
    }
    if (why != ENOENT)
        tri_error("%s: cannot open: %s", path, strerror(why));
    else
        tri_error("%s: no such file (nor a Megatron pair %s.idx + %s.bin)", path, path, path);
    return -1;
}

/* ---- token access ------------------------------------------------------ */

static int64_t token_at(const tri_dataset *ds, size_t i) {
    const unsigned char *p = ds->tokens;
    switch (ds->dtype) {
    case TRI_DT_U8: return p[i];
    case TRI_DT_I8: return (int8_t)p[i];
    case TRI_DT_U16: return ((const uint16_t *)(const void *)p)[i];
    case TRI_DT_I16: return ((const int16_t *)(const void *)p)[i];
    case TRI_DT_I32: return ((const int32_t *)(const void *)p)[i];
    case TRI_DT_U32: return ((const uint32_t *)(const void *)p)[i];
    case TRI_DT_I64: return ((const int64_t *)(const void *)p)[i];
    default: TRI_CHECK(!"unsupported dtype"); return 0;
    }
}

/* Min and max of tokens [lo, hi) (hi > lo). Typed loops so that the
 * compiler vectorises them; token 0 is 8-byte aligned in both formats. */
#define MINMAX_LOOP(T)                                    \
    do {                                                  \
        const T *v = (const T *)(const void *)ds->tokens; \
        T mn = v[lo], mx = v[lo];                         \
        for (size_t i = lo; i < hi; i++) {                \
            mn = v[i] < mn ? v[i] : mn;                   \
            mx = v[i] > mx ? v[i] : mx;                   \
        }                                                 \
        *pmin = (int64_t)mn;                              \
        *pmax = (int64_t)mx;                              \
    } while (0)

static void chunk_minmax(const tri_dataset *ds, size_t lo, size_t hi, int64_t *pmin, int64_t *pmax) {
    switch (ds->dtype) {
    case TRI_DT_U8: MINMAX_LOOP(uint8_t); break;
    case TRI_DT_I8: MINMAX_LOOP(int8_t); break;
    case TRI_DT_U16: MINMAX_LOOP(uint16_t); break;
    case TRI_DT_I16: MINMAX_LOOP(int16_t); break;
    case TRI_DT_I32: MINMAX_LOOP(int32_t); break;
    case TRI_DT_U32: MINMAX_LOOP(uint32_t); break;
    case TRI_DT_I64: MINMAX_LOOP(int64_t); break;
    default: TRI_CHECK(!"unsupported dtype");
    }
}

#define SCAN_CHUNK ((size_t)1 << 18) /* tokens per parallel work item */

/* Index of the first token outside [0, vocab), or SIZE_MAX if none. */
static size_t first_bad_token(const tri_dataset *ds, int64_t vocab) {
    size_t n = ds->n_tokens;
    size_t n_chunks = (n + SCAN_CHUNK - 1) / SCAN_CHUNK;
    size_t first = SIZE_MAX;
#pragma omp parallel for schedule(dynamic, 4) reduction(min : first)
    for (size_t c = 0; c < n_chunks; c++) {
        size_t lo = c * SCAN_CHUNK;
        size_t hi = lo + SCAN_CHUNK < n ? lo + SCAN_CHUNK : n;
        if (lo >= first) continue; /* an earlier bad token is already known here */
        int64_t mn, mx;
        chunk_minmax(ds, lo, hi, &mn, &mx);
        if (mn >= 0 && mx < vocab) continue;
        for (size_t i = lo; i < hi; i++) {
            int64_t t = token_at(ds, i);
            if (t < 0 || t >= vocab) {
                if (i < first) first = i;
                break;
            }
        }
    }
    return first;
}

void tri_dataset_minmax(const tri_dataset *ds, int64_t *min_id, int64_t *max_id) {
    TRI_CHECK(ds != NULL);
    size_t n = ds->n_tokens;
    size_t n_chunks = (n + SCAN_CHUNK - 1) / SCAN_CHUNK;
    int64_t gmin = INT64_MAX, gmax = INT64_MIN;
#pragma omp parallel for schedule(dynamic, 4) reduction(min : gmin) reduction(max : gmax)
    for (size_t c = 0; c < n_chunks; c++) {
        size_t lo = c * SCAN_CHUNK;
        size_t hi = lo + SCAN_CHUNK < n ? lo + SCAN_CHUNK : n;
        int64_t mn, mx;
        chunk_minmax(ds, lo, hi, &mn, &mx);
        gmin = mn < gmin ? mn : gmin;
        gmax = mx > gmax ? mx : gmax;
    }
    if (n == 0) gmin = gmax = 0;
    if (min_id) *min_id = gmin;
    if (max_id) *max_id = gmax;
}

static int check_vocab(const tri_dataset *ds, int vocab_size) {
    if (tri_dtype_max(ds->dtype) < (int64_t)vocab_size - 1) {
        tri_error("%s: token dtype %s holds ids up to %lld, too small for "
                  "vocab_size %d",
                  ds->bin_path, tri_dtype_name(ds->dtype), (long long)tri_dtype_max(ds->dtype), vocab_size);
        return -1;
    }
    size_t bad = first_bad_token(ds, vocab_size);
    if (bad != SIZE_MAX) {
        tri_error("%s: token id %lld at byte offset %zu (token %zu) is outside "
                  "the vocabulary [0, %d)",
                  ds->bin_path, (long long)token_at(ds, bad), ds->data_offset + bad * (size_t)ds->token_bytes, bad,
                  vocab_size);
        return -1;
    }
    return 0;
}

/* ---- fingerprint ------------------------------------------------------- */

#define FP_EDGE    ((size_t)64 << 10) /* bytes hashed at each end                */
#define FP_BLOCK   ((size_t)4 << 10)  /* bytes of each sample in between        */
#define FP_SAMPLES 64

/* See tri_dataset.bin_fingerprint. Files up to 2 FP_EDGE + FP_SAMPLES
 * FP_BLOCK bytes are hashed whole. */
static uint64_t fingerprint(const unsigned char *p, size_t size) {
    uint64_t h = tri_mix64(0x74726964656e74ull ^ (uint64_t)size);
    if (size <= 2 * FP_EDGE + FP_SAMPLES * FP_BLOCK) return tri_mix64(h ^ tri_hash_bytes(p, size));
    h = tri_mix64(h ^ tri_hash_bytes(p, FP_EDGE));
    size_t span = size - 2 * FP_EDGE - FP_BLOCK; /* sample starts lie in [FP_EDGE, FP_EDGE + span] */
    for (size_t k = 0; k < FP_SAMPLES; k++) {
        size_t off = FP_EDGE + (size_t)((unsigned __int128)span * k / (FP_SAMPLES - 1));
        h = tri_mix64(h ^ tri_hash_bytes(p + off, FP_BLOCK));
    }
    return tri_mix64(h ^ tri_hash_bytes(p + size - FP_EDGE, FP_EDGE));
}

/* ---- open / close ------------------------------------------------------ */

int tri_dataset_open(tri_dataset *ds, const char *path, int vocab_size) {
    TRI_CHECK(ds != NULL && path != NULL);
    memset(ds, 0, sizeof *ds);
    const uint16_t one = 1;
    if (*(const unsigned char *)&one != 1) {
        tri_error("%s: token files are little-endian; this host is not", path);
        return -1;
    }
    size_t len = strlen(path);
    if (len == 0) {
        tri_error("(empty path): no token file named");
        return -1;
    }
    if (len + 5 > TRI_DATA_PATH_MAX) {
        tri_error("%s: path longer than %d bytes", path, TRI_DATA_PATH_MAX - 5);
        return -1;
    }
    if (vocab_size < 0) {
        tri_error("%s: vocab_size %d is negative", path, vocab_size);
        return -1;
    }
    memcpy(ds->path, path, len + 1);
    if (resolve_paths(ds, path) != 0) goto fail;
    if (ds->format == TRI_DATA_MEGATRON) {
        if (map_file(ds->idx_path, &ds->idx_map, &ds->idx_size) != 0) goto fail;
    }
    if (map_file(ds->bin_path, &ds->bin_map, &ds->bin_size) != 0) goto fail;
    tri_token_layout lay;
    int rc = ds->format == TRI_DATA_LLMC ? tri_llmc_parse(ds->bin_path, ds->bin_map, ds->bin_size, &lay)
                                         : tri_megatron_parse(ds->idx_path, ds->idx_map, ds->idx_size, ds->bin_path,
                                                              ds->bin_map, ds->bin_size, &lay);
    if (rc != 0) goto fail;
    ds->dtype = lay.dtype;
    ds->token_bytes = lay.token_bytes;
    ds->n_tokens = lay.n_tokens;
    ds->n_docs = lay.n_docs;
    ds->n_seqs = lay.n_seqs;
    ds->data_offset = lay.data_offset;
    ds->tokens = lay.tokens;
    ds->seq_ptr = lay.seq_ptr;
    ds->doc_idx = lay.doc_idx;
    ds->bin_fingerprint = fingerprint(ds->bin_map, ds->bin_size);
    ds->idx_fingerprint = ds->format == TRI_DATA_MEGATRON ? fingerprint(ds->idx_map, ds->idx_size) : 0;
    if (vocab_size > 0 && check_vocab(ds, vocab_size) != 0) goto fail;
    return 0;
fail:
    tri_dataset_close(ds);
    return -1;
}

void tri_dataset_close(tri_dataset *ds) {
    if (!ds) return;
    if (ds->bin_map) munmap(ds->bin_map, ds->bin_size);
    if (ds->idx_map) munmap(ds->idx_map, ds->idx_size);
    memset(ds, 0, sizeof *ds);
}

/* ---- reads that survive a file truncated under the mapping -------------- */

/* A page of a mapping that lies past the end of its (since truncated) file
 * raises SIGBUS when touched. tri_dataset_read copies tokens with
 * guard_jmp pointing at its own sigsetjmp buffer; the handler jumps back
 * there, and the read reports the file instead of the process dying. A
 * SIGBUS anywhere else goes to whatever handled it before (Open MPI's
 * backtrace printer, or the default action). This state is per thread or
 * written once; a signal handler can reach nothing else. */
static _Thread_local sigjmp_buf *volatile guard_jmp;
static struct sigaction prev_sigbus;
static pthread_once_t guard_once = PTHREAD_ONCE_INIT;

static void on_sigbus(int sig, siginfo_t *info, void *uctx) {
    if (guard_jmp) siglongjmp(*guard_jmp, 1);
    if (prev_sigbus.sa_flags & SA_SIGINFO) {
        prev_sigbus.sa_sigaction(sig, info, uctx);
        return;
    }
    if (prev_sigbus.sa_handler != SIG_DFL && prev_sigbus.sa_handler != SIG_IGN) {
        prev_sigbus.sa_handler(sig);
        return;
    }
    /* the default action: die of SIGBUS, as without this handler */
    signal(SIGBUS, SIG_DFL);
    raise(SIGBUS);
}

static void guard_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sigemptyset(&sa.sa_mask);
    /* SA_NODEFER: siglongjmp (which does not restore the mask) must not
     * leave SIGBUS blocked */
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigaction(SIGBUS, &sa, &prev_sigbus);
}

static void report_truncated(const tri_dataset *ds, size_t start, size_t n) {
    size_t lo = ds->data_offset + start * (size_t)ds->token_bytes;
    size_t hi = lo + n * (size_t)ds->token_bytes;
    struct stat st;
    char now[96];
    if (stat(ds->bin_path, &st) == 0)
        snprintf(now, sizeof now, "%lld bytes now", (long long)st.st_size);
    else
        snprintf(now, sizeof now, "now: %s", strerror(errno));
    tri_error("%s: truncated under the running job: %zu bytes when opened, %s, so tokens "
              "[%zu, %zu) (bytes [%zu, %zu)) cannot be read; token files must not be "
              "rewritten while a job reads them (restore it, then resume)",
              ds->bin_path, ds->bin_size, now, start, start + n, lo, hi);
}

#define READ_LOOP(T)                                              \
    do {                                                          \
        const T *v = (const T *)(const void *)ds->tokens + start; \
        for (size_t i = 0; i < n; i++) out[i] = (int32_t)v[i];    \
    } while (0)

int tri_dataset_read(const tri_dataset *ds, size_t start, size_t n, int32_t *out) {
    TRI_CHECK(ds != NULL && (out != NULL || n == 0));
    TRI_CHECK(start <= ds->n_tokens && n <= ds->n_tokens - start);
    if (n == 0) return 0;
    pthread_once(&guard_once, guard_install);
    sigjmp_buf jb;
    sigjmp_buf *outer = guard_jmp;
    /* savemask 0: no system call; SA_NODEFER keeps the mask right */
    if (sigsetjmp(jb, 0) != 0) {
        guard_jmp = outer;
        report_truncated(ds, start, n);
        return -1;
    }
    guard_jmp = &jb;
    switch (ds->dtype) {
    case TRI_DT_U8: READ_LOOP(uint8_t); break;
    case TRI_DT_I8: READ_LOOP(int8_t); break;
    case TRI_DT_U16: READ_LOOP(uint16_t); break;
    case TRI_DT_I16: READ_LOOP(int16_t); break;
    case TRI_DT_I32: READ_LOOP(int32_t); break;
    case TRI_DT_U32: READ_LOOP(uint32_t); break;
    case TRI_DT_I64: READ_LOOP(int64_t); break;
    default: TRI_CHECK(!"unsupported dtype");
    }
    guard_jmp = outer;
    return 0;
}

/* Stream position of Megatron sequence j (j == n_seqs: the end). Valid
 * because open checked that the pointers are contiguous from 0. */
static size_t seq_start(const tri_dataset *ds, uint64_t j) {
    if (j >= ds->n_seqs) return ds->n_tokens;
    return (size_t)tri_ld_i64(ds->seq_ptr + 8 * j) / (size_t)ds->token_bytes;
}

int tri_dataset_doc(const tri_dataset *ds, size_t doc, size_t *start, size_t *len) {
    TRI_CHECK(ds != NULL && start != NULL && len != NULL);
    if (doc >= ds->n_docs) return -1;
    if (ds->format == TRI_DATA_LLMC) {
        *start = 0;
        *len = ds->n_tokens;
        return 0;
    }
    uint64_t s = (uint64_t)tri_ld_i64(ds->doc_idx + 8 * doc);
    uint64_t e = (uint64_t)tri_ld_i64(ds->doc_idx + 8 * (doc + 1));
    size_t a = seq_start(ds, s), b = seq_start(ds, e);
    *start = a;
    *len = b - a;
    return 0;
}
