/* Replays every committed input of tests/fuzz/corpus/<harness>/ (seeds and
 * the regression inputs of past findings) through its harness, in any build:
 * a plain one checks the harness's promises, the sanitizer build
 * (scripts/test_sanitize.sh) checks them under ASan + UBSan. One Criterion
 * test per harness; a failing input is named on stderr before it runs when
 * TRIDENT_FUZZ_VERBOSE=1 (otherwise the parsers' messages are silenced). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/harnesses.h"

#define DECLARE(name) int tri_fuzz_one_##name(const uint8_t *data, size_t size);
TRI_FUZZ_HARNESSES(DECLARE)

/* The input being replayed, for the crash handler. */
static char g_current[4200];

static void on_crash(int sig) {
    tri_fuzz_report("tri_fuzz_corpus: signal %d while replaying %s", sig, g_current);
    signal(sig, SIG_DFL);
    raise(sig);
}

#if defined(__SANITIZE_ADDRESS__)
#define REPLAY_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define REPLAY_ASAN 1
#endif
#endif

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void replay(const char *name, int (*one)(const uint8_t *, size_t)) {
#ifndef REPLAY_ASAN
    /* A regression of a memory blow-up (a table sized by an id in the file)
     * must fail, not take the machine. (A sanitizer build caps allocations
     * instead: tests/sanitize/sanitizer_options.c.) */
    struct rlimit as = {(rlim_t)4 << 30, (rlim_t)4 << 30};
    cr_assert_eq(setrlimit(RLIMIT_AS, &as), 0);
#endif
    signal(SIGABRT, on_crash);
    signal(SIGSEGV, on_crash);
    signal(SIGBUS, on_crash);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/%s", TRI_SOURCE_DIR, name);
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "no corpus directory %s", dir);
    char *files[4096];
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL && n < 4096;)
        if (e->d_name[0] != '.') files[n++] = strdup(e->d_name);
    closedir(d);
    cr_assert_gt(n, 0, "%s is empty", dir);
    qsort(files, n, sizeof *files, by_name);
    const char *verbose = getenv("TRIDENT_FUZZ_VERBOSE");
    for (size_t i = 0; i < n; i++) {
        snprintf(g_current, sizeof g_current, "%s/%s", dir, files[i]);
        FILE *f = fopen(g_current, "rb");
        cr_assert_not_null(f, "%s", g_current);
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *buf = malloc(len > 0 ? (size_t)len : 1);
        cr_assert_not_null(buf);
        cr_assert_eq(fread(buf, 1, (size_t)len, f), (size_t)len);
        fclose(f);
        if (verbose && *verbose && strcmp(verbose, "0") != 0) fprintf(stderr, "replaying %s\n", g_current);
        cr_assert_eq(one(buf, (size_t)len), 0, "%s", g_current);
        free(buf);
        free(files[i]);
    }
}

#define TEST(name) \
    Test(fuzz_corpus, name, .timeout = 120) { replay(#name, tri_fuzz_one_##name); }
TRI_FUZZ_HARNESSES(TEST)
