/* The pipeline executor: runs one rank's action list of a schedule
 * (parallel/schedule.h) over this rank's chunks (model/runtime.h).
 *
 * For each action, in order:
 *   FWD (mb, c)     acquires a saved slot of chunk c, stages the micro-batch's
 *                   ids (embedding chunk) and targets (head chunk) through the
 *                   caller's loader, runs the chunk forward from the received
 *                   activation (or the embedding), and keeps the output for
 *                   its SEND in a mailbox buffer;
 *   BWD / BWD_IN    runs the chunk's backward (full, or input gradients only)
 *                   from the received output gradient (or the loss at the
 *                   head) and keeps the input gradient for its SEND; a full
 *                   backward releases the slot;
 *   BWD_W           the deferred weight gradients, then releases the slot;
 *   SEND / RECV     consecutive ones are one batch: all are posted together
 *                   (non-blocking, tags derived from the model chunk and the
 *                   direction, so a batch's order cannot deadlock), then its
 *                   receives are waited for, with the watchdog's report naming
 *                   the action and the peer stage. A send never holds its
 *                   stage up: it completes whenever its receiver gets to it
 *                   (tested at each batch, waited for before the step's
 *                   REDUCE), and its buffer stays taken until then;
 *   REDUCE (c)      waits for chunk c's data-parallel gradient reduction,
 *                   which the chunk's last backward started bucket by bucket
 *                   (tri_grad_sync_set_last is raised before it).
 * Mailbox buffers (one micro-batch's chunk boundary, B x T x C of the
 * activation dtype) are allocated up front for the busiest point of any of
 * the schedules given to tri_pipe_init, counting a send's buffer free at the
 * end of its batch; more are added when sends complete later than that.
 *
 * Private to src/ (above model/ and parallel/). */
#ifndef TRI_PIPELINE_H
#define TRI_PIPELINE_H

#include "model/runtime.h"
#include "parallel/comm.h"
#include "parallel/grad_sync.h"
#include "parallel/schedule.h"
#include "parallel/watchdog.h"

/* Fills the caller's host ids and targets with micro-batch mb; 0 or -1 (printed). */
typedef int (*tri_pipe_loader)(void *ctx, int mb);

/* Where one rank's time went in its last run: compute actions, waits for
 * p2p batches, and the span from the first action to the end of the last
 * compute action (the REDUCE waits excluded). */
typedef struct tri_pipe_stats {
    double busy_s, p2p_s, span_s;
} tri_pipe_stats;

typedef struct tri_pipe_box {
    void *mem;
    int key; /* -1: free; else the message's tag * 1,000,000 + micro-batch */
} tri_pipe_box;

typedef struct tri_pipe_send {
    tri_req req;
    int box;       /* the box it sends from, taken until it completes */
    char what[96]; /* the action, for the watchdog's report          */
} tri_pipe_send;

typedef struct tri_pipe {
    tri_gpt *g;             /* not owned */
    tri_slot_pool *pools;   /* [g->n_chunks], not owned */
    tri_workspace *ws;      /* not owned */
    tri_comm *pp;           /* the pipeline group, not owned */
    tri_progress *progress; /* the watchdog's report: action text goes here; may be NULL */
    int stage, n_stages;
    size_t box_bytes;
    int n_box;
    tri_pipe_box *box;
    tri_pipe_send *sends; /* pending sends */
    int n_send, cap_send;
    int m_cap;
    tri_slot **slot_of; /* [m_cap * n_chunks] */
    tri_pipe_stats stats;
} tri_pipe;

/* Sizes the mailbox for the busiest point of every schedule in scheds (this
 * rank's lists) and allocates it. Returns 0 or -1 (printed). */
int tri_pipe_init(tri_pipe *p, tri_gpt *g, tri_slot_pool *pools, tri_workspace *ws, tri_comm *pp,
                  tri_progress *progress, const tri_schedule *const *scheds, int n_scheds);
void tri_pipe_free(tri_pipe *p); /* NULL-safe */
/* The most mailbox entries alive at once while running list a[0..n) on the
 * stage whose chunks g holds (what tri_pipe_init allocates up front; the
 * planner sizes the workspace with it). */
int tri_pipe_box_need(const tri_gpt *g, const tri_action *a, int n);

/* Runs this rank's list of s. mode: TRI_FWD_TRAIN (a schedule with
 * backwards; sync[] the chunks' DP reductions) or TRI_FWD_LOSS (a FORWARD
 * schedule; sync NULL). load fills ids/targets (host, B x T each) for a
 * micro-batch before the first forward that needs them. Returns the sum of
 * the token losses of the head chunk's micro-batches (0 on other stages), or
 * NAN when load failed (after the rest of this rank's list was abandoned). */
double tri_pipe_run(tri_pipe *p, const tri_schedule *s, tri_fwd_mode mode, float dscale, tri_grad_sync *sync,
                    tri_pipe_loader load, void *load_ctx, const int32_t *ids, const int32_t *targets);

#endif
