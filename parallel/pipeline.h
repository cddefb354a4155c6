/* The pipeline executor: runs one rank's action list of a schedule
 * (parallel/schedule.h) over this rank's chunks, which it drives through a
 * table of callbacks (tri_stage_ops below; model/stage.h implements it over
 * model/runtime.h, tests/parallel/test_pipeline.c over a fake), so that
 * parallel/ never includes model/.
 *
 * For each action, in order:
 *   FWD (mb, c)     acquires a saved slot of chunk c, stages the micro-batch's
 *                   ids (first chunk) and targets (last chunk) through the
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
 * Mailbox buffers (one micro-batch's chunk boundary, of the stage's
 * boundary_elems and dtype) are allocated up front for the busiest point of
 * any of the schedules given to tri_pipe_init, counting a send's buffer free
 * at the end of its batch; more are added when sends complete later than
 * that. */
#ifndef TRI_PIPELINE_H
#define TRI_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/ctx.h"
#include "kernels/dtype.h"
#include "parallel/comm.h"
#include "parallel/grad_sync.h"
#include "parallel/schedule.h"
#include "parallel/watchdog.h"

/* The most local chunks (vpp) a stage may hold. */
#define TRI_PIPE_MAX_CHUNKS 64

/* Where a local chunk sits in the model (tri_pipe_stage.ends, a bit set). */
enum {
    TRI_PIPE_FIRST = 1, /* the model's first chunk: embeds the token ids; no activation comes in */
    TRI_PIPE_LAST = 2,  /* the model's last chunk: head and loss on the targets; none goes out  */
};

/* What the forwards of a run compute. */
typedef enum {
    TRI_PIPE_LOSS = 0, /* the loss only; the slot is released after the forward (a FORWARD schedule) */
    TRI_PIPE_TRAIN,    /* the loss and its gradient (times dscale); the slot is kept for the backward */
} tri_pipe_mode;

/* The stage the executor drives. Every callback gets the stage's opaque
 * `stage` pointer first; c is a local chunk (0 .. n_chunks-1) and slot what
 * acquire returned for that chunk. They are called on the executor's thread,
 * in the list's order, and none of them fails (a failure inside one is
 * fatal, as in the runtime). A chunk boundary is boundary_elems elements of
 * dtype in backend memory of the stage's ctx. */
typedef struct tri_stage_ops {
    /* A free saved slot of chunk c (counted as in use), or NULL when every
     * one is taken (the executor then stops: the pool holds the schedule's
     * peak). */
    void *(*acquire)(void *stage, int c);
    /* Gives slot back to chunk c's pool. */
    void (*release)(void *stage, int c, void *slot);
    /* Copies one micro-batch's host ids (B x T; NULL unless c is FIRST) and
     * targets (B x T; NULL unless c is LAST) into slot. */
    void (*stage_batch)(void *stage, int c, void *slot, const int32_t *ids, const int32_t *targets);
    /* Forward of the micro-batch staged in slot through chunk c. x: the
     * chunk's input (a boundary), NULL when c is FIRST. Keeps the output
     * (c not LAST) for copy_act. Returns the micro-batch's loss sum when c
     * is LAST, else 0. */
    double (*forward)(void *stage, int c, void *slot, const void *x, tri_pipe_mode mode, float dscale);
    /* Backward of the micro-batch in slot (forwarded in TRI_PIPE_TRAIN).
     * dy: the gradient of the chunk's output (a boundary), NULL when c is
     * LAST. Keeps the gradient of the chunk's input for copy_grad; parameter
     * gradients accumulate. */
    void (*backward)(void *stage, int c, void *slot, const void *dy);
    /* The same split in two (zero-bubble schedules): _input as backward but
     * the weight gradients of the linears are left in the slot for _weight,
     * which computes them later (no input, no output). */
    void (*backward_input)(void *stage, int c, void *slot, const void *dy);
    void (*backward_weight)(void *stage, int c, void *slot);
    /* Copy the output of the last forward (copy_act), or the input gradient
     * of the last backward or backward_input (copy_grad), to dst: one
     * boundary (overwrite). */
    void (*copy_act)(void *stage, void *dst);
    void (*copy_grad)(void *stage, void *dst);
} tri_stage_ops;

/* One pipeline stage as the executor sees it. */
typedef struct tri_pipe_stage {
    const tri_stage_ops *ops;
    void *stage;                             /* the callbacks' first argument; not owned */
    int n_chunks;                            /* local chunks, <= TRI_PIPE_MAX_CHUNKS     */
    unsigned char ends[TRI_PIPE_MAX_CHUNKS]; /* TRI_PIPE_FIRST | TRI_PIPE_LAST of each   */
    tri_ctx *ctx;                            /* whose memory the mailbox is; not owned   */
    size_t boundary_elems;                   /* one micro-batch's chunk boundary         */
    tri_dtype dtype;                         /* its elements (the activation dtype)      */
} tri_pipe_stage;

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
    int key; /* -1: free; -2 - index: a pending send's; else its message (box_key: tag, direction, mb) */
} tri_pipe_box;

typedef struct tri_pipe_send {
    tri_req req;
    int box;       /* the box it sends from, taken until it completes */
    char what[96]; /* the action, for the watchdog's report          */
} tri_pipe_send;

typedef struct tri_pipe {
    tri_pipe_stage st;      /* a copy; st.stage and st.ctx not owned */
    tri_comm *pp;           /* the pipeline group, not owned */
    tri_progress *progress; /* the watchdog's report: action text goes here; may be NULL */
    int stage, n_stages;
    size_t box_bytes;
    int n_box;
    tri_pipe_box *box;
    tri_pipe_send *sends; /* pending sends */
    int n_send, cap_send;
    int m_cap;
    void **slot_of; /* [m_cap * n_chunks]: the slot of (mb, chunk) between forward and backward */
    tri_pipe_stats stats;
} tri_pipe;

/* Sizes the mailbox for the busiest point of every schedule in scheds (this
 * rank's lists; each with pp = pp->size and vpp = st->n_chunks) and
 * allocates it. Returns 0 or -1 (printed). */
int tri_pipe_init(tri_pipe *p, const tri_pipe_stage *st, tri_comm *pp, tri_progress *progress,
                  const tri_schedule *const *scheds, int n_scheds);
void tri_pipe_free(tri_pipe *p); /* NULL-safe */
/* The most mailbox entries alive at once while running list a[0..n) on a
 * stage whose local chunk c sits at ends[c] (TRI_PIPE_FIRST | TRI_PIPE_LAST):
 * what tri_pipe_init allocates up front; the planner sizes the workspace
 * with it. */
int tri_pipe_box_need(const tri_action *a, int n, const unsigned char *ends);

/* Runs this rank's list of s. mode: TRI_PIPE_TRAIN (a schedule with
 * backwards; sync[] the chunks' DP reductions, or NULL) or TRI_PIPE_LOSS (a
 * FORWARD schedule; sync NULL). load (may be NULL) fills ids/targets (host,
 * B x T each) for a micro-batch before the first forward that needs them.
 * Returns the sum of the token losses of the last chunk's micro-batches (0
 * on other stages), or NAN when load failed (after the rest of this rank's
 * list was abandoned). */
double tri_pipe_run(tri_pipe *p, const tri_schedule *s, tri_pipe_mode mode, float dscale, tri_grad_sync *sync,
                    tri_pipe_loader load, void *load_ctx, const int32_t *ids, const int32_t *targets);

#endif
