/* The rendezvous store and the launcher environment (parallel/tcp_store.c).
 *
 * Multi-rank tests fork one process per rank on 127.0.0.1 at a port the
 * kernel just gave out; each rank checks what it received against values
 * computed here from the sender's rank (never by the store), and reports by
 * its exit code; its stderr goes to a file the test reads. Every child runs
 * under a deadline. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers/testutil.h"
#include "parallel/tcp_store.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A TCP port on 127.0.0.1 that was free a moment ago. */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0, "bind: %s", strerror(errno));
    socklen_t n = sizeof a;
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &n), 0);
    close(fd);
    return ntohs(a.sin_port);
}

typedef int (*rank_fn)(int rank, int world, int port, void *arg);

/* Forks one child per rank in ranks[0..n) running fn; its stderr goes to
 * err_path(rank). Waits at most `limit` s for all; codes[i] gets rank i's exit
 * code (128 + signal when killed). */
static void run_ranks(const int *ranks, int n, int world, int port, rank_fn fn, void *arg, double limit, int *codes,
                      char paths[][64]) {
    pid_t pid[16];
    cr_assert_leq(n, 16);
    for (int i = 0; i < n; i++) {
        snprintf(paths[i], 64, "/tmp/tri_store_%d_%d_%d.err", (int)getpid(), port, ranks[i]);
        fflush(NULL);
        pid[i] = fork();
        cr_assert_geq(pid[i], 0);
        if (pid[i] == 0) {
            if (freopen(paths[i], "w", stderr) == NULL) _exit(126);
            setvbuf(stderr, NULL, _IONBF, 0);
            _exit(fn(ranks[i], world, port, arg));
        }
    }
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        int st = 0;
        for (;;) {
            pid_t w = waitpid(pid[i], &st, WNOHANG);
            if (w == pid[i]) break;
            if (now_s() - t0 > limit) {
                for (int j = 0; j < n; j++) kill(pid[j], SIGKILL);
                waitpid(pid[i], &st, 0);
                cr_assert_fail("rank %d did not finish within %.0f s", ranks[i], limit);
            }
            usleep(10000);
        }
        codes[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
}

static char *slurp(const char *path) {
    static char buf[8192];
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL) return buf;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    unlink(path);
    return buf;
}

/* ------------------------------------------------------------------------ */
/* Four ranks exchange keys                                                 */

/* What rank r publishes: a string and a number, both functions of r alone. */
static void value_of(int r, char *out, size_t n) { snprintf(out, n, "payload of rank %d: %d", r, r * r + 7); }

static int exchange(int rank, int world, int port, void *arg) {
    (void)arg;
    tri_store s;
    if (tri_store_init(&s, "127.0.0.1", port, rank, world, 10.0) != 0) return 10;
    char key[64], mine[64], want[64], got[64];
    /* set, then wait for a neighbour's key (which it may set after we ask) */
    snprintf(key, sizeof key, "v/%d", rank);
    value_of(rank, mine, sizeof mine);
    if (rank == 1) usleep(200000); /* the others wait for rank 1's key */
    if (tri_store_set(&s, key, mine, strlen(mine) + 1) != 0) return 11;
    int peer = (rank + 1) % world;
    snprintf(key, sizeof key, "v/%d", peer);
    size_t len = 0;
    if (tri_store_wait(&s, key, got, sizeof got, &len, 0) != 0) return 12;
    value_of(peer, want, sizeof want);
    if (len != strlen(want) + 1 || strcmp(got, want) != 0) return 13;
    /* a key nobody sets is reported as not set, without waiting */
    if (tri_store_get(&s, "nobody/sets/this", got, sizeof got, &len) != 0) return 14;
    /* a larger value than the buffer is an error, not a silent truncation */
    if (tri_store_get(&s, key, got, 4, &len) != -1) return 15;
    /* the connection is still in step after that */
    if (tri_store_get(&s, key, got, sizeof got, &len) != 1 || strcmp(got, want) != 0) return 16;
    /* two allgathers under the same name: fresh keys each time */
    for (int round = 0; round < 2; round++) {
        int mine_i[2] = {rank * 10 + round, -rank}, all[16][2];
        if (tri_store_allgather(&s, "ag", mine_i, sizeof mine_i, all) != 0) return 17;
        for (int r = 0; r < world; r++)
            if (all[r][0] != r * 10 + round || all[r][1] != -r) return 18;
    }
    if (tri_store_barrier(&s, "end") != 0) return 19;
    tri_store_free(&s);
    return 0;
}

Test(tcp_store, four_ranks_exchange_keys, .timeout = 60) {
    int port = free_port(), ranks[4] = {0, 1, 2, 3}, codes[4];
    char paths[4][64];
    run_ranks(ranks, 4, 4, port, exchange, NULL, 30, codes, paths);
    for (int i = 0; i < 4; i++) {
        char *text = slurp(paths[i]);
        cr_expect_eq(codes[i], 0, "rank %d exited %d: %s", i, codes[i], text);
        if (codes[i] == 0)
            cr_expect(strstr(text, "more than the 4 expected") != NULL, "rank %d: the short buffer is named: %s", i,
                      text);
    }
}

/* ------------------------------------------------------------------------ */
/* A rank that never arrives                                                */

static int rendezvous_short(int rank, int world, int port, void *arg) {
    (void)arg;
    tri_store s;
    if (tri_store_init(&s, "127.0.0.1", port, rank, world, 1.0) != 0) return 10;
    double t0 = now_s();
    int rc = tri_store_allgather(&s, "hello", &rank, sizeof rank, NULL);
    double took = now_s() - t0;
    if (rc != -1) return 11;
    if (took < 0.9 || took > 5) return 12;
    /* a single key: the wait names it */
    char buf[8];
    if (tri_store_wait(&s, "nccl/id/tp/3", buf, sizeof buf, NULL, 0.3) != -1) return 13;
    tri_store_free(&s);
    return 0;
}

Test(tcp_store, missing_rank_times_out_naming_it, .timeout = 60) {
    int port = free_port(), ranks[2] = {0, 1}, codes[2];
    char paths[2][64];
    /* a world of 3 of which rank 2 never starts */
    run_ranks(ranks, 2, 3, port, rendezvous_short, NULL, 30, codes, paths);
    char want_addr[64];
    snprintf(want_addr, sizeof want_addr, "127.0.0.1:%d", port);
    for (int i = 0; i < 2; i++) {
        char *text = slurp(paths[i]);
        cr_expect_eq(codes[i], 0, "rank %d exited %d: %s", i, codes[i], text);
        cr_expect(strstr(text, "rank 2 of 3 did not arrive") != NULL, "rank %d names the missing rank: %s", i, text);
        cr_expect(strstr(text, "'hello#0/<rank>'") != NULL, "names the key: %s", text);
        cr_expect(strstr(text, want_addr) != NULL, "names the address: %s", text);
        char who[32];
        snprintf(who, sizeof who, "trident: rank %d:", i);
        cr_expect(strstr(text, who) != NULL, "names the rank reporting: %s", text);
        cr_expect(strstr(text, "key 'nccl/id/tp/3' was not set within 0.3 s") != NULL, "the wait names its key: %s",
                  text);
    }
}

/* ------------------------------------------------------------------------ */
/* Bad addresses                                                            */

typedef struct bad_case {
    const char *addr;
    double timeout_s;
    double max_s; /* it must fail within this */
} bad_case;

static int join_alone(int rank, int world, int port, void *arg) {
    const bad_case *b = arg;
    tri_store s;
    double t0 = now_s();
    int rc = tri_store_init(&s, b->addr, port, rank, world, b->timeout_s);
    if (rc != -1) return 10;
    if (now_s() - t0 > b->max_s) return 11;
    tri_store_free(&s); /* safe on a store that failed to start */
    return 0;
}

Test(tcp_store, unresolvable_address_fails_at_once_naming_it, .timeout = 60) {
    int port = free_port(), ranks[1] = {1}, codes[1];
    char paths[1][64];
    bad_case b = {"no-such-host.invalid", 30.0, 10.0};
    run_ranks(ranks, 1, 2, port, join_alone, &b, 20, codes, paths);
    char *text = slurp(paths[0]);
    cr_expect_eq(codes[0], 0, "exit %d: %s", codes[0], text);
    char want[96];
    snprintf(want, sizeof want, "rank 1: the store's address no-such-host.invalid:%d", port);
    cr_expect(strstr(text, want) != NULL, "%s", text);
    cr_expect(strstr(text, "does not resolve") != NULL, "%s", text);
}

Test(tcp_store, server_that_never_starts_times_out_naming_the_address, .timeout = 60) {
    int port = free_port(), ranks[1] = {1}, codes[1];
    char paths[1][64];
    bad_case b = {"127.0.0.1", 0.5, 5.0};
    run_ranks(ranks, 1, 2, port, join_alone, &b, 20, codes, paths);
    char *text = slurp(paths[0]);
    cr_expect_eq(codes[0], 0, "exit %d: %s", codes[0], text);
    char want[96];
    snprintf(want, sizeof want, "rank 1: cannot reach the store at 127.0.0.1:%d within 0.5 s", port);
    cr_expect(strstr(text, want) != NULL, "%s", text);
}

Test(tcp_store, port_already_in_use_is_named, .timeout = 60) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(fd, 1), 0);
    socklen_t n = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &n);
    int port = ntohs(a.sin_port), ranks[1] = {0}, codes[1];
    char paths[1][64];
    bad_case b = {"127.0.0.1", 2.0, 5.0};
    run_ranks(ranks, 1, 2, port, join_alone, &b, 20, codes, paths);
    close(fd);
    char *text = slurp(paths[0]);
    cr_expect_eq(codes[0], 0, "exit %d: %s", codes[0], text);
    char want[96];
    snprintf(want, sizeof want, "rank 0: cannot serve the store on port %d", port);
    cr_expect(strstr(text, want) != NULL, "%s", text);
    cr_expect(strstr(text, "in use") != NULL, "%s", text);
}

/* Port 0 on rank 0: the store serves on a free port the system chose, which
 * s.port then holds; a second connection (tri_store_join, as the progress
 * heartbeat's thread makes) reaches it, even with rank 0's number, and sees
 * the values the first one set. */
Test(tcp_store, port_0_serves_on_a_free_port_and_join_connects_to_it, .timeout = 30) {
    tri_store s, j;
    cr_assert_eq(tri_store_init(&s, "127.0.0.1", 0, 0, 2, 5.0), 0);
    cr_assert(s.port > 0 && s.port <= 65535, "port %d", s.port);
    cr_assert_not_null(s.server);
    cr_assert_eq(tri_store_join(&j, "127.0.0.1", s.port, 0, 2, 5.0), 0);
    cr_expect_null(j.server, "join never serves");
    cr_assert_eq(tri_store_set(&s, "hb/0", "abc", 3), 0);
    char buf[8] = "";
    size_t n = 0;
    cr_expect_eq(tri_store_get(&j, "hb/0", buf, sizeof buf, &n), 1);
    cr_expect_eq(n, 3);
    cr_expect_eq(memcmp(buf, "abc", 3), 0);
    tri_store_free(&j);
    tri_store_free(&s);
    /* port 0 means nothing to a rank that only connects */
    cr_expect_eq(tri_store_join(&j, "127.0.0.1", 0, 1, 2, 0.2), -1);
}

/* ------------------------------------------------------------------------ */
/* The launcher's environment                                               */

/* A fake environment: NULL-terminated "NAME=value" strings. */
static const char *table_get(const char *name, void *ctx) {
    const char *const *t = ctx;
    size_t n = strlen(name);
    for (; *t; t++)
        if (strncmp(*t, name, n) == 0 && (*t)[n] == '=') return *t + n + 1;
    return NULL;
}

static int read_env(const char *const *table, int use_slurm, tri_launch_env *e, char *err, size_t n) {
    err[0] = '\0';
    return tri_launch_env_read(e, use_slurm, table_get, (void *)table, err, n);
}

Test(launch_env, torchrun_variables) {
    const char *t[] = {"RANK=3",
                       "WORLD_SIZE=8",
                       "LOCAL_RANK=1",
                       "MASTER_ADDR=node7",
                       "MASTER_PORT=29511",
                       "SLURM_PROCID=5",
                       "SLURM_NTASKS=16",
                       NULL};
    tri_launch_env e;
    char err[512];
    cr_assert_eq(read_env(t, 1, &e, err, sizeof err), 1, "%s", err);
    cr_expect_str_eq(e.source, "torchrun", "RANK/WORLD_SIZE win over Slurm's");
    cr_expect_eq(e.rank, 3);
    cr_expect_eq(e.world, 8);
    cr_expect_eq(e.local_rank, 1);
    cr_expect_str_eq(e.master_addr, "node7");
    cr_expect_eq(e.master_port, 29511);
}

Test(launch_env, nothing_set_is_not_an_error) {
    const char *t[] = {"HOME=/root", NULL};
    tri_launch_env e;
    char err[512];
    cr_expect_eq(read_env(t, 1, &e, err, sizeof err), 0);
    const char *s[] = {"SLURM_PROCID=0", "SLURM_NTASKS=2", NULL};
    cr_expect_eq(read_env(s, 0, &e, err, sizeof err), 0, "Slurm's variables are read only when asked");
}

Test(launch_env, world_of_one_needs_no_address) {
    const char *t[] = {"RANK=0", "WORLD_SIZE=1", NULL};
    tri_launch_env e;
    char err[512];
    cr_assert_eq(read_env(t, 0, &e, err, sizeof err), 1, "%s", err);
    cr_expect_eq(e.world, 1);
    cr_expect_eq(e.local_rank, -1, "not given");
}

Test(launch_env, errors_name_the_variable_and_value) {
    struct {
        const char *t[6];
        const char *want;
    } cases[] = {
        {{"RANK=1", NULL}, "RANK is set but WORLD_SIZE is not"},
        {{"WORLD_SIZE=2", NULL}, "WORLD_SIZE is set but RANK is not"},
        {{"RANK=2", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=1", NULL}, "RANK='2' is not a whole number in 0..1"},
        {{"RANK=x", "WORLD_SIZE=2", NULL}, "RANK='x'"},
        {{"RANK=0", "WORLD_SIZE=0", NULL}, "WORLD_SIZE='0'"},
        {{"RANK=1", "WORLD_SIZE=2", "MASTER_PORT=5", NULL}, "rank 1 of 2: RANK and WORLD_SIZE are set but MASTER_ADDR"},
        {{"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=h", NULL}, "MASTER_PORT is not (a free port on MASTER_ADDR h)"},
        {{"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=70000", NULL}, "MASTER_PORT='70000'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tri_launch_env e;
        char err[512];
        cr_expect_eq(read_env(cases[i].t, 1, &e, err, sizeof err), -1, "case %zu", i);
        cr_expect(strstr(err, cases[i].want) != NULL, "case %zu: '%s' lacks '%s'", i, err, cases[i].want);
        cr_expect(strstr(err, "trident: ") == NULL, "the reason, without the prefix tri_error adds: %s", err);
    }
}

Test(launch_env, slurm_address_from_the_node_list_and_port_from_the_job) {
    const char *t[] = {"SLURM_PROCID=5",
                       "SLURM_NTASKS=8",
                       "SLURM_LOCALID=1",
                       "SLURM_JOB_ID=12345",
                       "SLURM_NODELIST=gpu[07-09,12]",
                       NULL};
    tri_launch_env e;
    char err[512];
    cr_assert_eq(read_env(t, 1, &e, err, sizeof err), 1, "%s", err);
    cr_expect_str_eq(e.source, "slurm");
    cr_expect_eq(e.rank, 5);
    cr_expect_eq(e.world, 8);
    cr_expect_eq(e.local_rank, 1);
    cr_expect_str_eq(e.master_addr, "gpu07");
    cr_expect_eq(e.master_port, TRI_STORE_DEFAULT_PORT + 12345 % 1000);
    const char *u[] = {"SLURM_PROCID=0",   "SLURM_NTASKS=2",        "MASTER_ADDR=10.0.0.1",
                       "MASTER_PORT=4000", "SLURM_NODELIST=x[1-2]", NULL};
    cr_assert_eq(read_env(u, 1, &e, err, sizeof err), 1, "%s", err);
    cr_expect_str_eq(e.master_addr, "10.0.0.1", "MASTER_ADDR wins over the node list");
    cr_expect_eq(e.master_port, 4000);
    const char *v[] = {"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_NODELIST=a[1-2]-ib,b3", NULL};
    cr_expect_eq(read_env(v, 1, &e, err, sizeof err), -1);
    cr_expect(strstr(err, "SLURM_NODELIST='a[1-2]-ib,b3' is not a simple node list") != NULL, "%s", err);
    cr_expect(strstr(err, "scontrol show hostnames") != NULL, "%s", err);
    const char *w[] = {"SLURM_PROCID=0", "SLURM_NTASKS=2", NULL};
    cr_expect_eq(read_env(w, 1, &e, err, sizeof err), -1);
    cr_expect(strstr(err, "MASTER_ADDR is not set") != NULL, "%s", err);
}

Test(launch_env, first_host_of_a_slurm_node_list) {
    struct {
        const char *list, *want; /* want NULL: not simple */
    } cases[] = {
        {"node1", "node1"},
        {"n1,n2,n3", "n1"},
        {"gpu[07-09,12],cpu1", "gpu07"},
        {"a-[3]", "a-3"},
        {"rack2-n[100-131]", "rack2-n100"},
        {"", NULL},
        {"n[", NULL},
        {"n[a-b]", NULL},
        {"n[1-2]x", NULL},
        {"n[1-2][3-4]", NULL},
        {"n]1", NULL},
        {"[1-2]", "1"}, /* odd but well formed: the host is the number */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[64] = "untouched";
        int rc = tri_slurm_first_host(cases[i].list, out, sizeof out);
        if (cases[i].want == NULL) {
            cr_expect_eq(rc, -1, "'%s' is not simple (got '%s')", cases[i].list, out);
        } else {
            cr_expect_eq(rc, 0, "'%s'", cases[i].list);
            cr_expect_str_eq(out, cases[i].want, "'%s'", cases[i].list);
        }
    }
    char small[4];
    cr_expect_eq(tri_slurm_first_host("longname", small, sizeof small), -1, "does not fit");
}

/* ------------------------------------------------------------------------ */
/* tri_dist formed through the store (RANK/WORLD_SIZE, no MPI launcher)     */

#include "base/err.h"
#include "parallel/dist.h"

typedef struct dist_case {
    int tp, pp, dp;
    int call_allreduce; /* then try a collective before NCCL exists */
} dist_case;

/* Before a rank exits on purpose (a refused call ends the process): rank 0
 * serves the store and takes it down when it exits, so it must not go while
 * another rank still reads keys of the last collective. Every other rank
 * writes a key (its last store access) and rank 0 waits for them all.
 * Returns 0 or -1. */
static int through_store(tri_store *s, int rank, int world) {
    char key[32], one = 1;
    size_t len = 0;
    if (rank != 0) {
        snprintf(key, sizeof key, "through/%d", rank);
        return tri_store_set(s, key, &one, 1);
    }
    for (int r = 1; r < world; r++) {
        snprintf(key, sizeof key, "through/%d", r);
        if (tri_store_wait(s, key, &one, 1, &len, 30.0) != 0) return -1;
    }
    return 0;
}

static int dist_rank(int rank, int world, int port, void *arg) {
    const dist_case *c = arg;
    char v[32];
    static const char *const unset[] = {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE",    "PMI_RANK",
                                        "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS",         "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof unset / sizeof unset[0]; i++) unsetenv(unset[i]);
    snprintf(v, sizeof v, "%d", rank);
    setenv("RANK", v, 1);
    setenv("LOCAL_RANK", v, 1);
    snprintf(v, sizeof v, "%d", world);
    setenv("WORLD_SIZE", v, 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    snprintf(v, sizeof v, "%d", port);
    setenv("MASTER_PORT", v, 1);
    tri_dist d;
    if (tri_dist_init(&d, c->tp, c->pp, c->dp) != 0) { /* said on stderr */
        tri_dist_free(&d);
        return 20;
    }
    /* the groups have the mesh's sizes and indices (closed form: Megatron's order) */
    int tp_rank = rank % c->tp, dp_rank = (rank / c->tp) % c->dp, pp_rank = rank / (c->tp * c->dp);
    if (d.transport != TRI_TRANSPORT_STORE || d.world.size != world || d.world.rank != rank) return 21;
    if (d.tp.size != c->tp || d.tp.rank != tp_rank || d.dp.size != c->dp || d.dp.rank != dp_rank) return 22;
    if (d.pp.size != c->pp || d.pp.rank != pp_rank || d.local_rank != rank) return 23;
    if (c->call_allreduce) {
        if (through_store(d.store, rank, world) != 0) return 26;
        float x = 1;
        tri_comm_allreduce(&d.tp, &x, 1, TRI_F32, TRI_SUM); /* must not return */
        return 24;
    }
    int rc = tri_dist_use_nccl(&d); /* a failure is said on stderr */
    fprintf(stderr, "use_nccl: %d\n", rc);
    tri_dist_free(&d);
    return rc == 0 ? 0 : 25;
}

Test(dist_store, world_formed_through_the_store_from_torchrun_variables, .timeout = 60) {
    int port = free_port(), ranks[4] = {0, 1, 2, 3}, codes[4];
    char paths[4][64];
    dist_case c = {2, 2, 1, 0};
    run_ranks(ranks, 4, 4, port, dist_rank, &c, 40, codes, paths);
    for (int i = 0; i < 4; i++) {
        char *text = slurp(paths[i]);
#ifdef TRI_HAVE_NCCL
        /* the world meets and the groups are laid out; NCCL then needs a GPU
         * (none here: the message says so), or runs (a GPU machine) */
        cr_expect(codes[i] == 0 || codes[i] == 25, "rank %d exited %d: %s", i, codes[i], text);
        if (codes[i] == 25) {
            cr_expect(strstr(text, "needs a CUDA device") != NULL, "rank %d: %s", i, text);
            cr_expect(strstr(text, "the NCCL transport could not start") != NULL, "rank %d: %s", i, text);
        }
#else
        cr_expect_eq(codes[i], 20, "rank %d exited %d: %s", i, codes[i], text);
        cr_expect(strstr(text, "launch with tridentrun/mpirun, or build with CUDA for NCCL") != NULL, "rank %d: %s", i,
                  text);
#endif
    }
}

Test(dist_store, collective_before_nccl_is_a_named_error, .timeout = 60) {
#ifndef TRI_HAVE_NCCL
    cr_skip_test("this build has no NCCL: a world without MPI is refused at tri_dist_init");
#endif
    int port = free_port(), ranks[2] = {0, 1}, codes[2];
    char paths[2][64];
    dist_case c = {2, 1, 1, 1};
    run_ranks(ranks, 2, 2, port, dist_rank, &c, 40, codes, paths);
    for (int i = 0; i < 2; i++) {
        char *text = slurp(paths[i]);
        cr_expect_eq(codes[i], 1, "rank %d exited %d: %s", i, codes[i], text);
        char want[96];
        snprintf(want, sizeof want, "trident: rank %d: all-reduce over tp before the group has a transport", i);
        cr_expect(strstr(text, want) != NULL, "%s", text);
        cr_expect(strstr(text, "--device cuda") != NULL, "%s", text);
    }
}

Test(dist_store, malformed_rank_variables_are_refused, .timeout = 30) {
    setenv("RANK", "one", 1);
    setenv("WORLD_SIZE", "2", 1);
    tri_dist d;
    char err[512] = "";
    tt_err_capture(err, sizeof err); /* the message tri_dist_init prints */
    cr_expect_eq(tri_dist_init(&d, 1, 1, 2), -1);
    tt_err_capture(NULL, 0);
    cr_expect(strstr(err, "RANK='one'") != NULL, "%s", err);
    tri_dist_free(&d);
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
}

/* This process as rank `rank` of `world` by torchrun's variables (no MPI's). */
static void as_torchrun_rank(int rank, int world, int port) {
    static const char *const unset[] = {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE",    "PMI_RANK",
                                        "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS",         "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof unset / sizeof unset[0]; i++) unsetenv(unset[i]);
    char v[32];
    snprintf(v, sizeof v, "%d", rank);
    setenv("RANK", v, 1);
    snprintf(v, sizeof v, "%d", world);
    setenv("WORLD_SIZE", v, 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    snprintf(v, sizeof v, "%d", port);
    setenv("MASTER_PORT", v, 1);
}

/* Issue 22: a store launch with the CPU backend (which cannot use it) waited
 * for the missing ranks before being refused. Now it is refused at once, in
 * every build, rank 1 of 2 never coming. */
Test(dist_store, store_launch_without_nccl_use_is_refused_before_waiting, .timeout = 30) {
    as_torchrun_rank(0, 2, free_port());
    tri_dist d;
    char err[512] = "";
    tt_err_capture(err, sizeof err);
    double t0 = now_s();
    cr_expect_eq(tri_dist_init_with(&d, 1, 1, 2, 600, 0), -1);
    double took = now_s() - t0;
    tt_err_capture(NULL, 0);
    cr_expect_lt(took, 2.0, "refused after %.1f s", took);
    cr_expect(strstr(err, "rank 0") != NULL && strstr(err, "needs --device cuda") != NULL, "%s", err);
    tri_dist_free(&d);
}

/* Issue 22: the rendezvous waited a fixed 600 s (TRI_WD_DEFAULT_TIMEOUT_S)
 * for missing ranks whatever parallel.timeout_s said. With a 1 s deadline,
 * rank 0 of 2 alone gives up in about that, naming the rank that never came. */
Test(dist_store, rendezvous_waits_the_run_timeout, .timeout = 60) {
#ifndef TRI_HAVE_NCCL
    cr_skip_test("this build has no NCCL: a world without MPI is refused at tri_dist_init, before any rendezvous");
#endif
    as_torchrun_rank(0, 2, free_port());
    tri_dist d;
    char err[2048] = "";
    tt_err_capture(err, sizeof err);
    double t0 = now_s();
    cr_expect_eq(tri_dist_init_with(&d, 1, 1, 2, 1.0, 1), -1);
    double took = now_s() - t0;
    tt_err_capture(NULL, 0);
    cr_expect(took >= 0.9 && took < 10.0, "gave up after %.1f s, the deadline is 1 s", took);
    cr_expect(strstr(err, "rank 1 of 2 did not arrive within 1.0 s") != NULL, "%s", err);
    tri_dist_free(&d);
}

/* ------------------------------------------------------------------------ */
/* The world group over the store (host values before NCCL)                 */

/* world ranks: an int max, a double sum, an all-gather, a broadcast from
 * the last rank, a barrier; then (arg != NULL) a send, which the store refuses.
 * Expected values in closed form from the rank numbers. */
static int store_world_rank(int rank, int world, int port, void *arg) {
    tri_store s;
    if (tri_store_init(&s, "127.0.0.1", port, rank, world, 10.0) != 0) return 10;
    tri_comm c;
    tri_store_comm_world(&c, &s);
    if (c.size != world || c.rank != rank || strcmp(c.name, "world") != 0) return 11;
    int bad = rank == 1 ? 7 : rank; /* max over 0, 7, 2 */
    tri_comm_allreduce(&c, &bad, 1, TRI_I32, TRI_MAX);
    if (bad != 7) return 12;
    double v[2] = {0.5 * rank, 1.0}; /* sums: 0.5 * (0 + 1 + ... + world-1), world */
    tri_comm_allreduce(&c, v, 2, TRI_F64, TRI_SUM);
    if (v[0] != 0.25 * world * (world - 1) || v[1] != (double)world) return 13;
    int mine = rank * rank + 1, all[8];
    tri_comm_allgather(&c, all, &mine, 1, TRI_I32);
    for (int r = 0; r < world; r++)
        if (all[r] != r * r + 1) return 14;
    char dir[64] = "";
    if (rank == world - 1) snprintf(dir, sizeof dir, "step_%08d", 42);
    tri_comm_broadcast(&c, dir, sizeof dir, TRI_U8, world - 1);
    if (strcmp(dir, "step_00000042") != 0) return 15;
    tri_comm_barrier(&c);
    if (arg != NULL) {
        if (through_store(&s, rank, world) != 0) return 17;
        float x = 1;
        tri_req r;
        tri_comm_isend(&c, &x, 1, TRI_F32, (rank + 1) % world, 0, &r); /* must not return */
        return 16;
    }
    tri_comm_free(&c);
    tri_store_free(&s);
    return 0;
}

Test(dist_store, world_collectives_of_host_values_go_through_the_store, .timeout = 60) {
    int port = free_port(), ranks[3] = {0, 1, 2}, codes[3];
    char paths[3][64];
    run_ranks(ranks, 3, 3, port, store_world_rank, NULL, 30, codes, paths);
    for (int i = 0; i < 3; i++) {
        char *text = slurp(paths[i]);
        cr_expect_eq(codes[i], 0, "rank %d exited %d: %s", i, codes[i], text);
    }
}

Test(dist_store, the_store_world_refuses_point_to_point_naming_the_call, .timeout = 60) {
    int port = free_port(), ranks[2] = {0, 1}, codes[2];
    char paths[2][64];
    run_ranks(ranks, 2, 2, port, store_world_rank, "send", 30, codes, paths);
    for (int i = 0; i < 2; i++) {
        char *text = slurp(paths[i]);
        cr_expect_eq(codes[i], 1, "rank %d exited %d: %s", i, codes[i], text);
        char want[96];
        snprintf(want, sizeof want, "trident: rank %d: send over world through the TCP store", i);
        cr_expect(strstr(text, want) != NULL, "%s", text);
        cr_expect(strstr(text, "tri_dist_use_nccl") != NULL, "%s", text);
    }
}
