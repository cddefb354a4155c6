/* Bad steps: what the trainer does with a step whose loss or gradient norm
 * is not finite, or (train.skip_spikes) whose loss spikes, in every
 * precision; rolling back after train.max_bad_steps of them in a row; the
 * ranges of global samples never to be read again. docs/reliability.md
 * ("Bad steps") is the user's account.
 *
 * A bad step is SKIPPED: no parameter, moment or AdamW step count changes;
 * its samples count as consumed and the learning-rate schedule moves on
 * (as an fp16 overflow skip always did, and as in Megatron). Every rank
 * takes the same decision from values all-reduced over the world.
 *
 * The running mean a spike is measured against: m over the losses of the
 * steps not skipped, m_n = m_{n-1} + (loss_n - m_{n-1}) / min(n, 50): the
 * plain mean of the first 50, then an exponential mean with weight 1/50
 * (about the last 50 steps). A loss is a spike when at least 10 losses
 * entered m (the warm-up) and loss > train.spike_factor x m. Skipped steps
 * do not enter m.
 *
 * Sample ranges: [begin, end) of global sample indices (the index k of
 * "global sample k is a pure function of (seed, k, data files)", the unit of
 * state.json's samples_consumed). Before each step the data position
 * (samples_consumed) that lies inside a range jumps to its end, so a step
 * reads the G samples after it. Ranges come from train.skip_samples and from
 * rollbacks; they are kept sorted and merged, and written into every
 * checkpoint's state.json, so that a resume reads what the uninterrupted run
 * read. This part is pure (no trainer): tests/train/test_badstep.c; the
 * trainer's is src/train/bad_run.c (declared in src/train/trainer.h). */
#ifndef TRI_TRAIN_BADSTEP_H
#define TRI_TRAIN_BADSTEP_H

#include <stdint.h>

#include <cjson/cJSON.h>

#define TRI_BADSTEP_MAX_RANGES   64 /* sample ranges one run keeps                    */
#define TRI_BADSTEP_SPIKE_N      50 /* the running mean's horizon (steps)             */
#define TRI_BADSTEP_SPIKE_WARMUP 10 /* losses in the mean before a spike can count   */

/* Why a step was skipped (0: it was not). */
typedef enum tri_skip_reason {
    TRI_SKIP_NONE = 0,
    TRI_SKIP_FP16_OVERFLOW,  /* fp16: gradient overflow at the current loss scale */
    TRI_SKIP_NONFINITE_LOSS, /* the loss is NaN or infinite                       */
    TRI_SKIP_NONFINITE_NORM, /* the gradient norm is NaN or infinite (fp32, bf16) */
    TRI_SKIP_SPIKE,          /* train.skip_spikes: loss > spike_factor x mean     */
} tri_skip_reason;

typedef struct tri_sample_range {
    uint64_t begin, end; /* global samples [begin, end) */
} tri_sample_range;

typedef struct tri_badstep {
    tri_sample_range ranges[TRI_BADSTEP_MAX_RANGES]; /* sorted, disjoint, not adjacent */
    int n_ranges;
    double spike_mean;     /* the running mean above (0 before any loss)       */
    int64_t spike_count;   /* losses that entered it                           */
    int in_a_row;          /* bad steps in a row (an fp16 overflow at a scale
                             above the minimum neither counts nor breaks one)  */
    uint64_t streak_begin; /* data position of the first step of that row     */
    int64_t skipped;       /* steps skipped, all reasons (state.json carries it) */
    int rollbacks;         /* rollbacks done (state.json carries it)            */
    /* this process only */
    int rollbacks_in_a_row;     /* without a good step between: 2 and the run stops */
    int last_ckpt_step;         /* the newest checkpoint saved or resumed; -1: none */
    int64_t steps_run, updates; /* steps attempted and optimizer updates made  */
    int inject_now;             /* debug.inject_*: this step, this rank          */
    tri_skip_reason reason;     /* of the last step                              */
} tri_badstep;

/* Empty state: no ranges, no checkpoint known. */
void tri_badstep_init(tri_badstep *b);

/* Adds [begin, end) (begin < end), merging with the ranges it touches.
 * Returns 0, or -1 (printed) when TRI_BADSTEP_MAX_RANGES would be exceeded. */
int tri_badstep_add_range(tri_badstep *b, uint64_t begin, uint64_t end);

/* Parses "b-e,b-e" (decimal, b < e < 2^53, spaces allowed around the
 * numbers; "" is no range) and adds each. `key` names the text in messages.
 * Returns 0, or -1 (printed, naming key and the piece at fault). */
int tri_badstep_parse_ranges(tri_badstep *b, const char *text, const char *key);

/* The data position a step starting at `pos` reads from: pos, or the end of
 * the range pos lies in. */
uint64_t tri_badstep_position(const tri_badstep *b, uint64_t pos);

/* Whether `loss` is a spike against the running mean (see the top). */
int tri_badstep_is_spike(const tri_badstep *b, double loss, double factor);

/* A step not skipped: its loss enters the running mean. */
void tri_badstep_note_loss(tri_badstep *b, double loss);

/* The one-word name of a reason ("nonfinite_loss", ...) and a phrase for the log. */
const char *tri_skip_reason_name(tri_skip_reason r);
const char *tri_skip_reason_text(tri_skip_reason r);

/* state.json: adds "bad_steps": {"skipped_steps", "bad_in_a_row",
 * "streak_begin", "rollbacks", "spike_mean", "spike_count",
 * "skip_samples": [[b, e], ...]} to root. */
void tri_badstep_to_state(const tri_badstep *b, cJSON *root);

/* Reads "bad_steps" of a state.json text (`name` in messages). Absent (a
 * checkpoint from before it): b is left as it was. With ranges != 0 its
 * sample ranges are added to b's; the counters and the running mean replace
 * b's. Returns 0, or -1 (printed, naming the file and key) when present but
 * malformed. */
int tri_badstep_from_state(tri_badstep *b, const char *json, const char *name, int ranges);

#endif
