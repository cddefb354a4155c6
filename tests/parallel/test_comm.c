/* Multi-rank tests of the MPI transport (parallel/comm_mpi.c), the process
 * context (parallel/dist.c) and the launcher (src/cli/tridentrun.c).
 *
 * Each multi-rank test starts a child process: mpirun (or tridentrun) running
 * tests/tools/mpi_probe.c, which writes what every comm op returned to
 * OUTDIR/probe_<rank>.txt. The expected values are computed here, in closed
 * form or by brute force over the ranks' inputs (never by the code under
 * test). Every child runs under a deadline, so a hang fails instead of
 * blocking; every run takes seconds.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels/ctx.h"
#include "kernels/half.h"
#include "model/gpt.h"
#include "model/runtime.h"
#include "parallel/comm.h"
#include "tests/helpers/job.h"

/* ------------------------------------------------------------------------ */
/* Processes                                                                */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Starts argv in its own process group with stdout+stderr to `out_path`
 * (stdin from /dev/null). */
static pid_t spawn(char *const argv[], const char *out_path) {
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        setpgid(0, 0);
        int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int in = open("/dev/null", O_RDONLY);
        if (fd < 0 || in < 0) _exit(126);
        dup2(in, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        execvp(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* Waits at most `limit` seconds; on overrun kills the process group and
 * fails the test. Returns the exit code, or 128 + signal. */
static int wait_bounded(pid_t pid, double limit, const char *what) {
    double t0 = now_s();
    int st = 0;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) break;
        cr_assert(w == 0 || errno == EINTR, "waitpid: %s", strerror(errno));
        if (now_s() - t0 > limit) {
            kill(-pid, SIGKILL);
            waitpid(pid, &st, 0);
            cr_assert_fail("%s did not finish within %.0f s", what, limit);
        }
        usleep(20000);
    }
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    return 128 + WTERMSIG(st);
}

/* malloc'd contents of a file ("" when missing). */
static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        char *e = malloc(1);
        cr_assert_not_null(e);
        e[0] = '\0';
        return e;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    cr_assert_not_null(s);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = '\0';
    fclose(f);
    return s;
}

typedef struct run_out {
    int status; /* exit code, or 128 + signal */
    double secs;
    char *text; /* stdout + stderr (malloc'd) */
} run_out;

static run_out run_argv(char *const argv[], const char *dir, double limit) {
    char out_path[512];
    snprintf(out_path, sizeof out_path, "%s/run_output.txt", dir);
    double t0 = now_s();
    pid_t pid = spawn(argv, out_path);
    run_out r;
    r.status = wait_bounded(pid, limit, argv[0]);
    r.secs = now_s() - t0;
    r.text = slurp(out_path);
    return r;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

typedef struct tmpdir {
    char path[256];
} tmpdir;

static tmpdir make_tmpdir(void) {
    tmpdir t;
    snprintf(t.path, sizeof t.path, "/tmp/tri_test_comm_XXXXXX");
    cr_assert_not_null(mkdtemp(t.path), "mkdtemp: %s", strerror(errno));
    return t;
}

static void remove_tmpdir(const tmpdir *t) { nftw(t->path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static int file_exists(const char *p) { return access(p, F_OK) == 0; }

static const char *probe_path(void) {
    static const char *const cands[] = {TRI_BINARY_DIR "/mpi_probe", TRI_BINARY_DIR "/tests/mpi_probe"};
    for (size_t i = 0; i < 2; i++)
        if (access(cands[i], X_OK) == 0) return cands[i];
    cr_assert_fail("mpi_probe is not built (expected %s or %s): add to CMake "
                   "add_executable(mpi_probe tests/tools/mpi_probe.c) and "
                   "target_link_libraries(mpi_probe PRIVATE tri_parallel)",
                   cands[0], cands[1]);
    return NULL;
}

static const char *tridentrun_path(void) {
    static const char *const p = TRI_BINARY_DIR "/tridentrun";
    cr_assert(access(p, X_OK) == 0, "%s is not built", p);
    return p;
}

static int usable_cores(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Tests that start a real mpirun skip in a build without MPI (TRI_MPI=OFF). */
static void need_mpi(void) {
#ifndef TRI_HAVE_MPI
    cr_skip_test("built without MPI (TRI_MPI=OFF)");
#endif
}

/* The environment the launcher tests assume: no user thread settings. */
static void clean_env(void) {
    unsetenv("OMP_NUM_THREADS");
    unsetenv("OMP_WAIT_POLICY");
}

/* mpirun -np N [--allow-run-as-root] --oversubscribe PROBE DIR tp pp dp */
static run_out mpirun_probe(const tmpdir *t, int n, int tp, int pp, int dp) {
    char np[16], stp[16], spp[16], sdp[16];
    snprintf(np, sizeof np, "%d", n);
    snprintf(stp, sizeof stp, "%d", tp);
    snprintf(spp, sizeof spp, "%d", pp);
    snprintf(sdp, sizeof sdp, "%d", dp);
    char *argv[16];
    int a = 0;
    argv[a++] = "mpirun";
    argv[a++] = "-np";
    argv[a++] = np;
    if (geteuid() == 0) argv[a++] = "--allow-run-as-root";
    argv[a++] = "--oversubscribe";
    argv[a++] = "--bind-to";
    argv[a++] = "none";
    argv[a++] = (char *)probe_path();
    argv[a++] = (char *)t->path;
    argv[a++] = stp;
    argv[a++] = spp;
    argv[a++] = sdp;
    argv[a] = NULL;
    setenv("OMP_NUM_THREADS", "1", 1);
    return run_argv(argv, t->path, 60);
}

/* ------------------------------------------------------------------------ */
/* Reading and checking the probe's files                                   */

/* Values of line `key` in rank r's file into v (room for cap); returns the count, -1 if absent. */
static int probe_values(const char *dir, int r, const char *key, double *v, int cap) {
    char path[512];
    snprintf(path, sizeof path, "%s/probe_%d.txt", dir, r);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "missing %s", path);
    char line[65536];
    size_t klen = strlen(key);
    int n = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) != 0 || (line[klen] != ' ' && line[klen] != '\n')) continue;
        n = 0;
        char *s = line + klen, *end;
        for (;;) {
            double x = strtod(s, &end);
            if (end == s) break;
            cr_assert_lt(n, cap, "%s: too many values for %s", path, key);
            v[n++] = x;
            s = end;
        }
        break;
    }
    fclose(f);
    return n;
}

/* x as the probe's "%.9g" gives it back */
static double as_printed(float x) {
    char b[64];
    snprintf(b, sizeof b, "%.9g", (double)x);
    return strtod(b, NULL);
}

static void expect_values(const char *dir, int r, const char *key, const double *want, int n, double tol) {
    double got[4096];
    int m = probe_values(dir, r, key, got, 4096);
    cr_assert_eq(m, n, "rank %d %s: %d values, expected %d", r, key, m, n);
    for (int i = 0; i < n; i++)
        cr_assert(fabs(got[i] - want[i]) <= tol, "rank %d %s[%d]: got %.17g, expected %.17g", r, key, i, got[i],
                  want[i]);
}

/* The large-vector lines: samples at the probe's fixed indices, then the sum. */
static void expect_big(const char *dir, int r, const char *key, size_t n, double (*value)(size_t i, int size),
                       int size) {
    const size_t idx[] = {0, 1, 6, 7, 999, 1000, 123457, n - 2, n - 1};
    enum { NI = sizeof idx / sizeof idx[0] };
    double want[NI + 1];
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += value(i, size);
    for (int k = 0; k < NI; k++) want[k] = value(idx[k], size);
    want[NI] = sum;
    expect_values(dir, r, key, want, NI + 1, 0.0);
}

/* ar_big: rank r held (r+1)*(i%1000); the sum over n ranks is n(n+1)/2 * (i%1000) */
static double big_sum(size_t i, int n) { return (double)n * (n + 1) / 2.0 * (double)(i % 1000); }
/* iar_sum: rank r held r - i%7 */
static double iar_sum(size_t i, int n) { return (double)n * (n - 1) / 2.0 - (double)n * (double)(i % 7); }
/* iar_max: rank r held (13r + i) mod 17: brute force over the ranks */
static double iar_max(size_t i, int n) {
    long best = -1;
    for (int r = 0; r < n; r++) {
        long v = (long)((13 * (size_t)r + i) % 17);
        if (v > best) best = v;
    }
    return (double)best;
}

typedef struct coord {
    int t, d, p;
} coord;

/* Rank r's (tp, dp, pp) coordinates by enumeration: pp outermost, tp innermost. */
static coord coord_of(int r, int tp, int pp, int dp) {
    int k = 0;
    for (int p = 0; p < pp; p++)
        for (int d = 0; d < dp; d++)
            for (int t = 0; t < tp; t++)
                if (k++ == r) return (coord){t, d, p};
    cr_assert_fail("rank %d outside %dx%dx%d", r, tp, pp, dp);
    return (coord){-1, -1, -1};
}

static void check_world_ops(const char *dir, int n, int r) {
    double w[64];
    const double tri = n * (n - 1) / 2.0;
    for (int i = 0; i < 7; i++) w[i] = tri + n * 0.25 * i;
    expect_values(dir, r, "ar_sum_f32", w, 7, 0.0);
    for (int i = 0; i < 7; i++) w[i] = 0.5 * tri + n * 1024.0 * i;
    expect_values(dir, r, "ar_sum_f64", w, 7, 0.0);
    for (int i = 0; i < 7; i++) w[i] = (i + 1) * tri - (double)n * i;
    expect_values(dir, r, "ar_sum_i32", w, 7, 0.0);
    /* (r + 3i) mod n runs through every residue: the max is n-1 */
    for (int i = 0; i < 7; i++) w[i] = (n - 1) - 0.5 * i;
    expect_values(dir, r, "ar_max_f32", w, 7, 0.0);
    for (int i = 0; i < 7; i++) w[i] = 0.0; /* -(r*i) is largest at r = 0 */
    expect_values(dir, r, "ar_max_f64", w, 7, 0.0);
    for (int i = 0; i < 7; i++) {
        int best = -100;
        for (int q = 0; q < n; q++) {
            int v = (q * 7 + i * 5) % 11 - 5;
            if (v > best) best = v;
        }
        w[i] = best;
    }
    expect_values(dir, r, "ar_max_i32", w, 7, 0.0);
    /* 16-bit sums: every rank's values widened, summed in fp32 (exact for
     * these few), rounded once to nearest even; compared as the probe
     * prints a float (%.9g: the same float back) */
    for (int i = 0; i < 7; i++) {
        float sum = 0;
        for (int q = 0; q < n; q++)
            sum += tri_bf16_to_f32(tri_f32_to_bf16(1.0f + (float)((q + 1) * (i + 1)) * 0.00390625f));
        w[i] = as_printed(tri_round_bf16(sum));
    }
    expect_values(dir, r, "ar_sum_bf16", w, 7, 0.0);
    if (n <= 4) {
        for (int i = 0; i < 7; i++) {
            float sum = 0;
            for (int q = 0; q < n; q++)
                sum += tri_f16_to_f32(tri_f32_to_f16(0.1f * (float)(q + 1) + 0.01f * (float)(r * 7 + i)));
            w[i] = as_printed(tri_round_f16(sum));
        }
        expect_values(dir, r, "rs_sum_f16", w, 7, 0.0);
    }

    expect_big(dir, r, "ar_big", (size_t)1 << 20, big_sum, n);
    w[0] = 0;
    w[1] = 0;
    expect_values(dir, r, "iar_active", w, 2, 0.0);
    expect_big(dir, r, "iar_sum", 300001, iar_sum, n);
    expect_big(dir, r, "iar_max", 300001, iar_max, n);

    /* reduce-scatter: recv[i] = sum over q of (q*1000 + r*5 + i) */
    for (int i = 0; i < 5; i++) w[i] = 1000.0 * tri + (double)n * (r * 5 + i);
    expect_values(dir, r, "rs_i32", w, 5, 0.0);
    for (int i = 0; i < 5; i++) w[i] = 0.5 * (tri + (double)n * (r * 5 + i));
    expect_values(dir, r, "rs_f32", w, 5, 0.0);

    /* the non-blocking forms: the same out of place; in place
     * recv[i] = sum over q of 0.25 (3q + r*5 + i); the large one (70001 per
     * rank): element j of rank q is (q+1) (j mod 7) */
    for (int i = 0; i < 3; i++) w[i] = 0;
    expect_values(dir, r, "irs_active", w, 3, 0.0);
    for (int i = 0; i < 5; i++) w[i] = 0.5 * (tri + (double)n * (r * 5 + i));
    expect_values(dir, r, "irs_f32", w, 5, 0.0);
    for (int i = 0; i < 5; i++) w[i] = 0.25 * (3.0 * tri + (double)n * (r * 5 + i));
    expect_values(dir, r, "irs_inplace_f32", w, 5, 0.0);
    {
        const long M = 70001, idx[5] = {0, 1, 2, M / 2, M - 1};
        for (int i = 0; i < 5; i++) w[i] = (tri + n) * (double)((r * M + idx[i]) % 7);
        expect_values(dir, r, "irs_inplace_big", w, 5, 0.0);
    }
    w[0] = w[1] = 0;
    expect_values(dir, r, "iag_active", w, 2, 0.0);
    for (int j = 0; j < 3 * n; j++) w[j] = (j / 3) * 10.0 + j % 3;
    expect_values(dir, r, "iag_f32", w, 3 * n, 0.0);
    expect_values(dir, r, "iag_inplace_f32", w, 3 * n, 0.0);

    for (int j = 0; j < 3 * n; j++) w[j] = (j / 3) * 10.0 + j % 3;
    expect_values(dir, r, "ag_f64", w, 3 * n, 0.0);
    expect_values(dir, r, "ag_inplace_f64", w, 3 * n, 0.0);
    for (int q = 0; q < n; q++) {
        w[2 * q] = q + 1;
        w[2 * q + 1] = 200 + q;
    }
    expect_values(dir, r, "ag_u8", w, 2 * n, 0.0);

    for (int i = 0; i < 4; i++) w[i] = 42 + i * (n - 1);
    expect_values(dir, r, "bc_i32", w, 4, 0.0);
    w[0] = 3.5;
    w[1] = -2.25;
    expect_values(dir, r, "bc_f64", w, 2, 0.0);

    if (n > 1) {
        for (int i = 0; i < 6; i++) w[i] = ((r - 1 + n) % n) * 100.0 + i;
        expect_values(dir, r, "ring_f32", w, 6, 0.0);
    } else {
        double tmp[8];
        cr_assert_eq(probe_values(dir, r, "ring_f32", tmp, 8), -1);
    }
    w[0] = 1;
    expect_values(dir, r, "barrier_done", w, 1, 0.0);
}

/* One group kind: its members (world ranks in group order) by filtering all ranks. */
static int members_of(int r, int tp, int pp, int dp, char kind, int *out) {
    int n = tp * pp * dp, m = 0;
    coord a = coord_of(r, tp, pp, dp);
    for (int s = 0; s < n; s++) {
        coord b = coord_of(s, tp, pp, dp);
        int in = 0;
        if (kind == 't') in = a.d == b.d && a.p == b.p;
        if (kind == 'd') in = a.t == b.t && a.p == b.p;
        if (kind == 'p') in = a.t == b.t && a.d == b.d;
        if (kind == 'e') in = a.t == b.t && a.d == b.d && (b.p == 0 || b.p == pp - 1);
        if (in) out[m++] = s;
    }
    return m;
}

static void check_group(const char *dir, int r, int tp, int pp, int dp, char kind, const char *name) {
    int mem[64];
    int m = members_of(r, tp, pp, dp, kind, mem);
    int idx = -1, sum = 0, max = -1;
    for (int i = 0; i < m; i++) {
        if (mem[i] == r) idx = i;
        sum += mem[i];
        if (mem[i] > max) max = mem[i];
    }
    char key[64];
    double w[64];
    snprintf(key, sizeof key, "%s_size_rank", name);
    w[0] = m;
    w[1] = idx;
    expect_values(dir, r, key, w, 2, 0.0);
    snprintf(key, sizeof key, "%s_sum_max", name);
    w[0] = sum;
    w[1] = max;
    expect_values(dir, r, key, w, 2, 0.0);
    snprintf(key, sizeof key, "%s_members", name);
    for (int i = 0; i < m; i++) w[i] = mem[i];
    expect_values(dir, r, key, w, m, 0.0);
}

static void check_probe(const char *dir, int tp, int pp, int dp, int transport) {
    const int n = tp * pp * dp;
    for (int r = 0; r < n; r++) {
        double w[8];
        w[0] = n;
        w[1] = r;
        w[2] = transport;
        expect_values(dir, r, "world", w, 3, 0.0);
        coord c = coord_of(r, tp, pp, dp);
        w[0] = c.t;
        w[1] = c.d;
        w[2] = c.p;
        expect_values(dir, r, "coords", w, 3, 0.0);
        check_world_ops(dir, n, r);
        check_group(dir, r, tp, pp, dp, 't', "tp");
        check_group(dir, r, tp, pp, dp, 'd', "dp");
        check_group(dir, r, tp, pp, dp, 'p', "pp");
        int member = c.p == 0 || c.p == pp - 1;
        w[0] = member;
        expect_values(dir, r, "emb_member", w, 1, 0.0);
        if (member) check_group(dir, r, tp, pp, dp, 'e', "emb");
        if (pp > 1) {
            /* stage p received the world rank of the same (tp, dp) on stage p-1 */
            int prev = -1;
            for (int s = 0; s < n && c.p > 0; s++) {
                coord b = coord_of(s, tp, pp, dp);
                if (b.t == c.t && b.d == c.d && b.p == c.p - 1) prev = s;
            }
            w[0] = prev;
            expect_values(dir, r, "pp_recv", w, 1, 0.0);
        }
        w[0] = 1;
        expect_values(dir, r, "done", w, 1, 0.0);
    }
}

/* ------------------------------------------------------------------------ */
/* The transport through mpirun                                             */

static void probe_layout(int tp, int pp, int dp) {
    need_mpi();
    tmpdir t = make_tmpdir();
    run_out r = mpirun_probe(&t, tp * pp * dp, tp, pp, dp);
    cr_assert_eq(r.status, 0, "mpirun %dx%dx%d exited %d:\n%s", tp, pp, dp, r.status, r.text);
    check_probe(t.path, tp, pp, dp, 1);
    free(r.text);
    remove_tmpdir(&t);
}

Test(comm, two_ranks_data_parallel, .timeout = 90) { probe_layout(1, 1, 2); }

Test(comm, two_ranks_tensor_parallel, .timeout = 90) { probe_layout(2, 1, 1); }

/* The 2x1x2 mesh (tp=2, pp=1, dp=2): TP, DP groups of two, PP of one. */
Test(comm, four_ranks_tp2_dp2, .timeout = 90) { probe_layout(2, 1, 2); }

/* tp=2, pp=2: PP groups, embedding groups of two and stage-to-stage p2p. */
Test(comm, four_ranks_tp2_pp2, .timeout = 90) { probe_layout(2, 2, 1); }

/* pp=4: middle stages are outside the embedding group. */
Test(comm, four_ranks_pp4, .timeout = 90) { probe_layout(1, 4, 1); }

Test(comm, single_process_without_mpirun_uses_no_transport, .timeout = 60) {
    tmpdir t = make_tmpdir();
    char *argv[] = {(char *)probe_path(), t.path, "1", "1", "1", NULL};
    /* no launcher variables: a world of one */
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("PMI_SIZE");
    unsetenv("PMI_RANK");
    unsetenv("SLURM_STEP_NUM_TASKS");
    unsetenv("SLURM_NTASKS");
    unsetenv("SLURM_PROCID");
    run_out r = run_argv(argv, t.path, 30);
    cr_assert_eq(r.status, 0, "probe exited %d:\n%s", r.status, r.text);
    check_probe(t.path, 1, 1, 1, 0);
    free(r.text);

    /* a layout that needs 2 ranks in a world of one: error naming the numbers */
    char *bad[] = {(char *)probe_path(), t.path, "2", "1", "1", NULL};
    r = run_argv(bad, t.path, 30);
    cr_assert_eq(r.status, 2, "exit %d:\n%s", r.status, r.text);
    cr_assert(strstr(r.text, "trident: parallel.tp (2) x parallel.pp (1) x parallel.dp (1) = 2, "
                             "but the world has 1 rank"),
              "%s", r.text);
    free(r.text);
    remove_tmpdir(&t);
}

Test(comm, mismatched_world_fails_fast_naming_the_numbers, .timeout = 60) {
    need_mpi();
    tmpdir t = make_tmpdir();
    run_out r = mpirun_probe(&t, 4, 2, 1, 3);
    cr_assert_neq(r.status, 0, "%s", r.text);
    cr_assert(strstr(r.text, "trident: parallel.tp (2) x parallel.pp (1) x parallel.dp (3) = 6, "
                             "but the world has 4 ranks"),
              "%s", r.text);
    cr_assert_lt(r.secs, 20.0, "took %.1f s", r.secs);
    char p0[512];
    snprintf(p0, sizeof p0, "%s/probe_0.txt", t.path);
    cr_assert(!file_exists(p0), "a rank went on after the layout error");
    free(r.text);
    remove_tmpdir(&t);
}

/* ------------------------------------------------------------------------ */
/* The watchdog: a rank that never joins ends the job, named                */

/* mpirun -np N PROBE DIR TP 1 DP --stall OP 0.5: the last world rank never
 * joins OP on its DP group. The job must end within seconds, exit 124, with
 * the waiting rank's one-line report containing `want`. Before the watchdog
 * the waiting ranks spun in MPI forever (the test's 30 s limit fails it). */
static void expect_watchdog(int tp, int dp, const char *op, const char *want) {
    need_mpi();
    tmpdir t = make_tmpdir();
    char np[16], stp[16], sdp[16];
    snprintf(np, sizeof np, "%d", tp * dp);
    snprintf(stp, sizeof stp, "%d", tp);
    snprintf(sdp, sizeof sdp, "%d", dp);
    char *argv[20];
    int a = 0;
    argv[a++] = "mpirun";
    argv[a++] = "-np";
    argv[a++] = np;
    if (geteuid() == 0) argv[a++] = "--allow-run-as-root";
    argv[a++] = "--oversubscribe";
    argv[a++] = "--bind-to";
    argv[a++] = "none";
    argv[a++] = (char *)probe_path();
    argv[a++] = t.path;
    argv[a++] = stp;
    argv[a++] = "1";
    argv[a++] = sdp;
    argv[a++] = "--stall";
    argv[a++] = (char *)op;
    argv[a++] = "0.5";
    argv[a] = NULL;
    setenv("OMP_NUM_THREADS", "1", 1);
    run_out r = run_argv(argv, t.path, 30);
    cr_assert_eq(r.status, 124, "%s: exit %d:\n%s", op, r.status, r.text);
    cr_assert_lt(r.secs, 10.0, "%s: took %.1f s", op, r.secs);
    cr_assert(strstr(r.text, want), "%s: want '%s' in\n%s", op, want, r.text);
    cr_assert(strstr(r.text, "has waited 0.5 s (parallel.timeout_s = 0.5): waiting for "), "%s", r.text);
    cr_assert(!strstr(r.text, "was not stopped"), "%s", r.text);
    free(r.text);
    remove_tmpdir(&t);
}

Test(comm_watchdog, blocking_allreduce_names_group_members_as_world_ranks, .timeout = 60) {
    /* tp=2 x dp=2: rank 1's DP group is world ranks {1, 3}; rank 3 stalls */
    expect_watchdog(2, 2, "allreduce",
                    "trident: rank 1: watchdog: step 7 (probe): all-reduce over dp of 8 bytes has waited 0.5 s "
                    "(parallel.timeout_s = 0.5): waiting for world rank 3 (dp = world ranks 1,3); aborting the job");
}

Test(comm_watchdog, wait_of_a_nonblocking_allreduce, .timeout = 60) {
    expect_watchdog(1, 2, "iallreduce", "trident: rank 0: watchdog: step 7 (probe): all-reduce over dp of 12 bytes");
}

Test(comm_watchdog, reduce_scatter, .timeout = 60) {
    expect_watchdog(1, 2, "reduce_scatter", "rank 0: watchdog: step 7 (probe): reduce-scatter over dp of 32 bytes");
}

Test(comm_watchdog, allgather, .timeout = 60) {
    expect_watchdog(1, 2, "allgather", "rank 0: watchdog: step 7 (probe): all-gather over dp of 20 bytes");
}

Test(comm_watchdog, wait_of_a_nonblocking_reduce_scatter, .timeout = 60) {
    expect_watchdog(1, 2, "ireduce_scatter", "rank 0: watchdog: step 7 (probe): reduce-scatter over dp of 32 bytes");
}

Test(comm_watchdog, wait_of_a_nonblocking_allgather, .timeout = 60) {
    expect_watchdog(1, 2, "iallgather", "rank 0: watchdog: step 7 (probe): all-gather over dp of 20 bytes");
}

Test(comm_watchdog, broadcast_from_the_stalled_rank, .timeout = 60) {
    expect_watchdog(1, 2, "broadcast", "rank 0: watchdog: step 7 (probe): broadcast over dp of 24 bytes");
}

Test(comm_watchdog, barrier, .timeout = 60) {
    expect_watchdog(1, 2, "barrier", "rank 0: watchdog: step 7 (probe): barrier over dp of 0 bytes");
}

Test(comm_watchdog, receive_names_the_peer, .timeout = 60) {
    expect_watchdog(1, 2, "recv",
                    "rank 0: watchdog: step 7 (probe): receive over dp of 28 bytes from world rank 1 (tag 5) has "
                    "waited 0.5 s (parallel.timeout_s = 0.5): waiting for world rank 1; aborting the job");
}

Test(comm_watchdog, send_too_large_to_go_out_eagerly, .timeout = 60) {
    expect_watchdog(1, 2, "send", "rank 0: watchdog: step 7 (probe): send over dp of 4194304 bytes to world rank 1");
}

/* ------------------------------------------------------------------------ */
/* The launcher                                                             */

/* tridentrun ARGS... with a deadline. */
static run_out launcher(const tmpdir *t, char *const args[], double limit) {
    char *argv[64];
    int a = 0;
    argv[a++] = (char *)tridentrun_path();
    for (int i = 0; args[i]; i++) argv[a++] = args[i];
    argv[a] = NULL;
    clean_env();
    return run_argv(argv, t->path, limit);
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
}

Test(tridentrun, dry_run_prints_rank_map_and_command, .timeout = 30) {
    tmpdir t = make_tmpdir();
    char logs[300];
    snprintf(logs, sizeof logs, "%s/logs", t.path);
    char *args[] = {"--dry-run", "--nproc-per-node", "3", "--log-dir", logs, "--", "/bin/echo", "hi there", NULL};
    run_out r = launcher(&t, args, 20);
    cr_assert_eq(r.status, 0, "%s", r.text);
    cr_assert(strstr(r.text, "mpirun -np 3 "), "%s", r.text);
    cr_assert(strstr(r.text, "--rank-exec --log-dir "), "%s", r.text);
    cr_assert(strstr(r.text, "-- /bin/echo 'hi there'\n"), "%s", r.text);
    cr_assert(strstr(r.text, "-x OMP_WAIT_POLICY=PASSIVE"), "%s", r.text);
    int cores = usable_cores();
    int k = cores / 3 > 0 ? cores / 3 : 1;
    char want[64];
    snprintf(want, sizeof want, "-x OMP_NUM_THREADS=%d ", k);
    cr_assert(strstr(r.text, want), "want '%s' in\n%s", want, r.text);
    cr_assert_eq(strstr(r.text, "--oversubscribe") != NULL, 3 > cores, "%s", r.text);
    cr_assert_eq(strstr(r.text, "--allow-run-as-root") != NULL, geteuid() == 0, "%s", r.text);
    for (int q = 0; q < 3; q++) {
        char row[512];
        snprintf(row, sizeof row, "%s/rank_%d.log", logs, q);
        cr_assert(strstr(r.text, row), "no row for rank %d:\n%s", q, r.text);
    }
    cr_assert(!file_exists(logs), "--dry-run created the log directory");
    free(r.text);
    remove_tmpdir(&t);
}

Test(tridentrun, dry_run_reads_layout_from_config_and_overrides, .timeout = 30) {
    tmpdir t = make_tmpdir();
    char cfg[300];
    snprintf(cfg, sizeof cfg, "%s/c.json", t.path);
    write_file(cfg, "{\"data\": {\"train\": \"x.bin\"}, \"parallel\": {\"tp\": 2, \"pp\": 2, \"dp\": 1}}\n");
    char *args[] = {"--dry-run", "--", "trident", "train", cfg, NULL};
    run_out r = launcher(&t, args, 20);
    cr_assert_eq(r.status, 0, "%s", r.text);
    cr_assert(strstr(r.text, "mpirun -np 4 "), "%s", r.text);
    /* rank rows: "rank host tp dp pp" from the independent enumeration */
    for (int q = 0; q < 4; q++) {
        coord c = coord_of(q, 2, 2, 1);
        char row[128];
        snprintf(row, sizeof row, "%6d  %-24s %4d %4d %4d", q, "localhost", c.t, c.d, c.p);
        cr_assert(strstr(r.text, row), "no row '%s' in\n%s", row, r.text);
    }
    free(r.text);

    /* --set overrides change the layout: tp=1, dp=3 x pp=2 = 6 ranks (a global batch that 3 DP ranks share:
     * a config the trainer refuses makes the dry run exit 2) */
    char *args2[] = {"--dry-run", "--", "trident", "train", cfg, "--set", "parallel.tp=1", "--set=parallel.dp=3",
                     "--set", "train.global_batch=12", NULL};
    r = launcher(&t, args2, 20);
    cr_assert_eq(r.status, 0, "%s", r.text);
    cr_assert(strstr(r.text, "mpirun -np 6 "), "%s", r.text);
    coord c = coord_of(5, 1, 2, 3);
    char row[128];
    snprintf(row, sizeof row, "%6d  %-24s %4d %4d %4d", 5, "localhost", c.t, c.d, c.p);
    cr_assert(strstr(r.text, row), "no row '%s' in\n%s", row, r.text);
    free(r.text);
    remove_tmpdir(&t);
}

/* The figure after "label " and before " bytes)" on the line of text that
 * starts with prefix, e.g. the saved bytes of "rank 2: ...". */
static size_t bytes_on_line(const char *text, const char *prefix, const char *label) {
    const char *line = strstr(text, prefix);
    cr_assert_not_null(line, "no line '%s' in\n%s", prefix, text);
    const char *end = strchr(line, '\n');
    const char *at = strstr(line, label);
    cr_assert(at && (!end || at < end), "no '%s' on the line '%s' in\n%s", label, prefix, text);
    at = strchr(at, '(');
    cr_assert_not_null(at);
    return (size_t)strtoull(at + 1, NULL, 10);
}

/* pp = 2 with an uneven parallel.pp_layout: each rank's stage, its layer
 * range, and its saved activations = 1F1B's min(pp - s, m) slots x
 * tri_slot_bytes of the hand-written chunk */
Test(tridentrun, dry_run_shows_each_stage_of_an_uneven_pipeline, .timeout = 30) {
    tmpdir t = make_tmpdir();
    char cfg[300];
    snprintf(cfg, sizeof cfg, "%s/c.json", t.path);
    write_file(cfg, "{\"data\": {\"train\": \"x.bin\"}, \"model\": {\"n_layer\": 6, \"n_head\": 2, \"n_embd\": 32, "
                    "\"seq_len\": 16, \"vocab_size\": 300}, \"train\": {\"global_batch\": 12, \"micro_batch\": 3}, "
                    "\"parallel\": {\"tp\": 1, \"pp\": 2, \"dp\": 1, \"pp_layout\": \"2, 4\"}}\n");
    char *args[] = {"--dry-run", "--", "trident", "train", cfg, NULL};
    run_out r = launcher(&t, args, 20);
    cr_assert_eq(r.status, 0, "%s", r.text);
    cr_assert(strstr(r.text, "pipeline: schedule 1f1b, parallel.pp 2 x vpp 1, m = 4 micro-batches"), "%s", r.text);
    tri_model_cfg m = {.n_layer = 6, .n_head = 2, .n_embd = 32, .seq_len = 16, .vocab_size = 300};
    int l0[2] = {0, 1}, l1[4] = {2, 3, 4, 5};
    tri_chunk_spec specs[2] = {{2, l0, 1, 0}, {4, l1, 0, 1}};
    const char *chunk[2] = {"chunk 0: layers 0-1 +embedding: 2 slots x ", "chunk 0: layers 2-5 +head: 1 slot x "};
    for (int s = 0; s < 2; s++) {
        char head[64];
        snprintf(head, sizeof head, "rank %d: stage %d, ", s, s);
        cr_assert(strstr(r.text, head), "no '%s' in\n%s", head, r.text);
        cr_assert(strstr(r.text, chunk[s]), "no '%s' in\n%s", chunk[s], r.text);
        tri_gpt g;
        cr_assert_eq(tri_gpt_describe(&g, &m, 1, 0, &specs[s], 1), 0);
        int slots = 2 - s < 4 ? 2 - s : 4; /* min(pp - s, m) */
        size_t want = (size_t)slots * tri_slot_bytes(&g, 0, 3, 16, TRI_RECOMPUTE_NONE, 0, NULL);
        size_t params = tri_gpt_local_elems(&g) * sizeof(float);
        tri_gpt_free(&g);
        cr_expect_eq(bytes_on_line(r.text, head, "saved activations "), want, "stage %d saved bytes", s);
        cr_expect_eq(bytes_on_line(r.text, head, "parameters "), params, "stage %d parameter bytes", s);
    }
    free(r.text);

    /* a layout that does not fit the model: the reason with the numbers */
    char *args2[] = {"--dry-run", "--", "trident", "train", cfg, "--set", "parallel.pp_layout=1,2", NULL};
    r = launcher(&t, args2, 20);
    cr_assert(strstr(r.text, "parallel.pp_layout \"1,2\" sums to 3 layers, model.n_layer is 6"), "%s", r.text);
    cr_assert(strstr(r.text, "pipeline: the trainer would refuse this config"), "%s", r.text);
    cr_expect_eq(r.status, 2, "a dry run of a config the trainer refuses: %s", r.text);
    free(r.text);
    remove_tmpdir(&t);
}

Test(tridentrun, layout_mismatch_is_an_error_before_starting, .timeout = 30) {
    tmpdir t = make_tmpdir();
    char cfg[300], logs[300];
    snprintf(cfg, sizeof cfg, "%s/c.json", t.path);
    snprintf(logs, sizeof logs, "%s/logs", t.path);
    write_file(cfg, "{\"data\": {\"train\": \"x.bin\"}, \"parallel\": {\"tp\": 2, \"pp\": 1, \"dp\": 2}}\n");
    char *args[] = {"--nproc-per-node", "3", "--log-dir", logs, "--", "trident", "train", cfg, NULL};
    run_out r = launcher(&t, args, 20);
    cr_assert_eq(r.status, 2, "%s", r.text);
    cr_assert_eq(count_lines(r.text), 1, "%s", r.text);
    cr_assert(strstr(r.text, "tridentrun: parallel.tp (2) x parallel.pp (1) x parallel.dp (2) = 4, "
                             "but --nproc-per-node 3 x 1 host = 3 ranks"),
              "%s", r.text);
    cr_assert(!file_exists(logs), "something started");
    free(r.text);

    /* a config error is the loader's one line, exit 2 */
    char *args2[] = {"--dry-run", "--", "trident", "train", cfg, "--set", "parallel.nope=1", NULL};
    r = launcher(&t, args2, 20);
    cr_assert_eq(r.status, 2, "%s", r.text);
    cr_assert(strstr(r.text, "parallel.nope"), "%s", r.text);
    free(r.text);
    remove_tmpdir(&t);
}

Test(tridentrun, hostfile_places_nproc_ranks_per_host, .timeout = 30) {
    tmpdir t = make_tmpdir();
    char hf[300];
    snprintf(hf, sizeof hf, "%s/hosts", t.path);
    write_file(hf, "# two nodes\nnodeA slots=8\n\n  nodeB   # the second\n");
    char *args[] = {"--dry-run", "--hostfile", hf, "--nproc-per-node", "2", "--", "/bin/true", NULL};
    run_out r = launcher(&t, args, 20);
    cr_assert_eq(r.status, 0, "%s", r.text);
    cr_assert(strstr(r.text, "mpirun -np 4 -H nodeA:2,nodeB:2 "), "%s", r.text);
    for (int q = 0; q < 4; q++) {
        char row[128];
        snprintf(row, sizeof row, "%6d  %-24s", q, q < 2 ? "nodeA" : "nodeB");
        cr_assert(strstr(r.text, row), "no row '%s' in\n%s", row, r.text);
    }
    free(r.text);

    write_file(hf, "nodeA\nnodeA\n");
    r = launcher(&t, args, 20);
    cr_assert_eq(r.status, 2, "%s", r.text);
    cr_assert(strstr(r.text, "listed twice"), "%s", r.text);
    free(r.text);
    remove_tmpdir(&t);
}

/* Before, slots=N was read past and ignored: every host got 1 rank (or
 * tp*pp*dp / hosts), whatever the host file said. */
Test(tridentrun, hostfile_slots_are_filled_in_order_without_nproc_per_node, .timeout = 30) {
    tmpdir t = make_tmpdir();
    char hf[300], cfg[300];
    snprintf(hf, sizeof hf, "%s/hosts", t.path);
    snprintf(cfg, sizeof cfg, "%s/c.json", t.path);
    /* any command: every slot, as mpirun without -np */
    write_file(hf, "nodeA slots=2\nnodeB slots=3   # five in all\n");
    char *args[] = {"--dry-run", "--hostfile", hf, "--", "/bin/true", NULL};
    run_out r = launcher(&t, args, 20);
    cr_assert_eq(r.status, 0, "%s", r.text);
    cr_assert(strstr(r.text, "mpirun -np 5 -H nodeA:2,nodeB:3 "), "%s", r.text);
    for (int q = 0; q < 5; q++) {
        char row[128];
        snprintf(row, sizeof row, "%6d  %-24s", q, q < 2 ? "nodeA" : "nodeB");
        cr_assert(strstr(r.text, row), "no row '%s' in\n%s", row, r.text);
    }
    free(r.text);
    /* the trainer: tp x dp = 4 ranks fill nodeA's 3 slots, then 1 of nodeB's */
    write_file(cfg, "{\"data\": {\"train\": \"x.bin\"}, \"parallel\": {\"tp\": 2, \"dp\": 2}}\n");
    write_file(hf, "nodeA slots=3\nnodeB slots=3\nnodeC slots=8\n");
    char *train[] = {"--dry-run", "--hostfile", hf, "--", "trident", "train", cfg, NULL};
    r = launcher(&t, train, 20);
    cr_assert_eq(r.status, 0, "%s", r.text);
    cr_assert(strstr(r.text, "mpirun -np 4 -H nodeA:3,nodeB:1 "), "%s", r.text);
    cr_assert(strstr(r.text, "4 ranks = 3 on nodeA + 1 on nodeB + 0 on nodeC"), "%s", r.text);
    cr_assert(strstr(r.text, "     3  nodeB "), "%s", r.text);
    free(r.text);
    /* with --nproc-per-node N every host runs N, within its slots */
    char *nproc[] = {"--dry-run", "--hostfile", hf, "--nproc-per-node", "3", "--", "/bin/true", NULL};
    r = launcher(&t, nproc, 20);
    cr_assert_eq(r.status, 0, "%s", r.text);
    cr_assert(strstr(r.text, "mpirun -np 9 -H nodeA:3,nodeB:3,nodeC:3 "), "%s", r.text);
    free(r.text);
    remove_tmpdir(&t);
}

Test(tridentrun, hostfile_slots_errors_name_the_line_and_the_numbers, .timeout = 30) {
    tmpdir t = make_tmpdir();
    char hf[300], cfg[300];
    snprintf(hf, sizeof hf, "%s/hosts", t.path);
    snprintf(cfg, sizeof cfg, "%s/c.json", t.path);
    write_file(cfg, "{\"data\": {\"train\": \"x.bin\"}, \"parallel\": {\"tp\": 2, \"dp\": 2}}\n");
    static const struct {
        const char *hosts, *nproc, *want;
        int train;
    } cases[] = {
        {"nodeA slots=8\nnodeB slots=2\n", "4", ":2: host nodeB has slots=2, fewer than --nproc-per-node 4", 0},
        {"nodeA slots=2\n\nnodeB\n", NULL, ":3: host nodeB has no slots=N but other hosts have", 0},
        {"nodeA slots=1\nnodeB slots=2\n", NULL, "= 4 ranks, but hostfile", 1},
        {"nodeA slots=0\n", NULL, ":1: 'slots=0': expected \"HOST [slots=N]\"", 0},
        {"nodeA slots=two\n", NULL, ":1: 'slots=two'", 0},
        {"nodeA max_slots=4\n", NULL, ":1: 'max_slots=4'", 0},
        {"nodeA slots=2 slots=3\n", NULL, ":1: 'slots=3'", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_file(hf, cases[i].hosts);
        char *args[12];
        int a = 0;
        args[a++] = "--dry-run";
        args[a++] = "--hostfile";
        args[a++] = hf;
        if (cases[i].nproc) {
            args[a++] = "--nproc-per-node";
            args[a++] = (char *)cases[i].nproc;
        }
        args[a++] = "--";
        if (cases[i].train) {
            args[a++] = "trident";
            args[a++] = "train";
            args[a++] = cfg;
        } else {
            args[a++] = "/bin/true";
        }
        args[a] = NULL;
        run_out r = launcher(&t, args, 20);
        cr_assert_eq(r.status, 2, "case %zu: exit %d:\n%s", i, r.status, r.text);
        cr_assert_eq(count_lines(r.text), 1, "case %zu:\n%s", i, r.text);
        cr_assert(strncmp(r.text, "tridentrun: ", 12) == 0, "case %zu:\n%s", i, r.text);
        cr_assert(strstr(r.text, cases[i].want), "case %zu: want '%s' in\n%s", i, cases[i].want, r.text);
        free(r.text);
    }
    remove_tmpdir(&t);
}

Test(tridentrun, argument_errors_are_one_line_exit_2, .timeout = 30) {
    tmpdir t = make_tmpdir();
    char missing[300];
    snprintf(missing, sizeof missing, "%s/no_such_hostfile", t.path);
    char *cases[][8] = {
        {"--bogus", "--", "/bin/true", NULL},
        {"--nproc-per-node", "0", "--", "/bin/true", NULL},
        {"--nproc-per-node", "two", "--", "/bin/true", NULL},
        {"--max-restarts", "-1", "--", "/bin/true", NULL},
        {"--nproc-per-node", NULL},
        {"--dry-run", "--", NULL},
        {"--hostfile", missing, "--", "/bin/true", NULL},
        {"--dry-run", "--", "trident", "train", NULL},
        {"--grace-s", "-1", "--", "/bin/true", NULL},
        {"--grace-s=soon", "--", "/bin/true", NULL},
    };
    const char *want[] = {"'--bogus'",
                          "--nproc-per-node",
                          "'two'",
                          "--max-restarts",
                          "needs a value",
                          "missing COMMAND",
                          "no_such_hostfile",
                          "CONFIG",
                          "--grace-s: expected seconds",
                          "'soon'"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_out r = launcher(&t, cases[i], 20);
        cr_assert_eq(r.status, 2, "case %zu: exit %d:\n%s", i, r.status, r.text);
        cr_assert_eq(count_lines(r.text), 1, "case %zu:\n%s", i, r.text);
        cr_assert(strncmp(r.text, "tridentrun: ", 12) == 0, "case %zu:\n%s", i, r.text);
        cr_assert(strstr(r.text, want[i]), "case %zu: want '%s' in\n%s", i, want[i], r.text);
        free(r.text);
    }
    char *help[] = {"--help", NULL};
    run_out r = launcher(&t, help, 20);
    cr_assert_eq(r.status, 0);
    cr_assert(strstr(r.text, "--max-restarts"), "%s", r.text);
    free(r.text);
    remove_tmpdir(&t);
}

Test(tridentrun, logs_per_rank_and_rank0_on_console, .timeout = 60) {
    need_mpi();
    tmpdir t = make_tmpdir();
    char logs[300];
    snprintf(logs, sizeof logs, "%s/logs", t.path);
    char *args[] = {"--nproc-per-node",
                    "2",
                    "--log-dir",
                    logs,
                    "--",
                    "/bin/sh",
                    "-c",
                    "echo out-$OMPI_COMM_WORLD_RANK; echo err-$OMPI_COMM_WORLD_RANK >&2",
                    NULL};
    run_out r = launcher(&t, args, 40);
    cr_assert_eq(r.status, 0, "%s", r.text);
    cr_assert(strstr(r.text, "out-0\n") && strstr(r.text, "err-0\n"), "%s", r.text);
    cr_assert(!strstr(r.text, "out-1") && !strstr(r.text, "err-1"), "%s", r.text);
    for (int q = 0; q < 2; q++) {
        char p[400], o[16], e[16];
        snprintf(p, sizeof p, "%s/rank_%d.log", logs, q);
        snprintf(o, sizeof o, "out-%d\n", q);
        snprintf(e, sizeof e, "err-%d\n", q);
        char *log = slurp(p);
        cr_assert(strstr(log, o) && strstr(log, e), "%s: '%s'", p, log);
        free(log);
        snprintf(p, sizeof p, "%s/rank_%d.status", logs, q);
        log = slurp(p);
        cr_assert(strstr(log, " exit 0\n"), "%s: '%s'", p, log);
        free(log);
    }
    free(r.text);
    remove_tmpdir(&t);
}

Test(tridentrun, tee_prefixes_every_rank, .timeout = 60) {
    need_mpi();
    tmpdir t = make_tmpdir();
    char logs[300];
    snprintf(logs, sizeof logs, "%s/logs", t.path);
    char *args[] = {"--tee",
                    "--nproc-per-node",
                    "3",
                    "--log-dir",
                    logs,
                    "--",
                    "/bin/sh",
                    "-c",
                    "echo line-$OMPI_COMM_WORLD_RANK; printf tail-$OMPI_COMM_WORLD_RANK",
                    NULL};
    run_out r = launcher(&t, args, 40);
    cr_assert_eq(r.status, 0, "%s", r.text);
    for (int q = 0; q < 3; q++) {
        char want[64];
        snprintf(want, sizeof want, "[rank %d] line-%d\n", q, q);
        cr_assert(strstr(r.text, want), "want '%s' in\n%s", want, r.text);
        snprintf(want, sizeof want, "[rank %d] tail-%d\n", q, q);
        cr_assert(strstr(r.text, want), "want '%s' in\n%s", want, r.text);
    }
    free(r.text);
    remove_tmpdir(&t);
}

Test(tridentrun, failing_rank_is_named_with_its_log_tail, .timeout = 60) {
    need_mpi();
    tmpdir t = make_tmpdir();
    char logs[300];
    snprintf(logs, sizeof logs, "%s/logs", t.path);
    char *args[] = {"--nproc-per-node",
                    "3",
                    "--log-dir",
                    logs,
                    "--",
                    "/bin/sh",
                    "-c",
                    "if [ $OMPI_COMM_WORLD_RANK = 1 ]; then i=1; while [ $i -le 30 ]; do "
                    "echo line $i; i=$((i+1)); done; exit 3; fi; sleep 30",
                    NULL};
    run_out r = launcher(&t, args, 40);
    cr_assert_eq(r.status, 3, "exit %d:\n%s", r.status, r.text);
    cr_assert_lt(r.secs, 20.0, "took %.1f s: the others were not stopped", r.secs);
    cr_assert(strstr(r.text, "tridentrun: rank 1 failed (exit 3)"), "%s", r.text);
    /* the last 20 lines: 11..30 */
    cr_assert(strstr(r.text, "| line 30\n") && strstr(r.text, "| line 11\n"), "%s", r.text);
    cr_assert(!strstr(r.text, "| line 10\n"), "%s", r.text);
    free(r.text);

    /* a rank killed by a signal (not an MPI program: named by its status file) */
    char *args2[] = {"--nproc-per-node",
                     "2",
                     "--log-dir",
                     logs,
                     "--",
                     "/bin/sh",
                     "-c",
                     "if [ $OMPI_COMM_WORLD_RANK = 0 ]; then echo dying; kill -SEGV $$; fi; sleep 30",
                     NULL};
    r = launcher(&t, args2, 40);
    cr_assert_eq(r.status, 128 + SIGSEGV, "exit %d:\n%s", r.status, r.text);
    cr_assert(strstr(r.text, "tridentrun: rank 0 failed (signal 11"), "%s", r.text);
    cr_assert(strstr(r.text, "| dying\n"), "%s", r.text);
    cr_assert_lt(r.secs, 20.0, "took %.1f s", r.secs);
    free(r.text);
    remove_tmpdir(&t);
}

Test(tridentrun, restarts_append_resume, .timeout = 90) {
    need_mpi();
    tmpdir t = make_tmpdir();
    char logs[300];
    snprintf(logs, sizeof logs, "%s/logs", t.path);
    /* fails unless --resume is among its arguments */
    char *args[] = {"--max-restarts",
                    "2",
                    "--nproc-per-node",
                    "2",
                    "--log-dir",
                    logs,
                    "--",
                    "/bin/sh",
                    "-c",
                    "echo args: \"$*\"; case \"$*\" in *--resume*) exit 0;; esac; "
                    "[ $OMPI_COMM_WORLD_RANK = 1 ] && exit 4; sleep 30",
                    "sh",
                    NULL};
    run_out r = launcher(&t, args, 60);
    cr_assert_eq(r.status, 0, "exit %d:\n%s", r.status, r.text);
    cr_assert(strstr(r.text, "tridentrun: rank 1 failed (exit 4); restart 1 of 2"), "%s", r.text);
    cr_assert(!strstr(r.text, "restart 2 of 2"), "%s", r.text);
    char p[400];
    snprintf(p, sizeof p, "%s/rank_1.log", logs);
    char *log = slurp(p);
    cr_assert(strstr(log, "attempt 2") && strstr(log, "args: --resume"), "%s", log);
    free(log);
    free(r.text);

    /* --resume already given: not appended twice; the restarts run out */
    char *args2[] = {"--max-restarts", "1",  "--nproc-per-node",          "2",  "--log-dir", logs, "--",
                     "/bin/sh",        "-c", "echo args: \"$*\"; exit 5", "sh", "--resume",  NULL};
    r = launcher(&t, args2, 60);
    cr_assert_eq(r.status, 5, "exit %d:\n%s", r.status, r.text);
    cr_assert(strstr(r.text, "restart 1 of 1"), "%s", r.text);
    cr_assert(!strstr(r.text, "--resume --resume"), "%s", r.text);
    free(r.text);
    remove_tmpdir(&t);
}

/* Is pid gone (or a zombie waiting for init to reap it)? */
static int process_gone(int pid) {
    if (kill(pid, 0) != 0) return 1;
    char st[64], buf[256] = "";
    snprintf(st, sizeof st, "/proc/%d/stat", pid);
    FILE *f = fopen(st, "r");
    if (f == NULL) return 1;
    if (!fgets(buf, sizeof buf, f)) buf[0] = '\0';
    fclose(f);
    char *rp = strrchr(buf, ')');
    return rp && rp[1] == ' ' && rp[2] == 'Z';
}

/* Starts 2 ranks of `exec sleep 60` under tridentrun; returns tridentrun's
 * pid and the ranks' pids once both run. */
static pid_t start_sleepers(const tmpdir *t, int rank_pid[2], const char *out) {
    char logs[300], script[600];
    snprintf(logs, sizeof logs, "%s/logs", t->path);
    snprintf(script, sizeof script, "echo $$ > %s/pid_$OMPI_COMM_WORLD_RANK; exec sleep 60", t->path);
    char *argv[] = {
        (char *)tridentrun_path(), "--nproc-per-node", "2", "--log-dir", logs, "--", "/bin/sh", "-c", script, NULL};
    clean_env();
    pid_t pid = spawn(argv, out);
    char p[2][400];
    for (int q = 0; q < 2; q++) snprintf(p[q], sizeof p[q], "%s/pid_%d", t->path, q);
    double t0 = now_s();
    while (!(file_exists(p[0]) && file_exists(p[1]))) {
        if (now_s() - t0 > 20.0) {
            kill(-pid, SIGKILL);
            cr_assert_fail("ranks did not start");
        }
        usleep(50000);
    }
    usleep(200000);
    for (int q = 0; q < 2; q++) {
        char *s = slurp(p[q]);
        rank_pid[q] = atoi(s);
        free(s);
        cr_assert_gt(rank_pid[q], 0);
    }
    return pid;
}

/* kill -9 of the launcher: mpirun gets SIGTERM (parent-death signal) and stops the ranks. */
Test(tridentrun, killed_launcher_takes_the_ranks_down, .timeout = 60) {
    need_mpi();
    tmpdir t = make_tmpdir();
    char out[400];
    snprintf(out, sizeof out, "%s/out.txt", t.path);
    int rank_pid[2];
    pid_t pid = start_sleepers(&t, rank_pid, out);
    cr_assert_eq(kill(pid, SIGKILL), 0);
    int status = wait_bounded(pid, 10, "tridentrun after SIGKILL");
    cr_assert_eq(status, 128 + SIGKILL);
    double t0 = now_s();
    while (!(process_gone(rank_pid[0]) && process_gone(rank_pid[1]))) {
        if (now_s() - t0 > 15.0) {
            kill(rank_pid[0], SIGKILL);
            kill(rank_pid[1], SIGKILL);
            cr_assert_fail("ranks still run 15 s after the launcher was killed");
        }
        usleep(50000);
    }
    remove_tmpdir(&t);
}

Test(tridentrun, sigterm_stops_every_rank, .timeout = 60) {
    need_mpi();
    tmpdir t = make_tmpdir();
    char out[400];
    snprintf(out, sizeof out, "%s/out.txt", t.path);
    int rank_pid[2];
    pid_t pid = start_sleepers(&t, rank_pid, out);
    cr_assert_eq(kill(pid, SIGTERM), 0);
    int status = wait_bounded(pid, 20, "tridentrun after SIGTERM");
    char *text = slurp(out);
    cr_assert_eq(status, 128 + SIGTERM, "exit %d:\n%s", status, text);
    cr_assert(strstr(text, "stopped by signal"), "%s", text);
    for (int q = 0; q < 2; q++) cr_assert(process_gone(rank_pid[q]), "rank %d (pid %d) still runs", q, rank_pid[q]);
    free(text);
    remove_tmpdir(&t);
}

Test(tridentrun, runs_the_probe_over_mpi, .timeout = 90) {
    need_mpi();
    tmpdir t = make_tmpdir();
    char logs[300];
    snprintf(logs, sizeof logs, "%s/logs", t.path);
    char *args[] = {
        "--nproc-per-node", "4", "--log-dir", logs, "--", (char *)probe_path(), t.path, "2", "1", "2", NULL};
    run_out r = launcher(&t, args, 60);
    cr_assert_eq(r.status, 0, "exit %d:\n%s", r.status, r.text);
    check_probe(t.path, 2, 1, 2, 1);
    free(r.text);

    /* the layout error through the launcher: rank named, message shown, exit 2 */
    char *bad[] = {"--nproc-per-node", "4", "--log-dir", logs, "--", (char *)probe_path(), t.path, "2", "1", "3", NULL};
    r = launcher(&t, bad, 60);
    cr_assert_eq(r.status, 2, "exit %d:\n%s", r.status, r.text);
    cr_assert(strstr(r.text, "failed (exit 2)"), "%s", r.text);
    cr_assert(strstr(r.text, "parallel.dp (3) = 6, but the world has 4 ranks"), "%s", r.text);
    free(r.text);
    remove_tmpdir(&t);
}

/* A stand-in for mpirun (given with --mpirun, tests/helpers/job.h's
 * tt_fake_mpirun) that runs the N rank wrappers itself, then prints a canned
 * report ($FAKE_REPORT: the wording of Open MPI's messages) and exits
 * $FAKE_EXIT. It makes every way of naming the failing rank testable without
 * depending on which message a real mpirun races to. */
Test(tridentrun, names_the_failing_rank_from_each_kind_of_report, .timeout = 60) {
    tmpdir t = make_tmpdir();
    char fake[300], logs[300];
    snprintf(fake, sizeof fake, "%s/fake_mpirun", t.path);
    snprintf(logs, sizeof logs, "%s/logs", t.path);
    tt_write_exec(fake, tt_fake_mpirun);
    /* rank 1 fails first (exit 6), rank 2 later (exit 9), rank 0 succeeds */
    const char *failing = "case $OMPI_COMM_WORLD_RANK in 1) echo early; exit 6;; "
                          "2) sleep 0.5; exit 9;; esac; exit 0";
    /* every rank's command succeeds: the status files show no failure, so
     * mpirun's report (ranks on other hosts, a rank gone before its wrapper
     * could write) is what names the rank */
    const char *clean = "exit 0";
    static const struct {
        const char *report, *exit_code, *want;
        int status;
        int fails; /* the failing script, else the clean one */
    } cases[] = {
        /* no report: the earliest failure in the status files */
        {"", "1", "tridentrun: rank 1 failed (exit 6)", 6, 1},
        {"MPI_ABORT was invoked on rank 2 in communicator MPI_COMM_WORLD\\nwith errorcode 5.\\n", "5",
         "tridentrun: rank 2 failed (exit 5)", 5, 0},
        {"mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).\\n", "137",
         "tridentrun: rank 1 failed (signal 9", 137, 0},
        {"The first process to do so was:\\n\\n  Process name: [[31663,1],2]\\n  Exit code:    9\\n", "9",
         "tridentrun: rank 2 failed (exit 9)", 9, 0},
        {"  Process name: [prterun-vm-1234@1,1]\\n  Exit code:    6\\n", "6", "tridentrun: rank 1 failed (exit 6)", 6,
         0},
        {"mpirun has exited due to process rank 0 with PID 0 on\\nnode vm exiting improperly.\\n", "1",
         "tridentrun: rank 0 failed (exit 0 without finishing MPI)", 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv("FAKE_REPORT", cases[i].report, 1);
        setenv("FAKE_EXIT", cases[i].exit_code, 1);
        char *args[] = {"--mpirun", fake, "--nproc-per-node", "3",  "--log-dir",
                        logs,       "--", "/bin/sh",          "-c", (char *)(cases[i].fails ? failing : clean),
                        NULL};
        run_out r = launcher(&t, args, 30);
        cr_assert_eq(r.status, cases[i].status, "case %zu: exit %d:\n%s", i, r.status, r.text);
        cr_assert(strstr(r.text, cases[i].want), "case %zu: want '%s' in\n%s", i, cases[i].want, r.text);
        free(r.text);
    }
    /* every rank succeeded but mpirun says no, without a report */
    setenv("FAKE_REPORT", "", 1);
    setenv("FAKE_EXIT", "1", 1);
    char *ok[] = {"--mpirun", fake, "--nproc-per-node", "2", "--log-dir", logs, "--", "/bin/true", NULL};
    run_out r = launcher(&t, ok, 30);
    cr_assert_eq(r.status, 1, "%s", r.text);
    cr_assert(strstr(r.text, "tridentrun: mpirun failed (exit 1)"), "%s", r.text);
    free(r.text);
    /* no mpirun at all */
    char nope[300];
    snprintf(nope, sizeof nope, "%s/no_such_mpirun", t.path);
    char *none[] = {"--mpirun", nope, "--log-dir", logs, "--", "/bin/true", NULL};
    r = launcher(&t, none, 30);
    cr_assert_eq(r.status, 127, "%s", r.text);
    cr_assert(strstr(r.text, "tridentrun: cannot run"), "%s", r.text);
    free(r.text);
    remove_tmpdir(&t);
}

/* ------------------------------------------------------------------------ */
/* Device-only groups (parallel/comm.h): what reaches the transport         */

/* A transport of two ranks that only records what it is handed. */
static tri_ctx dev_ctx;
static tri_dtype seen_dtype;
static int seen_owned, seen_calls;
static void fake_allreduce(tri_comm *c, void *buf, size_t n, tri_dtype t, tri_redop op) {
    (void)c, (void)op;
    seen_calls++;
    seen_dtype = t;
    seen_owned = tri_ctx_owns(&dev_ctx, buf, n * tri_dtype_size(t));
}
static void fake_broadcast(tri_comm *c, void *buf, size_t n, tri_dtype t, int root) {
    fake_allreduce(c, buf, n, t, TRI_SUM);
    (void)root;
}

static void fake_group(tri_comm *c, const tri_comm_impl *impl) {
    tri_comm_init_self(c, 3);
    c->size = 2;
    c->rank = 1;
    c->impl = impl;
    c->ctx = &dev_ctx;
    c->device_only = 1;
    snprintf(c->name, sizeof c->name, "dp");
}

/* A host buffer handed to a device-only group ends the process (exit 1)
 * before the transport sees it, naming the rank, group, call and buffer;
 * backend buffers and the staged _host forms reach the transport as backend
 * memory. Run in a child, whose stderr is read back. */
Test(comm_device, a_host_buffer_on_a_device_only_group_ends_the_job_naming_it, .timeout = 30) {
    char path[] = "/tmp/trident-devonly-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(fd, 2);
        static const tri_comm_impl impl = {.name = "fake", .allreduce = fake_allreduce, .broadcast = fake_broadcast};
        if (tri_ctx_init(&dev_ctx, "cpu-guard", 1) != 0) _exit(10);
        tri_comm c;
        fake_group(&c, &impl);
        float *dev = tri_ctx_alloc(&dev_ctx, 4 * sizeof(float), TRI_MEM_OTHER, "test");
        tri_comm_allreduce(&c, dev, 4, TRI_F32, TRI_SUM);
        if (seen_calls != 1 || seen_owned != 1) _exit(11);
        double host = 2.5;
        tri_comm_allreduce_host(&c, &host, 1, TRI_F64, TRI_SUM);
        if (seen_calls != 2 || seen_owned != 1 || seen_dtype != TRI_F64 || host != 2.5) _exit(12);
        char path_buf[64] = "step_00000005";
        tri_comm_broadcast_host(&c, path_buf, sizeof path_buf, TRI_U8, 1); /* from this rank */
        if (seen_calls != 3 || seen_owned != 1 || strcmp(path_buf, "step_00000005") != 0) _exit(13);
        fprintf(stderr, "staged calls passed\n");
        tri_comm_allreduce(&c, &host, 1, TRI_F64, TRI_SUM);
        _exit(0); /* not reached */
    }
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    close(fd);
    char *err = slurp(path);
    unlink(path);
    cr_assert(WIFEXITED(st), "%s", err);
    cr_expect_eq(WEXITSTATUS(st), 1, "exit %d: %s", WEXITSTATUS(st), err);
    cr_expect(strstr(err, "staged calls passed") != NULL, "%s", err);
    cr_expect(strstr(err, "rank 3: all-reduce over dp: the buffer (8 bytes") != NULL, "%s", err);
    cr_expect(strstr(err, "is not backend memory") != NULL, "%s", err);
    cr_expect_eq(seen_calls, 0); /* in the parent: nothing ran here */
    free(err);
}

/* A transport that works on the device (NCCL: impl.device) is handed 16-bit
 * reductions as they are, on the caller's backend buffer; any other gets them
 * widened to fp32 in host scratch (MPI cannot sum bf16). */
Test(comm_device, a_device_transport_sums_16_bit_itself, .timeout = 30) {
    cr_assert_eq(tri_ctx_init(&dev_ctx, "cpu-guard", 1), 0);
    static const tri_comm_impl on_device = {.name = "fake", .device = 1, .allreduce = fake_allreduce};
    static const tri_comm_impl on_host = {.name = "fake", .allreduce = fake_allreduce};
    uint16_t *dev = tri_ctx_alloc(&dev_ctx, 8 * sizeof(uint16_t), TRI_MEM_OTHER, "test");
    tri_comm c;
    fake_group(&c, &on_device);
    seen_calls = 0;
    tri_comm_allreduce(&c, dev, 8, TRI_BF16, TRI_SUM);
    cr_expect_eq(seen_calls, 1);
    cr_expect_eq(seen_dtype, TRI_BF16);
    cr_expect_eq(seen_owned, 1);
    fake_group(&c, &on_host);
    c.device_only = 0;
    tri_comm_allreduce(&c, dev, 8, TRI_BF16, TRI_SUM);
    cr_expect_eq(seen_calls, 2);
    cr_expect_eq(seen_dtype, TRI_F32);
    cr_expect_eq(seen_owned, 0);
    tri_ctx_release(&dev_ctx, dev, 8 * sizeof(uint16_t), TRI_MEM_OTHER);
    tri_ctx_free(&dev_ctx);
}
