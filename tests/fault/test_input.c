/* Fault tests for bad input (ctest label `fault`, executable tri_fault_tests).
 *
 * Each test drives the built programs the way a user would and caps what the
 * child may cost: `timeout` on every run (a hang fails the test instead of
 * freezing the suite), and `prlimit --as` where a bug would allocate without
 * bound. They are the regression tests of docs/reliability.md.
 */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "helpers/testutil.h"

/* Seconds a child may run before it counts as hung. The programs answer
 * these inputs in well under a second; the margin is for a loaded machine. */
#define HANG_S 20

/* A malloc'd printf (aborts on failure): paths and commands of any length. */
static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    char *s = NULL;
    int n = vasprintf(&s, f, ap);
    va_end(ap);
    cr_assert(n >= 0 && s != NULL);
    return s;
}

/* Runs cmd under `timeout -s KILL HANG_S`; stdout and stderr into *out. */
static int run_capped(const char *cmd, char **out) {
    char *full = fmt("timeout -s KILL %d %s", HANG_S, cmd);
    int rc = tt_run(full, out);
    free(full);
    return rc;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot create %s", path);
    cr_assert_eq(fputs(text, f) >= 0 ? 0 : -1, 0);
    cr_assert_eq(fclose(f), 0);
}

static void make_fifo(const char *path) { cr_assert_eq(mkfifo(path, 0644), 0, "mkfifo %s", path); }

/* The run's exit code must be 2 (bad input, not 137 = killed by the cap),
 * and its one-line error must name the file and say what it is. */
static void expect_refused(int rc, const char *out, const char *path, const char *what) {
    cr_expect_neq(rc, 137, "hung on %s (killed after %d s): %s", path, HANG_S, out);
    cr_expect_eq(rc, 2, "exit code %d for %s: %s", rc, path, out);
    cr_expect(strstr(out, path) != NULL, "the message does not name %s: %s", path, out);
    cr_expect(strstr(out, what) != NULL, "the message does not say \"%s\": %s", what, out);
}

/* A small model's Hugging Face config.json (what `sample` needs to size it). */
static const char k_hf_config[] = "{\"model_type\": \"gpt2\", \"n_embd\": 16, \"n_head\": 2, \"n_layer\": 1, "
                                  "\"n_positions\": 16, \"vocab_size\": 256}\n";

/* ---- named pipes given as user files ------------------------------------- */

Test(fifo, config_file_is_refused_not_waited_on, .timeout = 60) {
    char *dir = tt_mkdtemp(), *out = NULL;
    char *p = fmt("%s/config.json", dir);
    make_fifo(p);
    char *cmd = fmt("%s train %s", tt_bin("trident"), p);
    int rc = run_capped(cmd, &out);
    expect_refused(rc, out, p, "named pipe");
    free(out), free(cmd), free(p);
    tt_rmrf(dir);
    free(dir);
}

Test(fifo, tokenizer_file_is_refused_not_waited_on, .timeout = 60) {
    char *dir = tt_mkdtemp(), *out = NULL;
    char *tok = fmt("%s/tokenizer.json", dir), *txt = fmt("%s/in.txt", dir);
    make_fifo(tok);
    write_text(txt, "some text\n");
    char *cmd =
        fmt("%s tokenize encode --tokenizer %s --format llmc --out %s/out %s", tt_bin("trident"), tok, dir, txt);
    int rc = run_capped(cmd, &out);
    expect_refused(rc, out, tok, "named pipe");
    free(out), free(cmd);
    /* the GPT-2 pair: merges.txt a pipe beside a regular vocab.json */
    char *vocab = fmt("%s/vocab.json", dir), *merges = fmt("%s/merges.txt", dir);
    write_text(vocab, "{}");
    make_fifo(merges);
    cmd = fmt("%s tokenize encode --tokenizer %s --format llmc --out %s/out %s", tt_bin("trident"), vocab, dir, txt);
    rc = run_capped(cmd, &out);
    expect_refused(rc, out, merges, "named pipe");
    free(out), free(cmd), free(vocab), free(merges), free(tok), free(txt);
    tt_rmrf(dir);
    free(dir);
}

/* Exit code 2 (not 137 = killed by the cap) and a message naming `path`. */
static void expect_no_hang(int rc, const char *out, const char *path) {
    cr_expect_neq(rc, 137, "hung (killed after %d s): %s", HANG_S, out);
    cr_expect_eq(rc, 2, "exit code %d: %s", rc, out);
    cr_expect(strstr(out, path) != NULL, "the message does not name %s: %s", path, out);
}

/* `latest` (only a hint to the checkpoint store, read without blocking),
 * then state.json, config.json, manifest.json and model.safetensors of a step
 * directory, one at a time. */
Test(fifo, checkpoint_files_are_refused_not_waited_on, .timeout = 150) {
    char *dir = tt_mkdtemp(), *out = NULL;
    /* latest, through `sample --ckpt ROOT`: ignored, so there is no checkpoint */
    char *p = fmt("%s/latest", dir);
    make_fifo(p);
    char *cmd = fmt("%s sample --ckpt %s --tokens 1", tt_bin("trident"), dir);
    int rc = run_capped(cmd, &out);
    expect_no_hang(rc, out, dir);
    free(out), free(cmd), free(p);

    /* state.json of a step directory */
    char *step = fmt("%s/step_00000001", dir);
    cr_assert_eq(mkdir(step, 0755), 0);
    cmd = fmt("%s sample --ckpt %s --tokens 1", tt_bin("trident"), step);
    p = fmt("%s/state.json", step);
    make_fifo(p);
    rc = run_capped(cmd, &out);
    expect_refused(rc, out, p, "named pipe");
    cr_assert_eq(unlink(p), 0);
    free(out), free(p);

    /* config.json (a Hugging Face style directory: no state.json) */
    char *config = fmt("%s/config.json", step);
    make_fifo(config);
    rc = run_capped(cmd, &out);
    expect_refused(rc, out, config, "named pipe");
    cr_assert_eq(unlink(config), 0);
    free(out);

    /* model.safetensors beside a valid config.json */
    write_text(config, k_hf_config);
    p = fmt("%s/model.safetensors", step);
    make_fifo(p);
    rc = run_capped(cmd, &out);
    expect_refused(rc, out, p, "named pipe");
    free(out);

    /* manifest.json, which the store reads before anything else */
    char *manifest = fmt("%s/manifest.json", step);
    make_fifo(manifest);
    rc = run_capped(cmd, &out);
    expect_no_hang(rc, out, step);
    free(out), free(manifest), free(p), free(config), free(cmd), free(step);
    tt_rmrf(dir);
    free(dir);
}

/* `latest` is only a hint: a pipe there is passed over, never waited on, and
 * with no checkpoint in the directory the run starts from step 0. */
Test(fifo, train_resume_passes_over_a_pipe_as_latest, .timeout = 60) {
    char *dir = tt_mkdtemp(), *out = NULL;
    char *p = fmt("%s/train.bin", dir);
    tt_write_llmc_random(p, 4000, 256, 1);
    free(p);
    p = fmt("%s/ckpt", dir);
    cr_assert_eq(mkdir(p, 0755), 0);
    free(p);
    p = fmt("%s/ckpt/latest", dir);
    make_fifo(p);
    char *cmd = fmt("%s train %s/configs/tiny-test.json --threads 1 --resume --set data.train=%s/train.bin "
                    "--set data.val= --set train.steps=1 --set checkpoint.dir=%s/ckpt --set log.dir=%s/log",
                    tt_bin("trident"), TRI_SOURCE_DIR, dir, dir, dir);
    int rc = run_capped(cmd, &out);
    cr_expect_neq(rc, 137, "hung on the pipe as latest: %s", out);
    cr_expect_eq(rc, 0, "exit code %d: %s", rc, out);
    cr_expect(strstr(out, "starting from step 0") != NULL, "%s", out);
    free(out), free(cmd), free(p);
    tt_rmrf(dir);
    free(dir);
}

/* A Megatron pair whose PREFIX.bin is a pipe beside a regular PREFIX.idx. */
Test(fifo, megatron_bin_beside_its_index_is_refused, .timeout = 60) {
    char *dir = tt_mkdtemp(), *out = NULL;
    char *idx = fmt("%s/corpus.idx", dir), *bin = fmt("%s/corpus.bin", dir);
    /* a valid index of one empty document: header (version 1, dtype 8 = uint16,
     * N = 0 sequences, D = 2 document indices), then the indices [0, 0] */
    FILE *f = fopen(idx, "wb");
    cr_assert_not_null(f);
    const unsigned char hdr[34] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
                                   8,   0,   0,   0,   0,   0,   0,   0, 0, 2, 0, 0, 0, 0, 0, 0, 0};
    const unsigned char docs[16] = {0};
    cr_assert_eq(fwrite(hdr, 1, sizeof hdr, f), sizeof hdr);
    cr_assert_eq(fwrite(docs, 1, sizeof docs, f), sizeof docs);
    cr_assert_eq(fclose(f), 0);
    make_fifo(bin);
    char *cmd = fmt("%s data info %s", tt_bin("trident"), idx);
    int rc = run_capped(cmd, &out);
    expect_refused(rc, out, bin, "named pipe");
    free(out), free(cmd), free(idx), free(bin);
    tt_rmrf(dir);
    free(dir);
}

Test(fifo, launcher_hostfile_is_refused_not_waited_on, .timeout = 60) {
    char *dir = tt_mkdtemp(), *out = NULL;
    char *p = fmt("%s/hosts", dir);
    make_fifo(p);
    char *cmd = fmt("%s --dry-run --hostfile %s -- /bin/true", tt_bin("tridentrun"), p);
    int rc = run_capped(cmd, &out);
    cr_expect_neq(rc, 137, "hung on the hostfile pipe: %s", out);
    cr_expect_neq(rc, 0, "a pipe as hostfile was accepted: %s", out);
    cr_expect(strstr(out, p) != NULL && strstr(out, "named pipe") != NULL, "%s", out);
    free(out), free(cmd), free(p);
    tt_rmrf(dir);
    free(dir);
}

/* ---- memory proportional to the input ----------------------------------------- */

/* A cap on the child's memory: prlimit --as in a normal build; in an ASan
 * build (see TT_PRLIMIT_AS) the allocator's, with a bigger malloc returning
 * NULL as it would under the rlimit. */
static char *capped(const char *cmd, int mib) {
#ifdef TT_ASAN
    const char *prev = getenv("ASAN_OPTIONS");
    return fmt("env ASAN_OPTIONS='%s%smax_allocation_size_mb=%d:allocator_may_return_null=1' %s", prev ? prev : "",
               prev && *prev ? ":" : "", mib, cmd);
#else
    return fmt("prlimit --as=%lld %s", (long long)mib << 20, cmd);
#endif
}

/* Item 7 of issue 13: a tokenizer.json whose end-of-text id is 500000000 made
 * the loader allocate a table sized by the id (20.7 GB for a 100 KB file).
 * Under a 1 GiB cap it must be refused, naming the id, in well under the
 * time limit. */
Test(tokenizer_memory, huge_end_of_text_id_is_refused_within_a_memory_cap, .timeout = 60) {
    char *dir = tt_mkdtemp(), *out = NULL;
    char *tok = fmt("%s/tokenizer.json", dir), *txt = fmt("%s/in.txt", dir);
    FILE *f = fopen(tok, "wb");
    cr_assert_not_null(f);
    fprintf(f, "{\"added_tokens\": [{\"id\": 500000000, \"content\": \"<|endoftext|>\", \"special\": true}], "
               "\"model\": {\"type\": \"BPE\", \"merges\": [], \"vocab\": {");
    for (int b = 0x21; b <= 0x7E; b++) /* a few plain entries; the id check comes first */
        fprintf(f, "%s\"%s%c\": %d", b > 0x21 ? ", " : "", b == '"' || b == '\\' ? "\\" : "", b, b - 0x21);
    fputs("}}}\n", f);
    cr_assert_eq(fclose(f), 0);
    write_text(txt, "some text\n");
    char *cmd =
        fmt("%s tokenize encode --tokenizer %s --format llmc --out %s/out %s", tt_bin("trident"), tok, dir, txt);
    char *run = capped(cmd, 1024);
    int rc = run_capped(run, &out);
    expect_refused(rc, out, tok, "id 500000000 leaves a gap");
    cr_expect(strstr(out, "out of memory") == NULL, "%s", out);
    free(out), free(run), free(cmd), free(tok), free(txt);
    tt_rmrf(dir);
    free(dir);
}
