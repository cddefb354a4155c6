/* Small helpers shared by the tests: temp dirs, running the built programs,
 * writing token files. */
#ifndef TRI_TESTUTIL_H
#define TRI_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>

/* Address-space caps on a test's children. A normal build caps them with
 * RLIMIT_AS. An ASan build (scripts/test_sanitize.sh) reserves terabytes of
 * address space for its shadow memory and cannot even start under such a
 * limit; there the cap is ASan's own instead (no allocation above 4 GiB,
 * tests/sanitize/sanitizer_options.c), and these leave RLIMIT_AS alone. */
#if defined(__SANITIZE_ADDRESS__)
#define TT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TT_ASAN 1
#endif
#endif
#ifdef TT_ASAN
#define TT_PRLIMIT_AS(bytes) "" /* prlimit option for `bytes` of address space */
#define TT_SH_LIMIT_AS(kib)  "" /* shell command for `kib` KiB of address space */
#else
#define TT_PRLIMIT_AS(bytes) "--as=" bytes
#define TT_SH_LIMIT_AS(kib)  "ulimit -v " kib "; "
#endif
/* setrlimit(RLIMIT_AS) to bytes (soft and hard), except in an ASan build. */
void tt_limit_as(rlim_t bytes);

/* A fresh directory under /tmp (malloc'd path). */
char *tt_mkdtemp(void);
/* rm -rf (best effort). */
void tt_rmrf(const char *path);

/* Runs `cmd` with /bin/sh, stdout and stderr together into *out (malloc'd,
 * NUL-terminated; may be NULL). Returns the exit code (128+signal if killed). */
int tt_run(const char *cmd, char **out);

/* Path of a built program: TRI_BINARY_DIR "/" name (static buffer per call site is fine). */
const char *tt_bin(const char *name);

/* Writes an llm.c token file (header of 256 int32: 20240520, 1, n; then uint16 tokens). */
void tt_write_llmc(const char *path, const uint16_t *tok, size_t n);
/* A token file of n tokens from a fixed pseudo-random text-like stream over [0, vocab). */
void tt_write_llmc_random(const char *path, size_t n, int vocab, uint64_t seed);

/* Reads a whole file (malloc'd, NUL-terminated), or NULL. */
char *tt_read(const char *path);

/* Criterion checks that dir_a/name and dir_b/name are equal byte for byte:
 * asserts both can be read, expects the same content (a failure names both
 * paths, their sizes and the first byte that differs). */
void tt_expect_same_file(const char *dir_a, const char *dir_b, const char *name);

/* Whether dir holds an entry whose name starts with prefix (its name into
 * found[n] when found is not NULL). */
int tt_has_entry(const char *dir, const char *prefix, char *found, size_t n);

/* Every "loss" value of a metrics.jsonl (lines with "loss":), as parsed doubles, in order.
 * Returns the count; *out malloc'd. Also gives the exact text of each value in *texts if non-NULL. */
int tt_losses(const char *metrics_path, double **out);

/* Redirects this process's stderr into the file `path` until tt_capture_end,
 * which restores it and returns what was written (malloc'd, NUL-terminated)
 * and removes the file. Aborts on failure. */
typedef struct tt_capture {
    int saved;
    char path[4096];
} tt_capture;
void tt_capture_begin(tt_capture *c, const char *path);
char *tt_capture_end(tt_capture *c);

/* The first message printed to stderr between tt_err_capture(buf, n) and
 * tt_err_capture(NULL, 0), into buf without its "trident: " prefix and its
 * newline ("" when nothing was printed); nothing reaches the real stderr
 * meanwhile. A second tt_err_capture(buf, n) first ends the one before. */
void tt_err_capture(char *buf, size_t n);

#endif
