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

/* ---- hostile sizes and paths (issue 22) ------------------------------------------
 * Each bad value is refused at once with exit 2 and a line naming the key, the
 * numbers and the limit: never a crash (SIGFPE = 136), a hang (the cap's 137),
 * gigabytes of output or a started job. */

/* A small valid config (data: a file that need not exist; the refusals come first). */
static char *small_config(const char *dir, const char *data) {
    char *cfg = fmt("%s/c.json", dir);
    char *text =
        fmt("{\"model\": {\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 16, \"seq_len\": 8, \"vocab_size\": 256},"
            " \"train\": {\"global_batch\": 4, \"micro_batch\": 2, \"steps\": 1},"
            " \"data\": {\"train\": \"%s\"}, \"checkpoint\": {\"dir\": \"%s/ck\"}, \"log\": {\"dir\": \"%s/log\"}}\n",
            data, dir, dir);
    write_text(cfg, text);
    free(text);
    return cfg;
}

/* rc 2 (not 136 = SIGFPE, not 137 = the cap), every needle in the output. */
static void expect_exit2_saying(int rc, const char *out, const char *what, const char *const *needles) {
    cr_expect_neq(rc, 136, "[%s] SIGFPE: %s", what, out);
    cr_expect_neq(rc, 137, "[%s] killed by the cap after %d s: %s", what, HANG_S, out);
    cr_expect_eq(rc, 2, "[%s] exit code %d: %s", what, rc, out);
    for (const char *const *n = needles; *n; n++)
        cr_expect(strstr(out, *n) != NULL, "[%s] the message lacks \"%s\": %s", what, *n, out);
}
#define SAYING(...) ((const char *const[]){__VA_ARGS__, NULL})

/* pp 2^28 x vpp 16 wrapped an int to 0 chunks (SIGFPE in train, plan and
 * bench); tp 2^16 x pp 2^16 wrapped in plan; 2^31 micro-batches hung plan.
 * The config check refuses them, in 64 bits, under a 1 GiB memory cap. */
Test(hostile, parallel_size_products_are_refused_not_wrapped, .timeout = 120) {
    char *dir = tt_mkdtemp(), *cfg = small_config(dir, "x.bin");
    static const char ranks[] = "at most 1048576 (2^20) ranks", micro[] = "micro-batches per step on each DP rank";
    static const struct {
        const char *cmd, *sets, *needle, *limit;
    } cases[] = {
        {"train", "--set parallel.pp=268435456 --set parallel.vpp=16", "parallel.pp (268435456)", ranks},
        {"bench", "--set parallel.pp=268435456 --set parallel.vpp=16", "parallel.pp (268435456)", ranks},
        {"plan", "--gpu cpu --set parallel.pp=268435456 --set parallel.vpp=16", "parallel.pp (268435456)", ranks},
        {"plan", "--gpu cpu --set parallel.tp=65536 --set parallel.pp=65536", "= 4294967296 ranks", ranks},
        {"plan", "--gpu h100 --set parallel.tp=65536 --set parallel.pp=65536", "= 4294967296 ranks", ranks},
        /* 2^31 micro-batches: plan simulated their schedule (a hang) */
        {"plan", "--gpu cpu --set parallel.pp=2 --set train.global_batch=2147483647 --set train.micro_batch=1",
         "= 2147483647 micro-batches", micro},
        {"bench", "--set train.global_batch=2147483647 --set train.micro_batch=1", "at most 65536", micro},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL, *cmd = fmt("%s %s %s %s", tt_bin("trident"), cases[i].cmd, cfg, cases[i].sets);
        char *run = capped(cmd, 1024);
        int rc = run_capped(run, &out);
        expect_exit2_saying(rc, out, run, SAYING(cfg, cases[i].needle, cases[i].limit));
        free(out), free(run), free(cmd);
    }
    /* vpp beyond the limit, and more chunks than layers (2 layers here) */
    char *out = NULL, *cmd = fmt("%s train %s --set parallel.pp=2 --set parallel.vpp=17", tt_bin("trident"), cfg);
    int rc = run_capped(cmd, &out);
    expect_exit2_saying(rc, out, cmd, SAYING("parallel.vpp", "at most 16", "got 17"));
    free(out), free(cmd);
    cmd = fmt("%s bench %s --set parallel.pp=65536 --set parallel.vpp=16", tt_bin("trident"), cfg);
    rc = run_capped(cmd, &out);
    expect_exit2_saying(rc, out, cmd, SAYING("parallel.pp (65536) x parallel.vpp (16) = 1048576", "model.n_layer (2)"));
    free(out), free(cmd), free(cfg);
    tt_rmrf(dir);
    free(dir);
}

/* bucket_mb 1e-9 made one bucket per float (a 171 s step instead of 10 ms)
 * and 1e300 overflowed a float-to-integer cast: both refused with the range. */
Test(hostile, bucket_mb_outside_its_range_is_refused, .timeout = 60) {
    char *dir = tt_mkdtemp(), *cfg = small_config(dir, "x.bin");
    const char *values[] = {"1e-9", "1e300", "0", "-1", "2e6"};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        char *out = NULL, *cmd = fmt("%s train %s --set parallel.bucket_mb=%s", tt_bin("trident"), cfg, values[i]);
        int rc = run_capped(cmd, &out);
        expect_exit2_saying(rc, out, cmd, SAYING("parallel.bucket_mb", "in [0.0009765625, 1048576]"));
        free(out), free(cmd);
    }
    free(cfg);
    tt_rmrf(dir);
    free(dir);
}

/* tridentrun took 268M ranks on a 2-core host (a 17 GB --dry-run rank map, or
 * minutes before `mpirun -np 268435456`). More ranks than a host's slots=N,
 * or than --max-ranks-per-host (256) on a host without them, are refused
 * before anything starts: no log directory, no mpirun (a stand-in that would
 * leave a file). --max-ranks-per-host raises the cap. */
Test(hostile, launcher_refuses_more_ranks_than_the_hosts_start, .timeout = 120) {
    char *dir = tt_mkdtemp(), *cfg = small_config(dir, "x.bin");
    char *marker = fmt("%s/mpirun_ran", dir), *fake = fmt("%s/fake_mpirun", dir), *logs = fmt("%s/logs", dir);
    char *script = fmt("#!/bin/sh\ntouch %s\n", marker);
    write_text(fake, script);
    cr_assert_eq(chmod(fake, 0755), 0);
    const char *const runs[] = {
        "--dry-run -- trident train %s --set parallel.pp=268435456 --set parallel.vpp=16",
        "-- trident train %s --set parallel.dp=268435456",
        "-- trident train %s --set parallel.dp=512 --set train.global_batch=512 --set train.micro_batch=1",
        "--dry-run -- trident train %s --set parallel.dp=512 --set train.global_batch=512 --set train.micro_batch=1",
    };
    const char *const said[] = {"at most 1048576 (2^20) ranks", "at most 1048576 (2^20) ranks",
                                "512 ranks on host localhost", "more than 256 on a host without slots=N"};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char *tail = fmt(runs[i], cfg);
        char *out = NULL, *cmd = fmt("%s --mpirun %s --log-dir %s %s", tt_bin("tridentrun"), fake, logs, tail);
        char *run = capped(cmd, 1024);
        int rc = run_capped(run, &out);
        expect_exit2_saying(rc, out, run, SAYING(said[i]));
        cr_expect_lt(strlen(out), 4096, "[%s] %zu bytes of output", run, strlen(out));
        cr_expect_neq(access(marker, F_OK), 0, "[%s] mpirun was started", run);
        cr_expect_neq(access(logs, F_OK), 0, "[%s] the log directory was made", run);
        free(out), free(run), free(cmd), free(tail);
    }
    char *out = NULL,
         *cmd = fmt("%s --nproc-per-node 300 --mpirun %s --log-dir %s -- /bin/true", tt_bin("tridentrun"), fake, logs);
    int rc = run_capped(cmd, &out);
    expect_exit2_saying(rc, out, cmd, SAYING("300 ranks on host localhost", "--max-ranks-per-host"));
    cr_expect_neq(access(marker, F_OK), 0, "mpirun was started");
    free(out), free(cmd);
    /* the override: 512 ranks planned (a dry run), one map line each */
    cmd = fmt("%s --dry-run --max-ranks-per-host 512 --log-dir %s -- trident train %s --set parallel.dp=512 --set "
              "train.global_batch=512 --set train.micro_batch=1",
              tt_bin("tridentrun"), logs, cfg);
    rc = run_capped(cmd, &out);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "tridentrun: 512 ranks = 512 per host x 1 host") != NULL, "%.400s", out);
    cr_expect(strstr(out, "\n   511  localhost") != NULL, "no rank 511 in the map");
    free(out), free(cmd), free(script), free(marker), free(fake), free(logs), free(cfg);
    tt_rmrf(dir);
    free(dir);
}

/* `tridentrun --dry-run` said the trainer would refuse the config and exited 0. */
Test(hostile, launcher_dry_run_of_a_refused_config_exits_2, .timeout = 60) {
    char *dir = tt_mkdtemp(), *cfg = small_config(dir, "x.bin"), *out = NULL;
    char *cmd = fmt("%s --dry-run --log-dir %s/logs -- trident train %s --set parallel.pp_layout=1,2",
                    tt_bin("tridentrun"), dir, cfg);
    int rc = run_capped(cmd, &out);
    expect_exit2_saying(rc, out, cmd,
                        SAYING("pipeline: the trainer would refuse this config", "parallel.pp_layout has 2 numbers"));
    free(out), free(cmd);
    cmd = fmt("%s --dry-run --log-dir %s/logs -- trident train %s", tt_bin("tridentrun"), dir, cfg);
    rc = run_capped(cmd, &out);
    cr_expect_eq(rc, 0, "a config the trainer takes: %s", out);
    free(out), free(cmd), free(cfg);
    tt_rmrf(dir);
    free(dir);
}

/* `trident schedule --pp 8 --micro-batches 1024 --costs 1e6,1e6,1e6` wrote a
 * column per time unit: gigabytes. Now at most 256 columns: well under 64 KiB,
 * under a 1 GiB memory cap. */
Test(hostile, schedule_grid_is_bounded_whatever_the_costs, .timeout = 60) {
    char *out = NULL, *cmd = fmt("%s schedule --pp 8 --micro-batches 1024 --costs 1e6,1e6,1e6", tt_bin("trident"));
    char *run = capped(cmd, 1024);
    int rc = run_capped(run, &out);
    cr_expect_eq(rc, 0, "exit %d: %.400s", rc, out);
    cr_expect_lt(strlen(out), (size_t)64 << 10, "%zu bytes of output", strlen(out));
    cr_expect(strstr(out, "one column is 1.2082e+07 time units") != NULL, "%.400s",
              out); /* 3.093e9 / 256, rounded up */
    cr_expect(strstr(out, "deadlock check: ok") != NULL, "%.400s", out);
    free(out), free(run), free(cmd);
    /* the schedule itself: 2^30 units within the options' own bounds ran past the cap */
    cmd = fmt("%s schedule --pp 256 --micro-batches 65536 --vpp 64", tt_bin("trident"));
    run = capped(cmd, 1024);
    rc = run_capped(run, &out);
    expect_exit2_saying(rc, out, run, SAYING("= 1073741824 units", "at most 4194304"));
    free(out), free(run), free(cmd);
}

/* A data file that cannot be opened was reported as "no such file" whatever
 * the reason: now the reason itself (strerror of the open's errno). */
Test(hostile, unopenable_data_file_names_the_real_reason, .timeout = 60) {
    char *dir = tt_mkdtemp();
    char *loop = fmt("%s/loop.bin", dir), *plain = fmt("%s/plain", dir), *under = fmt("%s/plain/x.bin", dir);
    cr_assert_eq(symlink("loop.bin", loop), 0);
    write_text(plain, "x");
    const char *const paths[] = {loop, under};
    const char *const why[] = {"Too many levels of symbolic links", "Not a directory"};
    for (int i = 0; i < 2; i++) {
        char *cfg = small_config(dir, paths[i]), *out = NULL;
        char *cmd = fmt("%s train %s", tt_bin("trident"), cfg);
        int rc = run_capped(cmd, &out);
        expect_refused(rc, out, paths[i], why[i]);
        cr_expect(strstr(out, "no such file") == NULL, "%s", out);
        free(out), free(cmd), free(cfg);
        /* the tokenizer's corpus reader says the same */
        cmd = fmt("%s tokenize train --vocab-size 300 --out %s/tok.json %s", tt_bin("trident"), dir, paths[i]);
        rc = run_capped(cmd, &out);
        expect_refused(rc, out, paths[i], why[i]);
        free(out), free(cmd);
    }
    if (geteuid() != 0) { /* root reads through any permission */
        char *locked = fmt("%s/locked", dir), *inside = fmt("%s/locked/x.bin", dir);
        cr_assert_eq(mkdir(locked, 0700), 0);
        write_text(inside, "x");
        cr_assert_eq(chmod(locked, 0), 0);
        char *cfg = small_config(dir, inside), *out = NULL, *cmd = fmt("%s train %s", tt_bin("trident"), cfg);
        int rc = run_capped(cmd, &out);
        expect_refused(rc, out, inside, "Permission denied");
        chmod(locked, 0700);
        free(out), free(cmd), free(cfg), free(locked), free(inside);
    }
    free(loop), free(plain), free(under);
    tt_rmrf(dir);
    free(dir);
}

/* `trident sweep` with more than 256 --set words overflowed a fixed array. A
 * repeated key takes one slot: 400 words over two keys (the test's shell line
 * holds 16 KiB) plan one point whose command carries the last value of each. */
Test(hostile, sweep_takes_hundreds_of_repeated_sets, .timeout = 60) {
    char *dir = tt_mkdtemp(), *cfg = small_config(dir, "x.bin");
    char *sweep = fmt("%s/s.json", dir);
    char *text = fmt("{\"base\": \"%s\", \"out\": \"%s/out\"}\n", cfg, dir);
    write_text(sweep, text);
    size_t cap = 16000, len = 0;
    char *cmd = malloc(cap);
    cr_assert_not_null(cmd);
    len += (size_t)snprintf(cmd, cap, "%s sweep %s --dry-run", tt_bin("trident"), sweep);
    for (int i = 0; i < 400; i++)
        len +=
            (size_t)snprintf(cmd + len, cap - len, i % 2 ? " --set train.lr=0.%03d" : " --set train.steps=%d", i + 1);
    cr_assert_lt(len, cap);
    char *out = NULL;
    int rc = run_capped(cmd, &out);
    cr_expect_eq(rc, 0, "exit %d: %.400s", rc, out);
    cr_expect(strstr(out, "--set train.steps=399 ") != NULL && strstr(out, "--set train.lr=0.400 ") != NULL, "%.600s",
              out);
    cr_expect(strstr(out, "train.steps=397") == NULL, "an earlier value survived: %.600s", out);
    free(out), free(cmd), free(text), free(sweep), free(cfg);
    tt_rmrf(dir);
    free(dir);
}

/* A torchrun-style launch (RANK/WORLD_SIZE, no MPI) of `trident train --device
 * cpu`, rank 1 of 2 never coming: the rendezvous at the store used to wait a
 * fixed 600 s before the CPU backend refused the launch; it is refused at once
 * (well inside the 20 s cap), in every build. */
Test(hostile, cpu_store_launch_is_refused_before_the_rendezvous, .timeout = 60) {
    char *dir = tt_mkdtemp(), *cfg = small_config(dir, "x.bin"), *out = NULL;
    char *cmd = fmt("env -u OMPI_COMM_WORLD_SIZE -u OMPI_COMM_WORLD_RANK -u PMI_SIZE -u PMI_RANK -u SLURM_NTASKS "
                    "-u SLURM_STEP_NUM_TASKS -u SLURM_PROCID RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 "
                    "MASTER_PORT=1 %s train %s --device cpu --set parallel.dp=2 --set parallel.timeout_s=600",
                    tt_bin("trident"), cfg);
    int rc = run_capped(cmd, &out);
    expect_exit2_saying(rc, out, cmd, SAYING("rank 0", "needs --device cuda"));
    free(out), free(cmd), free(cfg);
    tt_rmrf(dir);
    free(dir);
}
