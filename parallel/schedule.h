/* Pipeline schedules as data, and the simulator that proves them.
 *
 * A schedule is, for each pipeline rank (stage) of pp, an ordered list of
 * actions. Compute actions name a micro-batch and one of the rank's local
 * chunks (0 .. vpp-1; local chunk c of stage s is model chunk c*pp + s, see
 * tri_chunks_even in model/gpt.h). Communication actions move one chunk
 * boundary's tensor of one micro-batch to or from a neighbouring stage:
 *
 *   SEND_ACT (mb, c)   the output of local chunk c (model chunk c*pp+s) goes
 *                      to the stage holding model chunk c*pp+s+1;
 *   RECV_ACT (mb, c)   the input of local chunk c comes from the stage
 *                      holding model chunk c*pp+s-1;
 *   SEND_GRAD (mb, c)  the gradient of local chunk c's input goes back to
 *                      the stage holding model chunk c*pp+s-1;
 *   RECV_GRAD (mb, c)  the gradient of local chunk c's output comes from
 *                      the stage holding model chunk c*pp+s+1.
 *
 * `peer` is that stage's pipeline rank. Consecutive communication actions of
 * a list form one batch: the executor posts them all together (MPI isend /
 * irecv, or one ncclGroupStart/End) and, before the next compute action,
 * waits for the batch's receives only. A send never blocks its rank: its
 * buffer stays reserved until the send completes, which the executor tests
 * now and then and waits for at the end of the step (sends are asynchronous,
 * as the zero-bubble schedules assume). Messages between two stages in one
 * direction are matched in the order they are posted; the simulator checks
 * that both sides agree on each message's (kind, micro-batch, model chunk).
 *
 * BWD is a full backward (input and weight gradients); the zero-bubble
 * schedule splits it into BWD_IN (B: input gradient, what the previous stage
 * waits for) and BWD_W (W: weight gradients, needs nothing from other stages).
 * A micro-batch's saved activations of a chunk are alive from its FWD until
 * its BWD (or its BWD_W). REDUCE (c) marks where local chunk c's gradients
 * are final for this step (the DP reduction's wait); the generators put all
 * of them at the end of each list, after the last backward of every chunk.
 *
 * Pure data and pure logic: nothing here touches a model, a transport or
 * memory beyond its own lists (parallel/ never includes model/).
 */
#ifndef TRI_SCHEDULE_H
#define TRI_SCHEDULE_H

#include <stddef.h>
#include <stdio.h>

typedef enum {
    TRI_SCHED_1F1B = 0,    /* warmup forwards, steady 1F1B, cooldown (vpp 1)   */
    TRI_SCHED_INTERLEAVED, /* Megatron's interleaved 1F1B over vpp chunks      */
    TRI_SCHED_GPIPE,       /* every forward, then every backward               */
    TRI_SCHED_ZBH1,        /* zero-bubble H1 (Qi et al. 2024), vpp 1           */
    TRI_SCHED_FORWARD,     /* forwards only (evaluation): no backward, no REDUCE */
} tri_sched_kind;

typedef enum {
    TRI_ACT_FWD = 0,
    TRI_ACT_BWD,    /* full backward: B + W                                 */
    TRI_ACT_BWD_IN, /* B: input gradient (zero-bubble)                      */
    TRI_ACT_BWD_W,  /* W: weight gradients (zero-bubble)                    */
    TRI_ACT_SEND_ACT,
    TRI_ACT_RECV_ACT,
    TRI_ACT_SEND_GRAD,
    TRI_ACT_RECV_GRAD,
    TRI_ACT_REDUCE, /* local chunk `chunk`'s gradients are final this step  */
} tri_act_kind;

typedef struct tri_action {
    tri_act_kind kind;
    int mb;    /* micro-batch 0 .. m-1 (REDUCE: -1)                        */
    int chunk; /* local chunk 0 .. vpp-1                                   */
    int peer;  /* communication: the other stage's pipeline rank; else -1  */
} tri_action;

typedef struct tri_schedule {
    tri_sched_kind kind;
    int pp, vpp, m; /* stages, chunks per stage, micro-batches per step     */
    int group;      /* interleaved: micro-batches per group N (pp); else 0  */
    int *n;         /* [pp]: actions of each rank                            */
    tri_action **a; /* [pp][n[r]]                                            */
} tri_schedule;

/* "1f1b", "interleaved", "gpipe", "zb-h1", "forward" -> the kind; -1 else. */
int tri_sched_parse(const char *s);
const char *tri_sched_name(tri_sched_kind k);
/* "forward", "backward", "B", "W", "send-act", "recv-act", ... */
const char *tri_act_name(tri_act_kind k);
/* One action as text, e.g. "forward mb 3 chunk 1", "recv-act mb 3 chunk 1
 * from stage 0", for reports and the watchdog. Returns buf. */
char *tri_action_str(const tri_action *a, char *buf, size_t n);

/* Builds every rank's list. Checks the numbers first: pp >= 1, m >= 1,
 * vpp >= 1; vpp > 1 only with INTERLEAVED or FORWARD; INTERLEAVED needs
 * pp >= 2, vpp >= 2 and Megatron's constraints with group N = pp: m >= pp and
 * m % pp == 0 (the message says which number breaks which rule). pp == 1 gives
 * the trivial list (each micro-batch forward then backward). Returns 0, or -1
 * with a message (src/base/err.h) naming the numbers; *s is then empty. */
int tri_schedule_build(tri_schedule *s, tri_sched_kind kind, int pp, int vpp, int m);
/* The numbers' check of tri_schedule_build, silent and without building: 0,
 * or -1 with the message tri_schedule_build would print written into why (n
 * bytes, truncated), for a caller that tries many layouts (the planner). */
int tri_schedule_check(tri_sched_kind kind, int pp, int vpp, int m, char *why, size_t n);
void tri_schedule_free(tri_schedule *s); /* NULL-safe; zeroes *s */

/* Unit costs of the compute actions; a full backward costs b + w. */
typedef struct tri_sim_costs {
    double f, b, w;
} tri_sim_costs;

typedef struct tri_sim_result {
    int deadlock;    /* 1: some rank waits forever at a receive whose send is never posted, or
                        * (every list ran to its end) a send is never received (see why) */
    int invalid;     /* 1: the lists are wrong otherwise (see why): the two sides of a message
                        * disagree on (kind, micro-batch, model chunk), a peer is not the neighbour,
                        * a compute runs before its input arrived or twice, a send before its
                        * compute, a REDUCE before the chunk's last backward; play stops there */
    char why[1024];  /* deadlock or invalid: the stuck ranks, their actions and peers (a stuck
                        * rank waits at a receive: sends do not block) */
    double makespan; /* time the last rank finishes                        */
    double *busy;    /* [pp] compute time of each rank                     */
    double *idle;    /* [pp] makespan - busy                               */
    double bubble;   /* idle / busy of the busiest rank                    */
    int *peak;       /* [pp] peak (micro-batch, chunk) pairs alive per rank, alive from FWD
                        * until BWD or BWD_W (FORWARD schedules: only during the FWD)          */
    int *peak_chunk; /* [pp * vpp] peak alive per rank r and chunk c at [r*vpp+c] */
    int *peak_in;    /* [pp] the same with a pair freed at its BWD_IN already (B frees what W
                        * does not need: the layer inputs and output grads stay); = peak without
                        * zero-bubble actions                                                  */
    double **start;  /* [pp][n[r]] start time of each action (comm: when posted) */
    double **end;    /* [pp][n[r]] end time; a receive: when its batch completed (every
                        * receive of the batch met its send); a send: when it met its receive
                        * (the later of the two posts: until then its buffer is held; 0 if never) */
} tri_sim_result;

/* Plays every rank's list together with costs. Communication takes no time;
 * sends are asynchronous: a batch completes when every RECEIVE in it has met
 * its matching send, at the later of the batch's post time and those sends'
 * post times; its sends neither wait nor delay it. A rank is stuck only at a
 * receive whose send is never posted. Returns 0 with *r filled (deadlock or
 * not), or -1 on memory. */
int tri_schedule_simulate(const tri_schedule *s, tri_sim_costs costs, tri_sim_result *r);
void tri_sim_result_free(tri_sim_result *r); /* NULL-safe */

/* The closed form of the bubble ratio of a kind: (p-1)/m for 1F1B and
 * GPipe, (p-1)/(v m) interleaved and FORWARD, (p-1)(f+b-w)/(m(f+b+w)) ZB-H1;
 * 0 with pp 1. The simulated lists equal it (m >= p; interleaved with m a
 * multiple of p), ZB-H1 when w <= min(f, b) (the paper's setting; with a
 * longer W the simulated ZB-H1 bubble lies between this and 1F1B's (p-1)/m,
 * see docs/parallelism.md). */
double tri_schedule_bubble_formula(tri_sched_kind kind, int pp, int vpp, int m, tri_sim_costs costs);

/* The timeline, one row per rank, one column per time unit (like torch's
 * pipeline-order grid): "F3" forward of mb 3 (chunk shown as F3.1 when
 * vpp > 1), "B3", "W3", "." idle. Then the bubble and the peaks. A makespan
 * over TRI_GRID_MAX_COLS time units is scaled to TRI_GRID_MAX_COLS columns
 * (a line above the grid says by how much), so the output is bounded by the
 * stages, not by the costs or the micro-batches. */
#define TRI_GRID_MAX_COLS 256

/* Most stage x chunk x micro-batch units a schedule may have (pp x vpp x m):
 * building and simulating one takes about 300 bytes and 2 us per unit, so
 * 2^22 units is about 1.2 GB and 8 s; the trainer, the planner and `trident
 * schedule` refuse more before building it. */
#define TRI_SCHED_MAX_UNITS (1 << 22)
void tri_schedule_print_grid(FILE *f, const tri_schedule *s, const tri_sim_result *r);

#endif
