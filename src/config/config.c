/* The run configuration (src/config/config.h): one static const field table below
 * drives defaults, JSON parsing, `--set` overrides, range validation, the
 * start-up echo, `--help` and the JSON dump, so none of them can drift.
 *
 * Each field's section and key are its member path in tri_config, spelled
 * once (the FIELD macro stringifies it), and its type is read off the member
 * itself with _Generic, so the table cannot disagree with the struct.
 *
 * Order of work in a load: defaults -> JSON file (type checks, values that
 * cannot be stored: too long, not an integer, outside int) -> overrides in
 * order -> per-field ranges -> cross-field rules. Everything happens on a
 * local copy; *cfg changes only on success. */
#include "config/config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/err.h"
#include "base/file.h"
#include "base/json.h"
#include "model/gpt.h"

/* ------------------------------------------------------------------------ */
/* The field table                                                          */

/* FT_ENUM: a choice stored as its enum; the JSON, --set, the echo and the
 * dump spell it by name, from the field's `choices` ("none|selective|full",
 * the k-th name standing for values[k], or for k when values is NULL). */
typedef enum field_type { FT_INT, FT_U64, FT_DOUBLE, FT_STRING, FT_ENUM } field_type;

/* Range flags: which bounds exist, whether they are open, and "non-empty". */
enum {
    R_LO = 1u << 0, /* value >= lo (or > lo with R_LO_OPEN)          */
    R_HI = 1u << 1, /* value <= hi (or < hi with R_HI_OPEN)          */
    R_LO_OPEN = 1u << 2,
    R_HI_OPEN = 1u << 3,
    R_REQUIRED = 1u << 4, /* string fields: must not be empty              */
    R_BOOL = 1u << 5,     /* an int that also takes true/false (1/0) beyond the switches
                             of range [0, 1]: parallel.zero, a switch before stage 2 */
};

typedef struct field {
    const char *section, *key; /* section "" for a top-level key */
    const char *name;          /* "section.key", or the key of a top-level one: for messages */
    field_type type;
    size_t offset;       /* into tri_config                                 */
    size_t size;         /* sizeof the member (string capacity incl. NUL)   */
    double def;          /* numeric default (int, double, uint64 <= 2^53)   */
    const char *def_str; /* string default; NULL for numeric fields         */
    double lo, hi;       /* bounds, used as the flags say                   */
    unsigned flags;
    const char *help;
    const char *choices; /* string and enum fields: "a|b|c", the only values allowed; NULL: any */
    const int *values;   /* enum fields: the value of each choice (NULL: its index)   */
    size_t text_cap;     /* enum fields: the longest text taken (as a string field's)  */
} field;

#define MEMBER(path) (((tri_config *)0)->path)
#define MEMBER_TYPE(path) \
    _Generic(MEMBER(path), int : FT_INT, uint64_t : FT_U64, double : FT_DOUBLE, char * : FT_STRING)
#define FIELD(sec, name, dnum, dstr, lo, hi, flags, help)                                                            \
    {                                                                                                                \
#sec, #name, #sec "." #name, MEMBER_TYPE(sec.name), offsetof(tri_config, sec.name), sizeof MEMBER(sec.name), \
            (dnum), (dstr), (lo), (hi), (flags), (help), NULL, NULL, 0                                               \
    }
#define NUM(sec, name, dnum, lo, hi, flags, help) FIELD(sec, name, dnum, NULL, lo, hi, flags, help)
#define STR(sec, name, dstr, flags, help)         FIELD(sec, name, 0, dstr, 0, 0, flags, help)
/* An enum member (an int-sized enum type) chosen by name. cap: the longest
 * text accepted before the names are looked at (the message for a longer one
 * says so, as for a string field). */
#define CHOICE(sec, name, dstr, choices, vals, cap, help)                                                            \
    {                                                                                                                \
#sec, #name, #sec "." #name, FT_ENUM, offsetof(tri_config, sec.name), sizeof MEMBER(sec.name), 0, (dstr), 0, \
            0, R_REQUIRED, (help), (choices), (vals), (cap)                                                          \
    }
/* A top-level key with a fixed set of values ({"device": "cuda"}). */
#define TOP_CHOICE(name, dstr, choices, vals, cap, help)                                                          \
    {                                                                                                             \
        "", #name, #name, FT_ENUM, offsetof(tri_config, name), sizeof MEMBER(name), 0, (dstr), 0, 0, R_REQUIRED, \
            (help), (choices), (vals), (cap)                                                                      \
    }

/* The enum values behind the choices' names, in the names' order. */
static const int precision_values[] = {TRI_F32, TRI_BF16, TRI_F16};
static const int device_values[] = {TRI_DEVICE_CPU, TRI_DEVICE_CPU_GUARD, TRI_DEVICE_CUDA};
static const int recompute_values[] = {TRI_RECOMPUTE_NONE, TRI_RECOMPUTE_SELECTIVE, TRI_RECOMPUTE_FULL};
static const int schedule_values[] = {TRI_SCHED_1F1B, TRI_SCHED_INTERLEAVED, TRI_SCHED_GPIPE, TRI_SCHED_ZBH1};
static const int arch_values[] = {TRI_ARCH_GPT2, TRI_ARCH_LLAMA};
static const int inject_values[] = {TRI_INJECT_NAN_GRAD, TRI_INJECT_INF_GRAD, TRI_INJECT_NAN_LOSS, TRI_INJECT_SPIKE};
static const int offload_values[] = {TRI_OFFLOAD_NONE, TRI_OFFLOAD_OPTIMIZER};
_Static_assert(sizeof(tri_dtype) == sizeof(int) && sizeof(tri_device) == sizeof(int) &&
                   sizeof(tri_arch) == sizeof(int) && sizeof(tri_recompute) == sizeof(int) &&
                   sizeof(tri_sched_kind) == sizeof(int) && sizeof(tri_inject_kind) == sizeof(int) &&
                   sizeof(tri_offload) == sizeof(int),
               "enum fields are stored as int");

#define POS  (R_LO)                    /* with lo = 1: a positive integer    */
#define GT0  (R_LO | R_LO_OPEN)        /* with lo = 0: a number > 0           */
#define UNIT (R_LO | R_HI | R_HI_OPEN) /* with [0, 1)                         */

static const field fields[] = {
    TOP_CHOICE(device, "cpu", "cpu|cpu-guard|cuda", device_values, 15,
               "compute backend, {\"device\": \"cuda\"} at the top level; --device on the command line wins "
               "(cpu-guard: a test mode that faults on host access to backend memory)"),

    NUM(model, n_layer, 4, 1, 0, POS, "transformer blocks"),
    NUM(model, n_head, 4, 1, 0, POS, "attention heads (must divide n_embd)"),
    NUM(model, n_embd, 128, 1, 0, POS, "channels C (a multiple of n_head)"),
    NUM(model, seq_len, 128, 1, 0, POS, "context length T (also position-embedding rows)"),
    NUM(model, vocab_size, 256, 2, 2147483648.0, R_LO | R_HI | R_HI_OPEN,
        "real vocabulary size V (padded to a multiple of 128 * tp)"),
    CHOICE(model, arch, "gpt2", "gpt2|llama", arch_values, 15,
           "architecture: gpt2 (LayerNorm, learned positions, GELU MLP, biases, tied head) or llama (RMSNorm, "
           "RoPE, SwiGLU MLP, grouped-query attention, no biases; the keys below)"),
    NUM(model, n_kv_head, 0, 0, 0, R_LO,
        "llama: key/value heads, dividing n_head (0: n_head, multi-head; 1: multi-query); when tp > n_kv_head "
        "each KV head is replicated over tp / n_kv_head TP ranks"),
    NUM(model, ffn_hidden, 0, 0, 0, R_LO,
        "llama: SwiGLU hidden size F, a multiple of tp (0: Llama's rule, int(2/3 * 4 n_embd) rounded up to "
        "ffn_multiple_of)"),
    NUM(model, ffn_multiple_of, 256, 1, 0, POS, "llama: what the default ffn_hidden is rounded up to"),
    NUM(model, tie_embeddings, -1, -1, 1, R_LO | R_HI,
        "true: the LM head is the token embedding; false: an LM head of its own, on the last pipeline stage "
        "only (-1: the arch's default, gpt2 true, llama false; gpt2 is always tied)"),
    NUM(model, norm_eps, 1e-5, 0, 0, GT0, "llama: RMSNorm epsilon (GPT-2's LayerNorm keeps 1e-5)"),
    NUM(model, rope_theta, 10000, 0, 0, GT0, "llama: RoPE base theta (Llama 3: 500000)"),
    NUM(model, rope_scaling_factor, 0, 0, 0, R_LO,
        "llama: Llama 3.1 RoPE frequency scaling factor (0: off; Llama 3.1: 8)"),
    NUM(model, rope_low_freq_factor, 1, 0, 0, GT0, "llama, with rope_scaling_factor: low-frequency factor"),
    NUM(model, rope_high_freq_factor, 4, 0, 0, GT0, "llama, with rope_scaling_factor: high-frequency factor"),
    NUM(model, rope_original_seq_len, 8192, 1, 0, POS,
        "llama, with rope_scaling_factor: the original context length of the scaled model"),

    NUM(train, global_batch, 16, 1, 0, POS,
        "sequences per optimizer step over all DP ranks (a multiple of micro_batch)"),
    NUM(train, micro_batch, 4, 1, 0, POS, "sequences per forward/backward on one rank"),
    NUM(train, steps, 100, 0, 0, R_LO, "optimizer steps (0: write the initial model)"),
    NUM(train, lr, 1e-3, 0, 0, GT0, "peak learning rate"),
    NUM(train, min_lr, 1e-4, 0, 0, R_LO, "final learning rate of the cosine decay (<= lr)"),
    NUM(train, warmup_steps, 10, 0, 0, R_LO, "linear warmup steps, then cosine decay"),
    NUM(train, weight_decay, 0.1, 0, 0, R_LO, "AdamW decoupled weight decay"),
    NUM(train, grad_clip, 1.0, 0, 0, R_LO, "global gradient-norm clip (0: off)"),
    NUM(train, beta1, 0.9, 0, 1, UNIT, "AdamW first-moment decay"),
    NUM(train, beta2, 0.95, 0, 1, UNIT, "AdamW second-moment decay"),
    NUM(train, eps, 1e-8, 0, 0, GT0, "AdamW epsilon"),
    NUM(train, seed, 1337, 0, 0, 0, "RNG seed, 0 .. 2^64-1 (in JSON a number up to 2^53, or a decimal string)"),
    NUM(train, eval_every, 0, 0, 0, R_LO, "steps between validation-loss evaluations (0: never)"),
    NUM(train, eval_batches, 4, 1, 0, POS, "micro-batches per evaluation"),
    CHOICE(train, recompute, "none", "none|selective|full", recompute_values, 15,
           "activation checkpointing: none (save every block buffer), selective (recompute attention's "
           "T x T state in backward), full (save each layer's input, rerun its forward in backward)"),
    CHOICE(train, precision, "fp32", "fp32|bf16|fp16", precision_values, 7,
           "compute precision of parameters and activations; bf16 and fp16 keep fp32 master weights, "
           "gradients and statistics (docs/precision.md)"),
    NUM(train, loss_scale_init, 65536, 1, 4294967296.0, R_LO | R_HI,
        "fp16 only: initial dynamic loss scale, halved on a gradient overflow (the step skipped); at most 2^32, "
        "Megatron's default (each halving from a larger one costs a skipped step)"),
    NUM(train, loss_scale_window, 1000, 1, 0, POS, "fp16 only: clean steps after which the loss scale doubles"),
    NUM(train, skip_spikes, 0, 0, 1, R_LO | R_HI,
        "true/false: a step whose loss is above spike_factor x the running mean of the losses before it is "
        "skipped like a non-finite one (docs/reliability.md)"),
    NUM(train, spike_factor, 3, 1, 1000, R_LO | R_LO_OPEN | R_HI,
        "with skip_spikes: a loss above this many times its running mean is a spike"),
    NUM(train, max_bad_steps, 10, 0, 1000000, R_LO | R_HI,
        "after this many bad (skipped) steps in a row, roll back to the last checkpoint and skip the data "
        "windows of those steps; without a checkpoint, or when the bad steps come back twice, stop with exit 1 "
        "(0: never; bad steps are skipped without limit)"),
    STR(train, skip_samples, "", 0,
        "global sample ranges never read, \"b-e,b-e\" (samples b .. e-1; a step starting inside one starts at "
        "its end): e.g. the ranges a rollback recorded in state.json"),

    STR(data, train, "", R_REQUIRED,
        "training token file(s) (required): a.bin, or a weighted blend 0.7:a.bin,0.3:b.bin"),
    STR(data, val, "", 0, "validation token file (\"\": none)"),
    STR(data, tokenizer, "", 0, "tokenizer.json (\"\": raw bytes, vocab 256)"),
    NUM(data, split, 0, 0, 1, UNIT,
        "fraction of each train file held out (its last windows) as validation when data.val is \"\""),

    NUM(parallel, tp, 1, 1, 0, POS, "tensor-parallel ranks"),
    NUM(parallel, pp, 1, 1, 0, POS, "pipeline-parallel stages"),
    NUM(parallel, dp, 1, 1, 0, POS, "data-parallel replicas"),
    NUM(parallel, cp, 1, 1, 0, POS,
        "context-parallel ranks: each micro-batch's sequence split into 2 x cp chunks, rank r of the CP group "
        "holding chunks r and 2cp-1-r (Megatron's causal load balance); attention runs as a ring over the CP "
        "group (seq_len divisible by 2 x cp; CPU backend)"),
    NUM(parallel, vpp, 1, 1, 0, POS, "virtual pipeline chunks per stage (> 1: the interleaved schedule)"),
    CHOICE(parallel, schedule, "1f1b", "1f1b|interleaved|gpipe|zb-h1", schedule_values, 15,
           "pipeline schedule: 1f1b (interleaved when vpp > 1), interleaved, gpipe (all forwards, then all "
           "backwards), zb-h1 (zero-bubble: backward split into input and weight gradients)"),
    STR(parallel, pp_layout, "", 0,
        "layers per stage (pp numbers) or per virtual chunk (pp x vpp numbers, chunk-major), e.g. \"3,4,4,3\"; "
        "\"\": even"),
    NUM(parallel, bucket_mb, 25, 1.0 / 1024, 1048576, R_LO | R_HI,
        "gradient all-reduce bucket size, MiB (1/1024 = 1 KiB, 256 floats, .. 1048576 = 1 TiB; below 1 KiB each "
        "all-reduce is pure latency, above any device's memory it is one bucket)"),
    NUM(parallel, sequence_parallel, 0, 0, 1, R_LO | R_HI,
        "sequence parallelism (true/false or 1/0): LayerNorms, residual adds and the embedding output on "
        "seq_len/tp positions per TP rank, all-gather before and reduce-scatter after the TP linears (needs "
        "tp > 1 and seq_len divisible by tp)"),
    NUM(parallel, timeout_s, 600, 0, 1e6, R_LO | R_HI,
        "seconds a rank waits for its peers in one collective or transfer before it names them and "
        "aborts the job (0: wait forever, e.g. under a debugger)"),
    NUM(parallel, zero, 0, 0, 3, R_LO | R_HI | R_BOOL,
        "ZeRO stage over DP (0: off; true/false as 1/0). 1: distributed optimizer: gradients reduce-scattered over DP, each DP "
        "rank keeps and updates 1/dp of the optimizer state, parameters all-gathered. 2: the gradients "
        "sharded too (each rank keeps its 1/dp reduced shard; the full gradient buffer lives only within a "
        "step). 3: the parameters too (gathered in units of parallel.zero_unit_layers layers: each all-gathered "
        "before its forward and its backward, released after). docs/parallelism.md"),
    NUM(parallel, zero_keep_params, 0, 0, 1, R_LO | R_HI,
        "ZeRO-3 (true/false or 1/0): keep a chunk's gathered parameters from its forward until its next "
        "backward instead of gathering them again (one all-gather per micro-batch instead of two, the full "
        "chunk held meanwhile; PyTorch FSDP's reshard_after_forward=False); needs parallel.zero = 3"),
    NUM(parallel, zero_unit_layers, 1, 0, 0, R_LO,
        "ZeRO-3: consecutive transformer layers gathered as one unit (PyTorch FSDP's wrap policy): a unit "
        "is all-gathered just before its first layer runs, the next unit's gather started meanwhile, and "
        "released after its last layer (the embedding, final norm and head: one unit at each end, gathered "
        "around their own compute; a tied embedding stays for the whole forward); so about two units are "
        "gathered at a time. 0: the whole chunk as one unit (docs/parallelism.md)"),

    STR(checkpoint, dir, "checkpoints", 0, "checkpoints go to <dir>/step_<N> (one writer at a time)"),
    NUM(checkpoint, every, 0, 0, 0, R_LO, "steps between checkpoints (0: only the final one)"),
    NUM(checkpoint, keep, 0, 0, 0, R_LO, "checkpoints to keep (0: all)"),
    CHOICE(checkpoint, dtype, "fp32", "fp32|bf16|fp16", precision_values, 7,
           "dtype of model.safetensors (fp32: every tool loads it); the optimizer file keeps fp32 master "
           "weights whenever model.safetensors is not them"),
    NUM(checkpoint, async, 1, 0, 1, R_LO | R_HI,
        "true: a save blocks the step only while the tensors are copied to host memory; a background thread "
        "writes, checksums and commits them (at most one save in flight); false: the whole save blocks"),
    NUM(checkpoint, every_s, 0, 0, 0, R_LO,
        "seconds between checkpoints, on world rank 0's clock, saved at a step every rank agrees on "
        "(0: off; not together with checkpoint.every)"),

    NUM(log, every, 1, 1, 0, POS, "steps between log lines"),
    STR(log, dir, "logs", 0, "directory of metrics.jsonl (and of the TensorBoard event files)"),
    NUM(log, peak_gflops, 300, 0, 0, GT0,
        "peak GFLOP/s of all the job's hardware together, for MFU (`trident bench` measures sgemm; "
        "300 is a 2-core AVX-512 VM's)"),
    NUM(log, plot, 0, 0, 1, R_LO | R_HI,
        "at the end of a run, world rank 0 draws the loss curves of log.dir into PNGs with scripts/plot.py "
        "(true/false; a missing python3 or matplotlib is a warning, not a failure)"),
    NUM(log, tensorboard, 0, 0, 1, R_LO | R_HI,
        "world rank 0 also writes every number of metrics.jsonl as a TensorBoard scalar (train/loss, val/loss, "
        "train/lr, perf/tokens_per_s, ...) to log.dir/events.out.tfevents.<time>.<host> (true/false; "
        "`tensorboard --logdir <log.dir>` shows them)"),

    NUM(debug, fail_step, -1, -1, 0, R_LO, "test only: at this step ... (-1: never)"),
    NUM(debug, fail_rank, -1, -1, 0, R_LO, "... this rank exits with code 3 (-1: never)"),
    NUM(debug, inject_step, 0, 0, 0, R_LO,
        "test only: the step (1-based, in a run without rollbacks) whose data window gets a fault (0: none)"),
    NUM(debug, inject_count, 1, 1, 0, POS, "... and this many windows from it"),
    NUM(debug, inject_rank, -1, -1, 0, R_LO, "... on this world rank (-1: every rank)"),
    CHOICE(debug, inject_kind, "nan-grad", "nan-grad|inf-grad|nan-loss|spike", inject_values, 15,
           "... the fault: one gradient element NaN or +inf, the loss NaN, or the loss x 1e4"),
    NUM(parallel, progress_timeout_s, 60, 0, 1e6, R_LO | R_HI,
        "progress heartbeat: a rank that completes no step, phase or communication for this many seconds "
        "while a peer waits for it is named and the job aborted (a rank whose heartbeat stops, e.g. "
        "SIGSTOP, is named after min(this, 5) s); 0: no heartbeat"),
    NUM(log, straggler_every, 50, 0, 0, R_LO,
        "steps between straggler checks: each rank's compute and communication time per step gathered on "
        "world rank 0, which names a slow rank and writes per-rank min/median/max to metrics.jsonl (0: never)"),
    NUM(log, straggler_factor, 1.5, 1, 0, R_LO | R_LO_OPEN,
        "a rank whose median compute time per step over the window exceeds this times the median of all "
        "ranks is reported as slow"),
    NUM(debug, sleep_ms, 0, 0, 0, R_LO, "test only: milliseconds slept before each step (in phase \"data\") ..."),
    NUM(debug, sleep_rank, -1, -1, 0, R_LO, "... by this world rank (-1: none)"),
    NUM(debug, fail_start_rank, -1, -1, 0, R_LO,
        "test only: this world rank exits with code 3 at every start, before step 1 (-1: never; elastic tests)"),
    CHOICE(parallel, offload, "none", "none|optimizer", offload_values, 15,
           "optimizer: the fp32 master weights and AdamW moments (this rank's ZeRO shard of them) live in host "
           "memory (pinned on CUDA) and the AdamW step runs on the CPU, gradients copied to the host and "
           "parameters back, overlapped shard by shard (ZeRO-Offload); the device then holds 8 fewer bytes per "
           "parameter of the optimizer's state in fp32, 12 in bf16/fp16. On the CPU backend only the accounting "
           "changes (docs/parallelism.md)"),
};
#define N_FIELDS (sizeof fields / sizeof fields[0])

/* A config being loaded: the values, and for each enum field whose text
 * named no choice, that text (reported at validation, so that a later
 * --set can still fix what the file said, as for every other field). */
typedef struct loading {
    tri_config cfg;
    struct {
        int is_bad;
        char text[16];
    } bad[N_FIELDS];
} loading;

/* Cross-field rules, checked after every field is in its own range. */
typedef enum rule_kind { RULE_MULTIPLE, RULE_LE } rule_kind;
static const struct rule {
    const char *a, *b; /* "section.key" */
    rule_kind kind;    /* a is a multiple of b / a <= b */
} rules[] = {
    {"model.n_embd", "model.n_head", RULE_MULTIPLE},
    {"train.global_batch", "train.micro_batch", RULE_MULTIPLE},
    {"train.min_lr", "train.lr", RULE_LE},
};

#define MAX_FILE_BYTES ((size_t)16 << 20)
#define TWO_POW_53     9007199254740992.0

/* ------------------------------------------------------------------------ */
/* Small helpers                                                            */

/* Prints "trident: <file>: <message>\n" to stderr as one write. */
static void report(const char *file, const char *fmt, ...) {
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tri_error("%s: %s", file, msg);
}

static void *member(tri_config *cfg, const field *f) { return (char *)cfg + f->offset; }
static const void *cmember(const tri_config *cfg, const field *f) { return (const char *)cfg + f->offset; }

/* The shortest of %.15g, %.16g, %.17g that reads back as exactly v.
 * (buf: at least 32 bytes) */
static const char *fmt_double(double v, char *buf, size_t n) {
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    return buf;
}

static const char *type_noun(field_type t) {
    switch (t) {
    case FT_INT: return "an integer";
    case FT_U64: return "an integer";
    case FT_DOUBLE: return "a number";
    case FT_STRING: return "a string";
    case FT_ENUM: return "a string";
    }
    return "?";
}

static const char *type_name(field_type t) {
    switch (t) {
    case FT_INT: return "int";
    case FT_U64: return "uint64";
    case FT_DOUBLE: return "double";
    case FT_STRING: return "string";
    case FT_ENUM: return "string";
    }
    return "?";
}

/* The field's range as text: "", ">= 1", "> 0", "in [0, 1)". (buf: 96 bytes) */
static const char *describe_range(const field *f, char *buf, size_t n) {
    char lo[32], hi[32];
    fmt_double(f->lo, lo, sizeof lo);
    fmt_double(f->hi, hi, sizeof hi);
    if ((f->flags & R_LO) && (f->flags & R_HI))
        snprintf(buf, n, "in %c%s, %s%c", (f->flags & R_LO_OPEN) ? '(' : '[', lo, hi,
                 (f->flags & R_HI_OPEN) ? ')' : ']');
    else if (f->flags & R_LO)
        snprintf(buf, n, "%s %s", (f->flags & R_LO_OPEN) ? ">" : ">=", lo);
    else if (f->flags & R_HI)
        snprintf(buf, n, "%s %s", (f->flags & R_HI_OPEN) ? "<" : "<=", hi);
    else if (f->choices)
        snprintf(buf, n, "one of %s", f->choices);
    else if (f->flags & R_REQUIRED)
        snprintf(buf, n, "non-empty");
    else
        buf[0] = '\0';
    return buf;
}

static int in_range(const field *f, double v) {
    if (!isfinite(v)) return 0;
    if (f->flags & R_LO) {
        if ((f->flags & R_LO_OPEN) ? !(v > f->lo) : !(v >= f->lo)) return 0;
    }
    if (f->flags & R_HI) {
        if ((f->flags & R_HI_OPEN) ? !(v < f->hi) : !(v <= f->hi)) return 0;
    }
    return 1;
}

/* "trident: <file>: <sec.key>: expected an integer >= 1, got 0" */
static void report_range(const char *file, const char *prefix, const field *f, double v) {
    char range[96], got[32];
    describe_range(f, range, sizeof range);
    report(file, "%s%s: expected %s%s%s, got %s", prefix, f->name, type_noun(f->type), range[0] ? " " : "", range,
           fmt_double(v, got, sizeof got));
}

static const field *find_field(const char *section, size_t section_len, const char *key) {
    for (size_t i = 0; i < N_FIELDS; i++)
        if (strlen(fields[i].section) == section_len && memcmp(fields[i].section, section, section_len) == 0 &&
            strcmp(fields[i].key, key) == 0)
            return &fields[i];
    return NULL;
}

/* "section.key" (or a top-level key) -> field, or NULL. */
static const field *find_dotted(const char *dotted) {
    const char *dot = strchr(dotted, '.');
    if (dot == NULL) return find_field("", 0, dotted);
    return find_field(dotted, (size_t)(dot - dotted), dot + 1);
}

static int is_section(const char *name) {
    for (size_t i = 0; i < N_FIELDS; i++)
        if (fields[i].section[0] != '\0' && strcmp(fields[i].section, name) == 0) return 1;
    return 0;
}

/* A numeric field's value as a double (exact for int; uint64 may round). */
static double get_number(const tri_config *cfg, const field *f) {
    const void *p = cmember(cfg, f);
    switch (f->type) {
    case FT_INT: return *(const int *)p;
    case FT_U64: return (double)*(const uint64_t *)p;
    case FT_DOUBLE: return *(const double *)p;
    case FT_STRING: break;
    case FT_ENUM: break;
    }
    return NAN;
}

/* The index of text among an enum field's choices, or -1. */
static int choice_index(const field *f, const char *text) {
    size_t n = strlen(text);
    int k = 0;
    for (const char *p = f->choices; *p; k++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, text, n) == 0) return k;
        if (!bar) break;
        p = bar + 1;
    }
    return -1;
}

/* The name of an enum field's value (into buf), or "?" for a value that is
 * not a choice. */
static const char *choice_name(const field *f, int value, char *buf, size_t n) {
    int k = 0;
    for (const char *p = f->choices; *p; k++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if ((f->values ? f->values[k] : k) == value) {
            snprintf(buf, n, "%.*s", (int)len, p);
            return buf;
        }
        if (!bar) break;
        p = bar + 1;
    }
    return "?";
}

/* The value as text: numbers shortest-exact, strings verbatim. (buf: 32 bytes
 * or more; strings are returned in place, not copied) */
static const char *value_text(const tri_config *cfg, const field *f, char *buf, size_t n) {
    const void *p = cmember(cfg, f);
    switch (f->type) {
    case FT_INT: snprintf(buf, n, "%d", *(const int *)p); return buf;
    case FT_U64: snprintf(buf, n, "%llu", (unsigned long long)*(const uint64_t *)p); return buf;
    case FT_DOUBLE: return fmt_double(*(const double *)p, buf, n);
    case FT_STRING: return (const char *)p;
    case FT_ENUM: return choice_name(f, *(const int *)p, buf, n);
    }
    return "?";
}

/* ------------------------------------------------------------------------ */
/* Setting one field                                                        */

/* Stores a string into a string or enum field. Returns 0, or -1 after a
 * message. `prefix` is "" for the file and "--set " for overrides. A text
 * that names no choice is kept for validation (it reports it). */
static int set_string(loading *L, const field *f, const char *s, const char *file, const char *prefix) {
    size_t len = strlen(s), cap = f->type == FT_ENUM ? f->text_cap : f->size - 1;
    if (len > cap) {
        report(file, "%s%s: longer than %zu bytes (%zu)", prefix, f->name, cap, len);
        return -1;
    }
    if (f->type == FT_STRING) {
        memcpy(member(&L->cfg, f), s, len + 1);
        return 0;
    }
    int k = choice_index(f, s);
    L->bad[f - fields].is_bad = k < 0;
    if (k < 0)
        snprintf(L->bad[f - fields].text, sizeof L->bad[0].text, "%s", s);
    else
        *(int *)member(&L->cfg, f) = f->values ? f->values[k] : k;
    return 0;
}

/* Stores a number into an int or double field, checking that it fits the C
 * type (finite; an integer within int for int fields). The field's own range
 * is checked later, at validation, so that an override can fix a file. */
static int set_number(tri_config *cfg, const field *f, double v, const char *file, const char *prefix) {
    char got[32];
    if (!isfinite(v)) {
        report(file, "%s%s: expected a finite number, got %s", prefix, f->name, fmt_double(v, got, sizeof got));
        return -1;
    }
    if (f->type == FT_DOUBLE) {
        *(double *)member(cfg, f) = v;
        return 0;
    }
    /* FT_INT */
    if (v != floor(v)) {
        report(file, "%s%s: expected an integer, got %s", prefix, f->name, fmt_double(v, got, sizeof got));
        return -1;
    }
    if (!(v >= (double)INT_MIN && v <= (double)INT_MAX)) {
        if (!in_range(f, v)) {
            report_range(file, prefix, f, v);
        } else {
            report(file, "%s%s: expected an integer in [%d, %d], got %s", prefix, f->name, INT_MIN, INT_MAX,
                   fmt_double(v, got, sizeof got));
        }
        return -1;
    }
    *(int *)member(cfg, f) = (int)v;
    return 0;
}

/* Parses a decimal uint64 (digits only, full consumption, <= 2^64-1). */
static int parse_u64(const char *s, uint64_t *out) {
    if (s[0] < '0' || s[0] > '9') return -1;
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0') return -1;
    *out = (uint64_t)v;
    return 0;
}

/* An int field with the range [0, 1] is a switch: it also takes true/false. */
static int is_flag(const field *f) {
    if (f->type == FT_INT && (f->flags & R_BOOL)) return 1;
    /* (or [-1, 1]: a switch whose -1 means "the default", model.tie_embeddings) */
    return f->type == FT_INT && (f->flags & (R_LO | R_HI | R_LO_OPEN | R_HI_OPEN)) == (R_LO | R_HI) &&
           (f->lo == 0 || f->lo == -1) && f->hi == 1;
}

/* One JSON value into one field. */
static int set_from_json(loading *L, const field *f, const cJSON *item, const char *file) {
    tri_config *cfg = &L->cfg;
    switch (f->type) {
    case FT_STRING:
    case FT_ENUM:
        if (!cJSON_IsString(item)) {
            report(file, "%s: expected a string, got %s", f->name, tri_json_kind(item));
            return -1;
        }
        return set_string(L, f, item->valuestring, file, "");
    case FT_INT:
    case FT_DOUBLE:
        if (cJSON_IsBool(item) && is_flag(f)) return set_number(cfg, f, cJSON_IsTrue(item) ? 1 : 0, file, "");
        if (!cJSON_IsNumber(item)) {
            report(file, "%s: expected %s, got %s", f->name, type_noun(f->type), tri_json_kind(item));
            return -1;
        }
        return set_number(cfg, f, item->valuedouble, file, "");
    case FT_U64: {
        uint64_t u;
        if (cJSON_IsString(item)) {
            if (parse_u64(item->valuestring, &u) != 0) {
                report(file, "%s: expected a decimal integer in [0, 2^64-1], got \"%s\"", f->name, item->valuestring);
                return -1;
            }
        } else if (cJSON_IsNumber(item)) {
            /* cJSON reads numbers as doubles: above 2^53 the digits written may
             * already be lost, so such seeds must come as strings. */
            double v = item->valuedouble;
            char got[32];
            if (!(v >= 0 && v <= TWO_POW_53 && v == floor(v))) {
                report(file,
                       "%s: expected an integer in [0, 2^53] (or a decimal string up to "
                       "2^64-1), got %s",
                       f->name, fmt_double(v, got, sizeof got));
                return -1;
            }
            u = (uint64_t)v;
        } else {
            report(file, "%s: expected an integer or a decimal string, got %s", f->name, tri_json_kind(item));
            return -1;
        }
        *(uint64_t *)member(cfg, f) = u;
        return 0;
    }
    }
    return -1;
}

/* One "--set section.key=value" into the config; value parsed by the type. */
static int apply_override(loading *L, const char *ov, const char *file) {
    tri_config *cfg = &L->cfg;
    const char *eq = strchr(ov, '=');
    if (eq == NULL) {
        report(file, "--set %s: expected section.key=value", ov);
        return -1;
    }
    char key[256];
    size_t klen = (size_t)(eq - ov);
    if (klen >= sizeof key) {
        report(file, "--set %.64s...: unknown key", ov);
        return -1;
    }
    memcpy(key, ov, klen);
    key[klen] = '\0';
    const field *f = find_dotted(key);
    if (f == NULL) {
        report(file, "--set %s: unknown key", key);
        return -1;
    }
    const char *val = eq + 1;
    if (f->type == FT_STRING || f->type == FT_ENUM) return set_string(L, f, val, file, "--set ");

    if (f->type == FT_U64) {
        uint64_t u;
        if (parse_u64(val, &u) != 0) {
            report(file, "--set %s: expected a decimal integer in [0, 2^64-1], got '%s'", key, val);
            return -1;
        }
        *(uint64_t *)member(cfg, f) = u;
        return 0;
    }
    if (is_flag(f) && (strcmp(val, "true") == 0 || strcmp(val, "false") == 0))
        return set_number(cfg, f, val[0] == 't' ? 1 : 0, file, "--set ");
    /* int or double: no leading blanks (strto* would skip them), full consumption */
    char *end = NULL;
    double v = 0;
    int ok = 0;
    if (val[0] != '\0' && val[0] != ' ' && val[0] != '\t' && val[0] != '\n') {
        if (f->type == FT_INT) {
            errno = 0;
            long long ll = strtoll(val, &end, 10);
            if (end != val && *end == '\0' && errno == 0) {
                v = (double)ll; /* exact up to 2^53; beyond that set_number rejects */
                ok = 1;
            }
        }
        if (!ok) {
            errno = 0;
            v = strtod(val, &end);
            ok = end != val && *end == '\0';
        }
    }
    if (!ok) {
        report(file, "--set %s: expected %s, got '%s'", key, type_noun(f->type), val);
        return -1;
    }
    return set_number(cfg, f, v, file, "--set ");
}

/* ------------------------------------------------------------------------ */
/* JSON in                                                                  */

/* 1-based line and column of byte `off` in text. */
static void line_col(const char *text, size_t off, size_t *line, size_t *col) {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < off && text[i] != '\0'; i++) {
        if (text[i] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

/* Is there a sibling before `item` (under `parent`) with the same name? */
static int duplicate_before(const cJSON *parent, const cJSON *item) {
    for (const cJSON *p = parent->child; p != NULL && p != item; p = p->next)
        if (p->string != NULL && strcmp(p->string, item->string) == 0) return 1;
    return 0;
}

/* Parses `text` (NUL-terminated) and applies it over *cfg. */
static int apply_json(loading *L, const char *text, const char *file) {
    const char *start = text;
    if ((unsigned char)start[0] == 0xEF && (unsigned char)start[1] == 0xBB && (unsigned char)start[2] == 0xBF)
        start += 3; /* UTF-8 byte-order mark */
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(start, &end, 1);
    if (root == NULL) {
        size_t off = end != NULL ? (size_t)(end - text) : 0;
        size_t line, col;
        line_col(text, off, &line, &col);
        report(file, "JSON syntax error at line %zu, column %zu (byte %zu)", line, col, off);
        return -1;
    }
    int rc = 0;
    if (!cJSON_IsObject(root)) {
        report(file, "expected a JSON object at the top level, got %s", tri_json_kind(root));
        rc = -1;
    }
    for (const cJSON *sec = rc == 0 ? root->child : NULL; sec != NULL && rc == 0; sec = sec->next) {
        const field *top = find_field("", 0, sec->string);
        if (top != NULL) { /* a top-level key ("device") */
            if (duplicate_before(root, sec)) {
                report(file, "%s: key given twice", sec->string);
                rc = -1;
            } else {
                rc = set_from_json(L, top, sec, file);
            }
        } else if (!is_section(sec->string)) {
            report(file,
                   "%s: unknown section (expected model, train, data, parallel, "
                   "checkpoint, log or debug, or the key device)",
                   sec->string);
            rc = -1;
        } else if (duplicate_before(root, sec)) {
            report(file, "%s: section given twice", sec->string);
            rc = -1;
        } else if (!cJSON_IsObject(sec)) {
            report(file, "%s: expected an object, got %s", sec->string, tri_json_kind(sec));
            rc = -1;
        }
        for (const cJSON *kv = rc == 0 ? sec->child : NULL; kv != NULL && rc == 0; kv = kv->next) {
            const field *f = find_field(sec->string, strlen(sec->string), kv->string);
            if (f == NULL) {
                report(file, "%s.%s: unknown key", sec->string, kv->string);
                rc = -1;
            } else if (duplicate_before(sec, kv)) {
                report(file, "%s.%s: key given twice", sec->string, kv->string);
                rc = -1;
            } else {
                rc = set_from_json(L, f, kv, file);
            }
        }
    }
    cJSON_Delete(root);
    return rc;
}

/* Reads a whole file (malloc'd, NUL-terminated) or prints why not. A named
 * pipe, a directory or a device is refused at once (src/base/file.h). */
static char *read_file(const char *path) {
    size_t len = 0;
    char *buf = tri_slurp(path, "config", MAX_FILE_BYTES, &len);
    if (buf == NULL) return NULL;
    const char *nul = memchr(buf, '\0', len);
    if (nul != NULL) {
        report(path, "JSON syntax error: NUL byte at byte %zu", (size_t)(nul - buf));
        free(buf);
        return NULL;
    }
    return buf;
}

/* ------------------------------------------------------------------------ */
/* Validation                                                               */

static int validate(const loading *L, const char *file) {
    const tri_config *cfg = &L->cfg;
    for (size_t i = 0; i < N_FIELDS; i++) {
        const field *f = &fields[i];
        if (f->type == FT_STRING) {
            if ((f->flags & R_REQUIRED) && ((const char *)cmember(cfg, f))[0] == '\0') {
                report(file, "%s: required, got an empty string", f->name);
                return -1;
            }
            continue;
        }
        if (f->type == FT_ENUM) {
            if (!L->bad[i].is_bad) continue;
            if (L->bad[i].text[0] == '\0')
                report(file, "%s: required, got an empty string", f->name);
            else
                report(file, "%s: \"%s\" is not one of %s", f->name, L->bad[i].text, f->choices);
            return -1;
        }
        if (f->type == FT_U64) continue; /* every uint64 is valid */
        double v = get_number(cfg, f);
        if (!in_range(f, v)) {
            report_range(file, "", f, v);
            return -1;
        }
    }
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        const field *a = find_dotted(rules[i].a), *b = find_dotted(rules[i].b);
        if (a == NULL || b == NULL) { /* a typo in the rule table */
            report(file, "internal error: config rule %s/%s names no field", rules[i].a, rules[i].b);
            return -1;
        }
        double va = get_number(cfg, a), vb = get_number(cfg, b);
        char ta[32], tb[32];
        fmt_double(va, ta, sizeof ta);
        fmt_double(vb, tb, sizeof tb);
        if (rules[i].kind == RULE_MULTIPLE && fmod(va, vb) != 0) {
            report(file, "%s: %s is not a multiple of %s = %s", rules[i].a, ta, rules[i].b, tb);
            return -1;
        }
        if (rules[i].kind == RULE_LE && !(va <= vb)) {
            report(file, "%s: %s is above %s = %s", rules[i].a, ta, rules[i].b, tb);
            return -1;
        }
    }
    /* the rules across keys (src/config/check.c) */
    if (tri_config_check_keys(cfg, file) != 0) return -1;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Public functions                                                         */

void tri_config_defaults(tri_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < N_FIELDS; i++) {
        const field *f = &fields[i];
        void *p = member(cfg, f);
        switch (f->type) {
        case FT_INT: *(int *)p = (int)f->def; break;
        case FT_U64: *(uint64_t *)p = (uint64_t)f->def; break;
        case FT_DOUBLE: *(double *)p = f->def; break;
        case FT_STRING: snprintf((char *)p, f->size, "%s", f->def_str); break;
        case FT_ENUM: {
            int k = choice_index(f, f->def_str);
            TRI_CHECK(k >= 0); /* the table's default is one of its choices */
            *(int *)p = f->values ? f->values[k] : k;
            break;
        }
        }
    }
}

/* The shared tail of both loaders: JSON text (may be NULL: none), then the
 * overrides, then validation, on a local copy. */
static int load(tri_config *cfg, const char *text, const char *name, int n_overrides, const char *const *overrides) {
    loading *L = calloc(1, sizeof *L); /* ~7 KiB; off the stack */
    if (L == NULL) {
        report(name, "out of memory");
        return -1;
    }
    tri_config *tmp = &L->cfg;
    tri_config_defaults(tmp);
    snprintf(tmp->source, sizeof tmp->source, "%s", name);
    int rc = 0;
    if (text != NULL) rc = apply_json(L, text, name);
    if (rc == 0 && n_overrides > 0 && overrides == NULL) {
        report(name, "--set: %d overrides but no array", n_overrides);
        rc = -1;
    }
    for (int i = 0; rc == 0 && i < n_overrides; i++) {
        if (overrides[i] == NULL) {
            report(name, "--set: override %d is NULL", i);
            rc = -1;
        } else {
            rc = apply_override(L, overrides[i], name);
        }
    }
    if (rc == 0) rc = validate(L, name);
    if (rc == 0) *cfg = *tmp;
    free(L);
    return rc;
}

/* path == NULL: no file, defaults and overrides only (messages say "(no file)"). */
int tri_config_load(tri_config *cfg, const char *path, int n_overrides, const char *const *overrides) {
    if (path == NULL) return load(cfg, NULL, "(no file)", n_overrides, overrides);
    char *text = read_file(path);
    if (text == NULL) return -1;
    int rc = load(cfg, text, path, n_overrides, overrides);
    free(text);
    return rc;
}

int tri_config_load_string(tri_config *cfg, const char *json, const char *name) {
    if (name == NULL) name = "(string)";
    if (json == NULL) {
        report(name, "no JSON text");
        return -1;
    }
    return load(cfg, json, name, 0, NULL);
}

/* Numbers go in as raw text so that doubles keep every bit (cJSON's own
 * printer checks its 15-digit form only approximately); the seed goes in as a
 * decimal string because cJSON would read a number above 2^53 through a
 * double. Returns NULL on allocation failure. */
char *tri_config_to_json(const tri_config *cfg) {
    cJSON *root = cJSON_CreateObject();
    if (root == NULL) return NULL;
    cJSON *sec = NULL;
    const char *sec_name = NULL;
    for (size_t i = 0; i < N_FIELDS; i++) {
        const field *f = &fields[i];
        if (f->section[0] == '\0') {
            sec = root; /* a top-level key */
            sec_name = NULL;
        } else if (sec_name == NULL || strcmp(sec_name, f->section) != 0) {
            sec_name = f->section;
            sec = cJSON_GetObjectItemCaseSensitive(root, sec_name);
            if (sec == NULL) sec = cJSON_AddObjectToObject(root, sec_name);
            if (sec == NULL) goto fail;
        }
        char buf[32];
        const char *text = value_text(cfg, f, buf, sizeof buf);
        cJSON *item = NULL;
        if (f->type == FT_STRING || f->type == FT_ENUM || f->type == FT_U64) {
            item = cJSON_CreateString(text);
        } else if (f->type == FT_DOUBLE && !isfinite(*(const double *)cmember(cfg, f))) {
            item = cJSON_CreateNull(); /* JSON has no inf/nan; loading it fails loudly */
        } else {
            item = cJSON_CreateRaw(text);
        }
        if (item == NULL) goto fail;
        cJSON_AddItemToObject(sec, f->key, item);
    }
    char *printed = cJSON_Print(root);
    cJSON_Delete(root);
    if (printed == NULL) return NULL;
    /* hand back plain malloc memory whatever cJSON's hooks are */
    size_t n = strlen(printed) + 1;
    char *out = malloc(n);
    if (out != NULL) memcpy(out, printed, n);
    cJSON_free(printed);
    return out;
fail:
    cJSON_Delete(root);
    return NULL;
}

void tri_config_print(const tri_config *cfg, FILE *f) {
    for (size_t i = 0; i < N_FIELDS; i++) {
        char buf[32];
        const field *fd = &fields[i];
        const char *v = value_text(cfg, fd, buf, sizeof buf);
        if (fd->type == FT_STRING || fd->type == FT_ENUM)
            fprintf(f, "%s = \"%s\"\n", fd->name, v);
        else
            fprintf(f, "%s = %s\n", fd->name, v);
    }
}

void tri_config_help(FILE *f) {
    fprintf(f, "Configuration keys: set them in the JSON file as {\"section\": {\"key\": value}}\n"
               "(device at the top level: {\"device\": \"cuda\"}) or on the command line with\n"
               "--set section.key=value (--set device=cuda; later wins).\n\n");
    fprintf(f, "  %-28s %-7s %-14s %-20s %s\n", "key", "type", "default", "range", "meaning");
    for (size_t i = 0; i < N_FIELDS; i++) {
        const field *fd = &fields[i];
        char name[64], def[64], range[96];
        snprintf(name, sizeof name, "%s", fd->name);
        if (fd->type == FT_STRING || fd->type == FT_ENUM)
            snprintf(def, sizeof def, "\"%s\"", fd->def_str);
        else
            fmt_double(fd->def, def, sizeof def);
        describe_range(fd, range, sizeof range);
        fprintf(f, "  %-28s %-7s %-14s %-20s %s\n", name, type_name(fd->type), def, range[0] ? range : "any", fd->help);
    }
    fprintf(f, "\nAlso checked: n_embd %% n_head == 0, global_batch %% micro_batch == 0, "
               "min_lr <= lr, sequence_parallel only with tp > 1 and seq_len %% tp == 0,\n"
               "tp x cp x pp x dp <= 1048576 (2^20) ranks, vpp <= 16, pp x vpp <= n_layer (a layer per chunk),\n"
               "seq_len %% (2 x cp) == 0 (and (seq_len / cp) %% tp == 0 with sequence_parallel),\n"
               "global_batch / (micro_batch x dp) <= 65536 micro-batches per step, pp x vpp x those <= 2^22.\n"
               "llama: n_head %% n_kv_head == 0, an even head size n_embd / n_head (RoPE), n_kv_head and tp\n"
               "one dividing the other (tp > n_kv_head replicates each KV head over tp / n_kv_head ranks),\n"
               "ffn_hidden %% tp == 0, rope_high_freq_factor > rope_low_freq_factor with scaling; the llama\n"
               "keys are refused on a gpt2 unless left at their defaults.\n");
}

int tri_config_has_key(const char *dotted) { return dotted != NULL && find_dotted(dotted) != NULL; }
