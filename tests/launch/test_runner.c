/* src/launch/runner: the mpirun command built for a given plan (argument by
 * argument), the failing rank read from mpirun's real failure reports
 * (Open MPI 4.1's, as its mpirun printed them, and Open MPI 5's prterun
 * wording), and the tail of a rank's log. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/testutil.h"
#include "launch/launch.h"

/* ------------------------------------------------------------------------ */
/* The command                                                              */

/* A plan of hosts nodeA.. with ranks placed, as tri_launch_plan_make leaves it. */
static void hand_plan(tri_launch_plan *p, int n, const int *ranks) {
    memset(p, 0, sizeof *p);
    p->nhosts = n;
    p->hosts = calloc((size_t)n, sizeof *p->hosts);
    p->slots = calloc((size_t)n, sizeof *p->slots);
    p->lines = calloc((size_t)n, sizeof *p->lines);
    p->ranks = calloc((size_t)n, sizeof *p->ranks);
    for (int h = 0; h < n; h++) {
        p->hosts[h] = malloc(8);
        snprintf(p->hosts[h], 8, "node%c", 'A' + h);
        p->ranks[h] = ranks[h];
        p->world += ranks[h];
        if (ranks[h] > p->nproc) p->nproc = ranks[h];
    }
    p->cores = 8;
    p->threads = 4;
    snprintf(p->log_dir, sizeof p->log_dir, "/runs/logs");
    snprintf(p->self, sizeof p->self, "/opt/bin/tridentrun");
    p->cmd0 = strdup("/opt/bin/trident");
}

/* The command joined by single spaces. */
static char *joined(const tri_launch_argv *a) {
    size_t n = 1;
    for (int i = 0; i < a->n; i++) n += strlen(a->v[i]) + 1;
    char *s = calloc(n, 1);
    for (int i = 0; i < a->n; i++) {
        if (i) strcat(s, " ");
        strcat(s, a->v[i]);
    }
    cr_assert_null(a->v[a->n], "the vector is NULL-terminated");
    return s;
}

Test(runner, the_command_on_this_machine) {
    tri_launch_plan p;
    int ranks[1] = {2};
    hand_plan(&p, 1, ranks);
    p.bind_none = 1;
    const char *cmd[] = {"trident", "train", "c.json"};
    tri_launch_opts o = {.log_dir = "logs", .mpirun = "mpirun", .cmd = cmd, .cmd_argc = 3};
    tri_launch_argv a;
    tri_launch_command_build(&a, &o, &p, 0);
    char *s = joined(&a);
    cr_expect_str_eq(s, "mpirun -np 2 --bind-to none -x OMP_NUM_THREADS=4 -x OMP_WAIT_POLICY=PASSIVE "
                        "/opt/bin/tridentrun --rank-exec --log-dir /runs/logs -- /opt/bin/trident train c.json");
    free(s);
    tri_launch_argv_free(&a);
    cr_expect_null(a.v);
    tri_launch_argv_free(NULL);
    tri_launch_plan_free(&p);
}

Test(runner, a_host_file_root_oversubscription_and_the_users_environment) {
    tri_launch_plan p;
    int ranks[3] = {3, 1, 0}; /* nodeC has no rank: it is left out of -H */
    hand_plan(&p, 3, ranks);
    p.as_root = p.oversub = 1;
    p.user_threads = p.user_wait_policy = 1;
    const char *extra[] = {"--mca", "btl_vader_single_copy_mechanism", "none"};
    const char *cmd[] = {"/bin/echo", "hi there"};
    tri_launch_opts o = {.hostfile = "hosts", .log_dir = "logs", .mpirun = "/usr/bin/mpirun", .tee = 1,
                         .extra = extra, .n_extra = 3, .cmd = cmd, .cmd_argc = 2};
    tri_launch_argv a;
    tri_launch_command_build(&a, &o, &p, 0);
    char *s = joined(&a);
    cr_expect_str_eq(s, "/usr/bin/mpirun -np 4 -H nodeA:3,nodeB:1 --allow-run-as-root --oversubscribe "
                        "-x OMP_NUM_THREADS -x OMP_WAIT_POLICY --mca btl_vader_single_copy_mechanism none "
                        "/opt/bin/tridentrun --rank-exec --log-dir /runs/logs --tee -- /opt/bin/trident hi there");
    /* (cmd0 stands in for COMMAND[0]: the plan resolved it) */
    cr_expect_eq(a.n, 22);
    cr_expect_str_eq(a.v[a.n - 1], "hi there", "one argument, spaces and all");
    free(s);
    tri_launch_argv_free(&a);
    tri_launch_plan_free(&p);
}

Test(runner, a_restart_says_its_attempt_and_resumes_once) {
    tri_launch_plan p;
    int ranks[1] = {1};
    hand_plan(&p, 1, ranks);
    const char *cmd[] = {"trident", "train", "c.json"};
    tri_launch_opts o = {.log_dir = "logs", .mpirun = "mpirun", .cmd = cmd, .cmd_argc = 3};
    tri_launch_argv a;
    tri_launch_command_build(&a, &o, &p, 2);
    char *s = joined(&a);
    cr_expect_str_eq(s, "mpirun -np 1 -x OMP_NUM_THREADS=4 -x OMP_WAIT_POLICY=PASSIVE /opt/bin/tridentrun "
                        "--rank-exec --log-dir /runs/logs --attempt 2 -- /opt/bin/trident train c.json --resume");
    free(s);
    tri_launch_argv_free(&a);
    /* COMMAND that resumes already gets no second --resume */
    const char *resuming[] = {"trident", "train", "--resume", "c.json"};
    o.cmd = resuming;
    o.cmd_argc = 4;
    tri_launch_command_build(&a, &o, &p, 1);
    s = joined(&a);
    cr_expect(strstr(s, "--attempt 1 -- /opt/bin/trident train --resume c.json") != NULL, "%s", s);
    cr_expect(strstr(strstr(s, "--resume") + 1, "--resume") == NULL, "%s", s);
    free(s);
    tri_launch_argv_free(&a);
    tri_launch_plan_free(&p);
}

/* ------------------------------------------------------------------------ */
/* mpirun's report                                                          */

/* Open MPI 4.1.4 (mpirun), copied from its stderr. */
static const char ompi4_abort[] =
    "--------------------------------------------------------------------------\n"
    "MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD\n"
    "with errorcode 5.\n"
    "\n"
    "NOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.\n"
    "You may or may not see output from other processes, depending on\n"
    "exactly when Open MPI kills them.\n"
    "--------------------------------------------------------------------------\n";

static const char ompi4_exit[] =
    "--------------------------------------------------------------------------\n"
    "Primary job  terminated normally, but 1 process returned\n"
    "a non-zero exit code. Per user-direction, the job has been aborted.\n"
    "--------------------------------------------------------------------------\n"
    "--------------------------------------------------------------------------\n"
    "mpirun detected that one or more processes exited with non-zero status, thus causing\n"
    "the job to be terminated. The first process to do so was:\n"
    "\n"
    "  Process name: [[8046,1],1]\n"
    "  Exit code:    3\n"
    "--------------------------------------------------------------------------\n";

static const char ompi4_signal[] =
    "--------------------------------------------------------------------------\n"
    "Primary job  terminated normally, but 1 process returned\n"
    "a non-zero exit code. Per user-direction, the job has been aborted.\n"
    "--------------------------------------------------------------------------\n"
    "--------------------------------------------------------------------------\n"
    "mpirun noticed that process rank 0 with PID 0 on node vm exited on signal 11 (Segmentation fault).\n"
    "--------------------------------------------------------------------------\n";

static const char ompi4_improper[] =
    "--------------------------------------------------------------------------\n"
    "mpirun has exited due to process rank 0 with PID 0 on\n"
    "node vm exiting improperly. There are three reasons this could occur:\n"
    "\n"
    "1. this process did not call \"init\" before exiting, but others in\n"
    "the job did. This can cause a job to hang indefinitely while it waits\n"
    "for all processes to call \"init\". By rule, if one process calls \"init\",\n"
    "then ALL processes must call \"init\" prior to termination.\n"
    "\n"
    "2. this process called \"init\", but exited without calling \"finalize\".\n"
    "By rule, all processes that call \"init\" MUST call \"finalize\" prior to\n"
    "exiting or it will be considered an \"abnormal termination\"\n"
    "\n"
    "You can avoid this message by specifying -quiet on the mpirun command line.\n"
    "--------------------------------------------------------------------------\n";

/* Open MPI 5 (prterun): the process is named "[prterun-<host>-<pid>@1,<rank>]". */
static const char ompi5_exit[] =
    "--------------------------------------------------------------------------\n"
    "prterun detected that one or more processes exited with non-zero status,\n"
    "thus causing the job to be terminated. The first process to do so was:\n"
    "\n"
    "   Process name: [prterun-m09r2n09-80749@1,12]\n"
    "   Exit code:    137\n"
    "--------------------------------------------------------------------------\n";

Test(runner, the_failing_rank_from_each_kind_of_report) {
    static const struct {
        const char *report;
        tri_launch_failure want;
    } cases[] = {
        {ompi4_abort, {1, 5, -1, 0, 0, -1, ""}},
        {ompi4_exit, {1, 3, -1, 0, 0, -1, ""}},
        {ompi4_signal, {0, -1, 11, 0, 0, -1, ""}},
        {ompi4_improper, {0, 0, -1, 1, 0, -1, ""}},
        {ompi5_exit, {12, 137, -1, 0, 0, -1, ""}},
        /* wrapped differently: any run of blanks and line breaks is one space */
        {"MPI_ABORT   was invoked\non rank 3 in communicator MPI_COMM_WORLD with\r\n errorcode 7.", {3, 7, -1, 0, 0, -1, ""}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tri_launch_failure f = {-9, -9, -9, -9, 0, -9, "stale"};
        cr_expect_eq(tri_launch_report_parse(cases[i].report, &f), 1, "case %zu", i);
        cr_expect_eq(f.rank, cases[i].want.rank, "case %zu", i);
        cr_expect_eq(f.code, cases[i].want.code, "case %zu", i);
        cr_expect_eq(f.signo, cases[i].want.signo, "case %zu", i);
        cr_expect_eq(f.improper, cases[i].want.improper, "case %zu", i);
        cr_expect_eq(f.recorded, -1, "case %zu: a report is no rank's own record", i);
        cr_expect_str_eq(f.reason, "", "case %zu", i);
    }
}

Test(runner, a_report_that_names_no_rank_is_no_failure) {
    const char *none[] = {NULL, "",
                          "--------------------------------------------------------------------------\n"
                          "Primary job  terminated normally, but 1 process returned\n"
                          "a non-zero exit code. Per user-direction, the job has been aborted.\n",
                          /* a process name without its exit code */
                          "  Process name: [[8046,1],1]\n"};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
        tri_launch_failure f = {7, 7, 7, 7, 0, 7, "stale"};
        cr_expect_eq(tri_launch_report_parse(none[i], &f), 0, "case %zu", i);
        cr_expect_eq(f.rank, -1, "case %zu", i);
        cr_expect_eq(f.code, -1, "case %zu", i);
        cr_expect_eq(f.signo, -1, "case %zu", i);
        cr_expect_eq(f.improper, 0, "case %zu", i);
        cr_expect_eq(f.recorded, -1, "case %zu", i);
    }
}

/* ------------------------------------------------------------------------ */
/* A rank's log                                                             */

static char *tail_of(const char *dir, const char *text, int lines, int *rc) {
    char path[4200];
    snprintf(path, sizeof path, "%s/rank_0.log", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    char *out = (char *)"poison";
    *rc = tri_launch_log_tail(path, lines, &out);
    return out;
}

Test(runner, the_tail_of_a_log_is_its_last_lines_of_the_last_attempt) {
    char *dir = tt_mkdtemp();
    int rc;
    char *t = tail_of(dir, "a\nb\nc\nd\n", 2, &rc);
    cr_assert_eq(rc, TRI_TAIL_OK);
    cr_expect_str_eq(t, "  | c\n  | d\n");
    free(t);
    t = tail_of(dir, "a\nb", 5, &rc); /* fewer lines than asked, the last unended */
    cr_assert_eq(rc, TRI_TAIL_OK);
    cr_expect_str_eq(t, "  | a\n  | b\n");
    free(t);
    t = tail_of(dir, "old 1\nold 2\n----- tridentrun: attempt 2 -----\nnew 1\n\nnew 2\n", 20, &rc);
    cr_assert_eq(rc, TRI_TAIL_OK);
    cr_expect_str_eq(t, "  | new 1\n  | \n  | new 2\n");
    free(t);
    t = tail_of(dir, "old\n----- tridentrun: attempt 2 -----\n", 20, &rc);
    cr_expect_eq(rc, TRI_TAIL_NO_OUTPUT);
    cr_expect_null(t);
    t = tail_of(dir, "", 20, &rc);
    cr_expect_eq(rc, TRI_TAIL_EMPTY);
    cr_expect_null(t);
    char path[4200];
    snprintf(path, sizeof path, "%s/none.log", dir);
    t = (char *)"poison";
    cr_expect_eq(tri_launch_log_tail(path, 20, &t), TRI_TAIL_NO_LOG);
    cr_expect_eq(errno, ENOENT);
    cr_expect_null(t);
    tt_rmrf(dir);
    free(dir);
}
