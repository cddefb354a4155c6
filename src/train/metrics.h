/* The run's metrics sink: every figure the trainer records goes through
 * tri_metrics_write, which writes one line of <log.dir>/metrics.jsonl and,
 * with log.tensorboard, the line's numbers as TensorBoard scalars at the
 * same step (base/tfevents.h) in an event file beside it. Only world rank 0
 * (the logger) opens one.
 *
 * A line is {"step": N, "<key>": <value>, ...} in the order of the fields
 * given, each number printed with its field's own printf conversion (so
 * metrics.jsonl reads exactly as it always has: scripts/plot.py, the sweep
 * summary and the tests parse it). */
#ifndef TRI_TRAIN_METRICS_H
#define TRI_TRAIN_METRICS_H

#include <stddef.h>

typedef enum tri_metric_kind {
    TRI_METRIC_NUM,  /* a number: JSON printf(fmt, value); a scalar          */
    TRI_METRIC_BOOL, /* true/false: a scalar 1 or 0                         */
    TRI_METRIC_JSON  /* JSON text written as it is (an object): no scalar    */
} tri_metric_kind;

typedef struct tri_metric {
    const char *key; /* the JSON key; the TensorBoard tag is tri_metrics_tag(key) */
    tri_metric_kind kind;
    double value;     /* NUM: the value; BOOL: nonzero is true            */
    const char *fmt;  /* NUM: one printf conversion of a double ("%.17g",
                         "%.6e"; "%.0f" for counts)                        */
    const char *json; /* JSON: the value's text                           */
} tri_metric;

#define TRI_METRIC_NUM(k, f, v)  ((tri_metric){.key = (k), .kind = TRI_METRIC_NUM, .value = (v), .fmt = (f)})
#define TRI_METRIC_BOOL(k, v)    ((tri_metric){.key = (k), .kind = TRI_METRIC_BOOL, .value = (v) ? 1.0 : 0.0})
#define TRI_METRIC_JSON(k, text) ((tri_metric){.key = (k), .kind = TRI_METRIC_JSON, .json = (text)})

typedef struct tri_metrics tri_metrics;

/* What tri_metrics_open does with an existing metrics.jsonl. */
typedef enum tri_metrics_mode {
    TRI_METRICS_NEW,    /* a new run: truncated                                  */
    TRI_METRICS_RESUME, /* a resume from the checkpoint of resume_step: appended  */
    TRI_METRICS_RESTART /* --resume with no checkpoint yet (the run starts again at
                           step 0): truncated, but for its "event" lines (the
                           launcher's, tri_metrics_take_events), which are kept  */
} tri_metrics_mode;

/* Opens <dir>/metrics.jsonl (see tri_metrics_mode) and, when
 * `tensorboard`, a new event file in dir, which starts with a
 * session-start record at the run's first step (resume_step + 1 on a
 * resume, else 1): TensorBoard's loaders take every start after a log
 * dir's first as a restart and drop the earlier files' points from that
 * step on (what an interrupted run logged past its checkpoint; on a fresh
 * start, an old run's curve, as metrics.jsonl is truncated; the launcher's
 * events of a restart are at step 0 and stay). dir must exist. Returns NULL
 * said (the file named). */
tri_metrics *tri_metrics_open(const char *dir, tri_metrics_mode mode, int resume_step, int tensorboard);

/* The events a launcher hands to the trainer it relaunches (tridentrun's
 * elastic shrink: a layout change) come in <dir>/TRI_LOG_PENDING_EVENTS
 * (config/config.h), one JSON object a line ({"event": "elastic_shrink",
 * "elastic_dp_from": 2, ...}, no "step"), appended by the launcher. With
 * `take` (a run that resumes): each line is written through m at `step`
 * (the step the run resumes from), its fields in order (numbers are
 * scalars, tagged by tri_metrics_tag; strings and the rest JSON text; a
 * line that is not an object is warned about and skipped), then the file is
 * removed, so that each event is written once. Without (a new run): the file,
 * an earlier job's, is removed unread. Returns the events written. */
int tri_metrics_take_events(tri_metrics *m, const char *dir, int step, int take);

/* One line at `step`: fields f[0..n) in order. The line is flushed, and so
 * is the event record. A failing event file is warned about once and then
 * left alone (metrics.jsonl goes on; training does not stop for a chart). */
void tri_metrics_write(tri_metrics *m, int step, const tri_metric *f, size_t n);

/* The TensorBoard tag of a metrics.jsonl key: the known keys by a table
 * ("loss" -> "train/loss", "val_loss" -> "val/loss", "tokens_per_s" ->
 * "perf/tokens_per_s", "ms" -> "perf/step_ms", ...); a key with a '/' as it
 * is; else by prefix "val_<x>" -> "val/<x>", "ckpt_<x>" and "checkpoint_<x>"
 * -> "checkpoint/<x>", "perf_<x>" -> "perf/<x>", "elastic_<x>" ->
 * "elastic/<x>"; the rest "train/<key>".
 * A new field needs no code here unless its tag should differ. Returns out. */
const char *tri_metrics_tag(const char *key, char *out, size_t n);

/* The event file's path ("" without log.tensorboard), for messages. */
const char *tri_metrics_tb_path(const tri_metrics *m);

/* Closes both files; NULL-safe. */
void tri_metrics_close(tri_metrics *m);

#endif
