/* src/launch/dryrun: what --dry-run prints for a plan, line by line, and
 * the command quoted so that a shell reads back the same arguments. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/testutil.h"
#include "launch/launch.h"

/* Runs print(f) into a string (malloc'd). */
#define CAPTURE(out, call)                               \
    do {                                                 \
        size_t len_ = 0;                                 \
        FILE *f = open_memstream(&(out), &len_);         \
        cr_assert_not_null(f);                           \
        call;                                            \
        fclose(f);                                       \
    } while (0)

Test(dryrun, commands_are_quoted_for_the_shell) {
    char *v[] = {"mpirun", "-x", "A=b:c,d/e@f%g+h", "hi there", "it's", "", "$HOME", "a\"b", NULL};
    tri_launch_argv a = {.v = v, .n = 8};
    char *out = NULL;
    CAPTURE(out, tri_launch_print_command(f, &a));
    cr_expect_str_eq(out, "mpirun -x A=b:c,d/e@f%g+h 'hi there' 'it'\\''s' '' '$HOME' 'a\"b'\n");
    free(out);
    /* and a shell gives back every argument as it was */
    char *cmd = NULL;
    CAPTURE(cmd, (fputs("printf '<%s>' ", f), tri_launch_print_command(f, &(tri_launch_argv){.v = v + 1, .n = 7})));
    char *said = NULL;
    cr_assert_eq(tt_run(cmd, &said), 0, "%s", cmd);
    cr_expect_str_eq(said, "<-x><A=b:c,d/e@f%g+h><hi there><it's><><$HOME><a\"b>");
    free(said);
    free(cmd);
}

/* Two hosts, 3 + 1 ranks, the trainer's layout tp 2 x pp 1 x dp 2 (no
 * config: no stages). */
static void hand_plan(tri_launch_plan *p, int layout) {
    memset(p, 0, sizeof *p);
    p->nhosts = 2;
    p->hosts = calloc(2, sizeof *p->hosts);
    p->slots = calloc(2, sizeof *p->slots);
    p->lines = calloc(2, sizeof *p->lines);
    p->ranks = calloc(2, sizeof *p->ranks);
    p->hosts[0] = strdup("nodeA");
    p->hosts[1] = strdup("nodeB");
    p->ranks[0] = 3;
    p->ranks[1] = 1;
    p->world = 4;
    p->nproc = 3;
    if (layout) {
        p->have_layout = 1;
        p->tp = 2;
        p->pp = 1;
        p->dp = 2;
    }
    p->cores = 1;
    p->threads = 1;
    p->oversub = p->bind_none = 1;
    snprintf(p->log_dir, sizeof p->log_dir, "/runs/logs");
    snprintf(p->self, sizeof p->self, "/opt/bin/tridentrun");
    p->cmd0 = strdup("/opt/bin/trident");
}

Test(dryrun, the_rank_map_and_the_commands) {
    tri_launch_plan p;
    hand_plan(&p, 1);
    const char *cmd[] = {"trident", "bench", "c.json"};
    tri_launch_opts o = {.hostfile = "hosts", .log_dir = "logs", .mpirun = "mpirun", .dry_run = 1,
                         .max_restarts = 2, .cmd = cmd, .cmd_argc = 3};
    char *out = NULL;
    CAPTURE(out, tri_launch_dry_run(f, &o, &p));
    /* ranks r = tp_rank + tp * (dp_rank + dp * pp_rank) (parallel/mesh.h) */
    const char *want =
        "tridentrun: 4 ranks = 3 on nodeA + 1 on nodeB; parallel.tp 2 x pp 1 x dp 2; 1 core here, OMP_NUM_THREADS=1\n"
        "  rank  host                       tp   dp   pp  log\n"
        "     0  nodeA                       0    0    0  /runs/logs/rank_0.log\n"
        "     1  nodeA                       1    0    0  /runs/logs/rank_1.log\n"
        "     2  nodeA                       0    1    0  /runs/logs/rank_2.log\n"
        "     3  nodeB                       1    1    0  /runs/logs/rank_3.log\n"
        "mpirun command:\n"
        "mpirun -np 4 -H nodeA:3,nodeB:1 --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "
        "-x OMP_WAIT_POLICY=PASSIVE /opt/bin/tridentrun --rank-exec --log-dir /runs/logs -- /opt/bin/trident bench "
        "c.json\n"
        "on restart (up to 2):\n"
        "mpirun -np 4 -H nodeA:3,nodeB:1 --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "
        "-x OMP_WAIT_POLICY=PASSIVE /opt/bin/tridentrun --rank-exec --log-dir /runs/logs --attempt 1 -- "
        "/opt/bin/trident bench c.json --resume\n";
    cr_expect_str_eq(out, want);
    free(out);
    tri_launch_plan_free(&p);
}

Test(dryrun, without_a_layout_the_coordinates_are_dashes) {
    tri_launch_plan p;
    hand_plan(&p, 0);
    p.ranks[0] = p.ranks[1] = 2;
    p.nproc = 2;
    p.cores = 8;
    p.threads = 3;
    p.user_threads = 1;
    const char *cmd[] = {"/bin/true"};
    tri_launch_opts o = {.log_dir = "logs", .mpirun = "mpirun", .dry_run = 1, .cmd = cmd, .cmd_argc = 1};
    char *out = NULL;
    CAPTURE(out, tri_launch_dry_run(f, &o, &p));
    const char *want = "tridentrun: 4 ranks = 2 per host x 2 hosts; 8 cores here, OMP_NUM_THREADS=3 (yours)\n"
                       "  rank  host                       tp   dp   pp  log\n"
                       "     0  nodeA                       -    -    -  /runs/logs/rank_0.log\n"
                       "     1  nodeA                       -    -    -  /runs/logs/rank_1.log\n"
                       "     2  nodeB                       -    -    -  /runs/logs/rank_2.log\n"
                       "     3  nodeB                       -    -    -  /runs/logs/rank_3.log\n"
                       "mpirun command:\n";
    cr_expect(strncmp(out, want, strlen(want)) == 0, "%s", out);
    cr_expect_null(strstr(out, "on restart"), "%s", out);
    free(out);
    tri_launch_plan_free(&p);
}
