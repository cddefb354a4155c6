/* Preflight checks before step 1; see src/train/preflight.h. */
#include "train/preflight.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "data/tok/tokenizer.h"
#include "model/gpt.h"
#include "model/runtime.h"
#include "base/fs.h"
#include "base/err.h"
#include "base/file.h"
#include "base/log.h"
#include "base/size.h"
#include "plan/plan.h"
#include "plan/stage_plan.h"

/* ------------------------------------------------------------------------ */
/* checked arithmetic that remembers what overflowed first                   */

typedef struct checked {
    int ok;
    const char *what; /* the first product that overflowed, in config keys */
} checked;

static size_t cmul(checked *c, size_t a, size_t b, const char *what) {
    size_t r;
    if (tri_size_mul(&r, a, b)) return r;
    if (c->ok) c->what = what;
    c->ok = 0;
    return SIZE_MAX;
}

static size_t cadd(checked *c, size_t a, size_t b, const char *what) {
    size_t r;
    if (tri_size_add(&r, a, b)) return r;
    if (c->ok) c->what = what;
    c->ok = 0;
    return SIZE_MAX;
}

static int overflow_error(const tri_model_cfg *m, size_t micro_batch, const checked *c) {
    return tri_error("the model's sizes do not fit in 64 bits: %s overflows (model.n_layer %d, model.n_embd %d, "
                     "model.n_head %d, model.seq_len %d, model.vocab_size %d, train.micro_batch %zu); make them "
                     "smaller",
                     c->what, m->n_layer, m->n_embd, m->n_head, m->seq_len, m->vocab_size, micro_batch);
}

/* ------------------------------------------------------------------------ */
/* sizes                                                                     */

/* Floats of the whole model's flat buffer at tp = pp = 1, an upper bound of
 * any rank's tri_gpt_describe n_floats (padded vocabulary, every tensor
 * rounded up to 16 floats), checked so that describe itself cannot wrap. */
static size_t global_floats_bound(checked *c, const tri_model_cfg *m) {
    size_t C = (size_t)m->n_embd, L = (size_t)m->n_layer, T = (size_t)m->seq_len;
    size_t Vp = tri_padded_vocab(m->vocab_size, 1);
    size_t CC = cmul(c, C, C, "model.n_embd^2");
    size_t block =
        cadd(c, cmul(c, 12, CC, "12 x model.n_embd^2 (one block's weights)"),
             cadd(c, cmul(c, 13, C, "13 x model.n_embd"), 12 * 16, "one block's parameters"), "one block's parameters");
    size_t n = cmul(c, L, block, "model.n_layer x 12 x model.n_embd^2 (the blocks' parameters)");
    n = cadd(c, n, cmul(c, Vp, C, "model.vocab_size x model.n_embd (the token embedding)"), "the parameter count");
    n = cadd(c, n, cmul(c, T, C, "model.seq_len x model.n_embd (the position embedding)"), "the parameter count");
    return cadd(c, n, 2 * C + 4 * 16, "the parameter count");
}

/* Saved activations and workspace on the rank g describes, in bytes, from
 * the stage runtime's own layout (model/runtime.h): exactly what
 * tri_slot_pool_init (slots[k] slots for chunk k: the stage plan's peak of
 * micro-batches in flight, src/plan/stage_plan.h) and tri_workspace_init will
 * allocate under `policy` for micro-batches of B sequences. The products that
 * user keys decide are checked first, so that an overflow names the keys. */
static size_t preflight_activation_bytes(checked *c, const tri_gpt *g, const int *slots, int split, size_t B, size_t T,
                                         tri_recompute policy) {
    size_t BT = cmul(c, B, T, "train.micro_batch x model.seq_len");
    cmul(c, BT, g->C, "train.micro_batch x model.seq_len x model.n_embd");
    cmul(c, BT, g->Fl, "train.micro_batch x model.seq_len x 4 model.n_embd / parallel.tp");
    cmul(c, BT, g->Vl, "train.micro_batch x model.seq_len x model.vocab_size (logits)");
    /* attention keeps one log-sum-exp per (batch, head, query) row; its
     * scratch on the CPU is a few tiles and T floats per thread */
    cmul(c, BT, (size_t)g->NHl, "train.micro_batch x model.seq_len x model.n_head / parallel.tp (attention's state)");
    cmul(c, T, 1024, "model.seq_len x threads (the attention workspace)");
    if (!c->ok) return SIZE_MAX;
    size_t total = tri_workspace_bytes(g, B, T, policy);
    if (total == 0) {
        c->ok = 0;
        c->what = "the workspace";
        return SIZE_MAX;
    }
    for (int k = 0; k < g->n_chunks; k++) {
        size_t slot = tri_slot_bytes(g, k, B, T, policy, split, NULL);
        if (slot == 0) {
            c->ok = 0;
            c->what = "the saved activations";
            return SIZE_MAX;
        }
        total = cadd(c, total, cmul(c, slot, (size_t)slots[k], "the saved activations x the pipeline's slots"),
                     "the activations");
    }
    return total;
}

size_t tri_preflight_rank_bytes(size_t n_floats, size_t act_bytes, size_t other_bytes, int training,
                                tri_mem_estimate *e) {
    checked c = {1, NULL};
    memset(e, 0, sizeof *e);
    e->params = cmul(&c, n_floats, sizeof(float), "the parameters");
    e->grads = e->params;
    e->optim = training ? cmul(&c, n_floats, 2 * sizeof(float), "the optimizer state") : 0;
    e->acts = act_bytes;
    e->other = other_bytes;
    size_t t = cadd(&c, e->params, e->grads, "the total");
    t = cadd(&c, t, e->optim, "the total");
    t = cadd(&c, t, e->acts, "the total");
    e->total = cadd(&c, t, e->other, "the total");
    return e->total;
}

size_t tri_preflight_checkpoint_bytes(const tri_model_cfg *m) {
    checked c = {1, NULL};
    size_t C = (size_t)m->n_embd, L = (size_t)m->n_layer;
    size_t block = cadd(&c, cmul(&c, 12, cmul(&c, C, C, ""), ""), cmul(&c, 13, C, ""), "");
    size_t n = cmul(&c, L, block, "");
    n = cadd(&c, n, cmul(&c, (size_t)m->vocab_size, C, ""), "");
    n = cadd(&c, n, cmul(&c, (size_t)m->seq_len, C, ""), "");
    n = cadd(&c, n, 2 * C, ""); /* tri_gpt_num_params, checked */
    size_t tensors = cadd(&c, cmul(&c, 12, L, ""), 4, "");
    /* 4 bytes a parameter in model.safetensors, 8 in optimizer.safetensors;
     * each tensor's header entry (~160 bytes) once there and twice here;
     * config.json and state.json */
    size_t bytes = cmul(&c, n, 12, "");
    bytes = cadd(&c, bytes, cmul(&c, tensors, 3 * 160, ""), "");
    bytes = cadd(&c, bytes, (size_t)64 << 10, "");
    return c.ok ? bytes : SIZE_MAX;
}

/* Context parallelism: a CP rank's saved activations and workspace are
 * those of one rank at seq_len / cp (every tensor of a layer has a row per
 * local position; the attention state one float per local query row), plus
 * the ring's blocks and sums (model/acts.h: two key/value blocks in the
 * activation dtype, three fp32 key/value gradients, the fp32 output and qkv
 * gradient). Replaces pm's saved_act_alloc and workspace. */
static int cp_activations(const tri_config *cfg, int pp_rank, tri_plan_mem *pm) {
    tri_config lc = *cfg;
    lc.parallel.cp = 1;
    lc.model.seq_len = cfg->model.seq_len / cfg->parallel.cp;
    tri_plan_mem lm;
    if (tri_plan_stage_mem(NULL, &lc, NULL, pp_rank, &lm) != 0) return -1;
    tri_gpt g;
    tri_gpt_sizes(&g, &cfg->model, cfg->parallel.tp, 0);
    const size_t BT = (size_t)cfg->train.micro_batch * (size_t)lc.model.seq_len;
    const size_t A = tri_dtype_size(cfg->train.precision), KVW = 2 * (size_t)g.NKVl * (size_t)g.HS;
    pm->saved_act_alloc = lm.saved_act_alloc;
    pm->workspace = lm.workspace + BT * (2 * A * KVW + 4 * (3 * KVW + g.Cl + g.QKVl));
    return 0;
}

/* This rank's estimate when training, from the planner's memory of its
 * pipeline stage (tri_plan_stage_mem: what the allocator counts, in
 * train.precision's dtypes, under parallel.zero, with the mailbox) for
 * micro-batches of micro_batch sequences and the config's micro-batches per
 * step. Replaces e's params, grads, optim and acts; keeps other. */
static int planned_bytes(const tri_config *cfg, size_t micro_batch, int pp_rank, size_t other, tri_mem_estimate *e) {
    tri_config c = *cfg;
    const tri_parallel_cfg *par = &cfg->parallel;
    if ((size_t)cfg->train.micro_batch != micro_batch) {
        int per = cfg->train.micro_batch * par->dp;
        int mb = per > 0 && cfg->train.global_batch % per == 0 ? cfg->train.global_batch / per : 1;
        c.train.micro_batch = (int)micro_batch;
        c.train.global_batch = mb * (int)micro_batch * par->dp;
    }
    tri_plan_mem pm;
    int rc = tri_plan_stage_mem(NULL, &c, NULL, pp_rank, &pm);
    if (rc != 0) return -1;
    if (par->cp > 1 && cp_activations(&c, pp_rank, &pm) != 0) return -1;
    checked k = {1, NULL};
    e->params = pm.params;
    e->grads = pm.grads;
    e->optim = pm.optim;
    e->host = pm.host;
    e->acts = pm.saved_act_alloc + pm.workspace;
    size_t t = cadd(&k, cadd(&k, pm.params, pm.grads, "the total"), pm.optim, "the total");
    t = cadd(&k, t, pm.host, "the total");
    t = cadd(&k, t, e->acts, "the total");
    e->total = cadd(&k, t, other, "the total");
    if (!k.ok) return overflow_error(&cfg->model, micro_batch, &k);
    return 0;
}

/* Ranks of this job on this machine (they share its memory). */
static int local_ranks(void) {
    const char *v = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int n = v ? atoi(v) : 1;
    return n > 0 ? n : 1;
}

int tri_preflight_model(const tri_config *cfg, size_t micro_batch, int tp_rank, int pp_rank, size_t extra_bytes,
                        int training, int check_memory, tri_mem_estimate *out) {
    const tri_model_cfg *m = &cfg->model;
    const tri_parallel_cfg *par = &cfg->parallel;
    checked c = {1, NULL};
    global_floats_bound(&c, m);
    /* the parameter table (tri_param per tensor, grown by doubling) and the
     * per-layer weight views, both held whatever the memory of the tensors */
    size_t tensors = cadd(&c, cmul(&c, 12, (size_t)m->n_layer, "model.n_layer"), 4, "model.n_layer");
    size_t table = cmul(&c, tensors, 2 * sizeof(tri_param) + sizeof(int), "model.n_layer (the parameter table)");
    table = cadd(&c, table, cmul(&c, (size_t)m->n_layer + 1, 2 * sizeof(tri_layer_w), "model.n_layer"),
                 "the parameter table");
    /* the batch buffers of the trainer (inputs, targets) */
    size_t batch = cmul(&c, cmul(&c, micro_batch, (size_t)m->seq_len, "train.micro_batch x model.seq_len"),
                        2 * sizeof(int32_t), "the batch buffers");
    if (!c.ok) return overflow_error(m, micro_batch, &c);

    tri_mem_avail avail = {SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX, 0};
    int ranks = local_ranks();
    if (check_memory) {
        /* the table is allocated by tri_gpt_describe below: refuse before
         * that when it alone does not fit (model.n_layer in the millions) */
        tri_preflight_available(&avail);
        size_t need;
        if (avail.available != SIZE_MAX && (!tri_size_mul(&need, table, (size_t)ranks) || need > avail.available)) {
            tri_mem_estimate e = {0};
            e.other = table;
            e.total = table;
            return tri_preflight_check_memory(&e, ranks, &avail);
        }
    }
    /* this rank's chunks, described without memory, and the saved slots of
     * each: training keeps the schedule's peak of micro-batches in flight
     * (the stage plan), evaluation one */
    tri_gpt g;
    tri_stage_plan sp;
    int drc;
    if (training) {
        drc = tri_stage_plan_init(&sp, cfg, pp_rank);
    } else {
        memset(&sp, 0, sizeof sp);
        drc = par->vpp > TRI_MAX_VPP
                  ? tri_error("parallel.vpp = %d: at most %d virtual chunks per stage", par->vpp, TRI_MAX_VPP)
                  : 0;
        sp.n_chunks = par->vpp;
        sp.layers = drc == 0 ? malloc(((size_t)m->n_layer + 1) * sizeof *sp.layers) : NULL;
        if (drc == 0 && !sp.layers) drc = tri_error("out of memory (layer list of %d layers)", m->n_layer);
        if (drc == 0) drc = tri_chunks_layout(m, par->pp, pp_rank, par->vpp, par->pp_layout, sp.specs, sp.layers);
        for (int k = 0; k < sp.n_chunks && k < TRI_MAX_VPP; k++) sp.slots[k] = 1;
    }
    if (drc == 0) drc = tri_gpt_describe(&g, m, par->tp, tp_rank, sp.specs, sp.n_chunks);
    if (drc == 0) drc = tri_gpt_set_sequence_parallel(&g, par->sequence_parallel);
    if (drc != 0) {
        tri_stage_plan_free(&sp);
        return -1;
    }
    /* a CP rank holds seq_len / cp positions of each sequence */
    size_t acts = preflight_activation_bytes(&c, &g, sp.slots, sp.split, micro_batch,
                                             (size_t)m->seq_len / (size_t)par->cp, cfg->train.recompute);
    tri_stage_plan_free(&sp);
    size_t n_floats = tri_gpt_local_elems(&g);
    tri_gpt_free(&g);
    if (!c.ok) return overflow_error(m, micro_batch, &c);
    size_t other = cadd(&c, cadd(&c, table, batch, "the total"), extra_bytes, "the total");
    tri_mem_estimate e;
    if (tri_preflight_rank_bytes(n_floats, acts, other, training, &e) == SIZE_MAX || !c.ok) {
        c.what = c.ok ? "this rank's total memory" : c.what;
        return overflow_error(m, micro_batch, &c);
    }
    /* training: the planner's figures of this stage, which know the dtypes
     * of train.precision, ZeRO's shard and padding and the pipeline's
     * mailbox (at most 18 bytes a parameter plus padding: checked first) */
    if (training) cmul(&c, n_floats, 32, "32 bytes per parameter (the training state)");
    if (!c.ok) return overflow_error(m, micro_batch, &c);
    if (training && planned_bytes(cfg, micro_batch, pp_rank, other, &e) != 0) return -1;
    if (out) *out = e;
    if (!check_memory) return 0;
    return tri_preflight_check_memory(&e, ranks, &avail);
}

/* ------------------------------------------------------------------------ */
/* available memory                                                          */

int tri_preflight_parse_meminfo(const char *text, size_t *bytes) {
    const char *p = strstr(text, "MemAvailable:");
    if (!p || (p != text && p[-1] != '\n')) return -1;
    char *end;
    errno = 0;
    unsigned long long kb = strtoull(p + 13, &end, 10);
    if (end == p + 13 || errno) return -1;
    while (*end == ' ' || *end == '\t') end++;
    if (strncmp(end, "kB", 2) != 0) return -1;
    return tri_size_mul(bytes, (size_t)kb, 1024) ? 0 : -1;
}

int tri_preflight_parse_cgroup(const char *text, size_t *bytes) {
    while (*text == ' ' || *text == '\t') text++;
    if (strncmp(text, "max", 3) == 0 && (text[3] == '\0' || text[3] == '\n')) {
        *bytes = SIZE_MAX;
        return 0;
    }
    if (*text < '0' || *text > '9') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || (*end != '\0' && *end != '\n')) return -1;
    *bytes = (size_t)v;
    return 0;
}

/* A small kernel file (procfs, cgroupfs) into buf; -1 if absent. Silent. */
static int read_small(const char *path, char *buf, size_t n) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return -1;
    size_t got = 0;
    ssize_t r;
    while (got + 1 < n && (r = read(fd, buf + got, n - 1 - got)) > 0) got += (size_t)r;
    close(fd);
    buf[got] = '\0';
    return got > 0 ? 0 : -1;
}

/* The limit and usage of this process's cgroup: v2 (the path in
 * /proc/self/cgroup under /sys/fs/cgroup, else its root, as in a container),
 * then v1. 0 if one was found. */
static int cgroup_figures(size_t *limit, size_t *usage) {
    char self[4096], dir[4400], path[4500], buf[64];
    const char *dirs[3] = {NULL, "/sys/fs/cgroup", NULL};
    if (read_small("/proc/self/cgroup", self, sizeof self) == 0) {
        char *v2 = strstr(self, "0::");
        if (v2 && (v2 == self || v2[-1] == '\n')) {
            char *nl = strchr(v2, '\n');
            if (nl) *nl = '\0';
            snprintf(dir, sizeof dir, "/sys/fs/cgroup%s", v2 + 3);
            dirs[0] = dir;
        }
    }
    for (int i = 0; i < 2; i++) {
        if (!dirs[i]) continue;
        snprintf(path, sizeof path, "%s/memory.max", dirs[i]);
        if (read_small(path, buf, sizeof buf) != 0 || tri_preflight_parse_cgroup(buf, limit) != 0) continue;
        snprintf(path, sizeof path, "%s/memory.current", dirs[i]);
        if (read_small(path, buf, sizeof buf) != 0 || tri_preflight_parse_cgroup(buf, usage) != 0) *usage = 0;
        return 0;
    }
    if (read_small("/sys/fs/cgroup/memory/memory.limit_in_bytes", buf, sizeof buf) == 0 &&
        tri_preflight_parse_cgroup(buf, limit) == 0) {
        if (read_small("/sys/fs/cgroup/memory/memory.usage_in_bytes", buf, sizeof buf) != 0 ||
            tri_preflight_parse_cgroup(buf, usage) != 0)
            *usage = 0;
        /* v1 says "no limit" with a huge page-rounded number */
        if (*limit >= ((size_t)1 << 62)) *limit = SIZE_MAX;
        return 0;
    }
    return -1;
}

void tri_preflight_available(tri_mem_avail *a) {
    char buf[8192];
    a->meminfo = a->cg_limit = a->cg_free = SIZE_MAX;
    if (read_small("/proc/meminfo", buf, sizeof buf) != 0 || tri_preflight_parse_meminfo(buf, &a->meminfo) != 0)
        a->meminfo = SIZE_MAX;
    size_t limit, usage;
    if (cgroup_figures(&limit, &usage) == 0 && limit != SIZE_MAX) {
        a->cg_limit = limit;
        a->cg_free = usage < limit ? limit - usage : 0;
    }
    a->available = a->meminfo < a->cg_free ? a->meminfo : a->cg_free;
    struct rlimit rl;
    a->as_limit = getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (size_t)rl.rlim_cur : 0;
}

int tri_preflight_check_memory(const tri_mem_estimate *e, int local_ranks, const tri_mem_avail *a) {
    size_t need;
    if (local_ranks < 1) local_ranks = 1;
    int over = !tri_size_mul(&need, e->total, (size_t)local_ranks);
    if (a->as_limit > 0 && e->total > a->as_limit) { /* one rank's own cap, whatever the machine has */
        char tot[32], lim[32];
        return tri_error("not enough memory: each rank needs about %s, more than its address-space limit of %s "
                         "(ulimit -v / prlimit --as). Make the model, train.micro_batch or model.seq_len smaller, "
                         "split the sequence over more ranks (parallel.cp) or the model (parallel.tp), or pass "
                         "--skip-memory-check to try anyway",
                         tri_size_human(tot, 32, (double)e->total), tri_size_human(lim, 32, (double)a->as_limit));
    }
    if (!over && (a->available == SIZE_MAX || need <= a->available)) return 0;
    char tot[32], par[32], gra[32], opt[32], act[32], oth[32], nd[32], av[32], mi[32], lim[32], fr[32];
    char cg[96], ranks[96] = "";
    if (a->cg_limit == SIZE_MAX)
        snprintf(cg, sizeof cg, "no cgroup limit");
    else
        snprintf(cg, sizeof cg, "cgroup limit %s, %s of it free", tri_size_human(lim, 32, (double)a->cg_limit),
                 tri_size_human(fr, 32, (double)a->cg_free));
    if (local_ranks > 1)
        snprintf(ranks, sizeof ranks, "; the %d ranks on this machine need %s", local_ranks,
                 over ? "more than 2^64 bytes" : tri_size_human(nd, 32, (double)need));
    return tri_error("not enough memory: each rank needs about %s (parameters %s, gradients %s, AdamW moments %s, "
                     "activations %s, other %s)%s, but %s is available (MemAvailable %s, %s). Make the model or "
                     "train.micro_batch smaller or use more ranks (parallel.tp), or pass --skip-memory-check to "
                     "try anyway",
                     tri_size_human(tot, 32, (double)e->total), tri_size_human(par, 32, (double)e->params),
                     tri_size_human(gra, 32, (double)e->grads), tri_size_human(opt, 32, (double)(e->optim + e->host)),
                     tri_size_human(act, 32, (double)e->acts), tri_size_human(oth, 32, (double)e->other), ranks,
                     tri_size_human(av, 32, (double)a->available),
                     a->meminfo == SIZE_MAX ? "unknown" : tri_size_human(mi, 32, (double)a->meminfo), cg);
}

/* ------------------------------------------------------------------------ */
/* the other checks                                                          */

static int check_betas(const tri_train_cfg *t) {
    const char *key[2] = {"train.beta1", "train.beta2"};
    double v[2] = {t->beta1, t->beta2};
    for (int i = 0; i < 2; i++)
        if ((float)v[i] == 1.0f)
            return tri_error("%s = %.17g rounds to 1 in fp32 (the optimizer's precision): AdamW's bias correction "
                             "1 - %s^t would be 0 and the first update infinite; use at most 0.99999994",
                             key[i], v[i], key[i] + 6);
    return 0;
}

static int check_tokenizer(const tri_config *cfg) {
    if (!cfg->data.tokenizer[0]) return 0;
    tri_tokenizer tk;
    if (tri_tokenizer_load(&tk, cfg->data.tokenizer) != 0) return -1; /* named the file and the fault */
    int n = tri_tokenizer_vocab_size(&tk);
    tri_tokenizer_free(&tk);
    if (n > cfg->model.vocab_size)
        return tri_error("data.tokenizer %s has %d tokens, more than model.vocab_size = %d: the model could not "
                         "produce its ids (sample would fail); raise model.vocab_size to %d or more, or use the "
                         "tokenizer the data was made with",
                         cfg->data.tokenizer, n, cfg->model.vocab_size, n);
    return 0;
}

/* data.val when the set-up did not open it (no evaluation), and the cap of
 * train.eval_batches when it did. */
static int check_val(tri_preflight *p) {
    const tri_config *cfg = p->cfg;
    p->eval_batches = cfg->train.eval_batches;
    if (!p->val) {
        if (!cfg->data.val[0]) return 0;
        tri_sampler s;
        if (tri_sampler_init(&s, cfg->data.val, cfg->model.seq_len, cfg->model.vocab_size, cfg->train.seed) != 0)
            return -1; /* named the file */
        tri_sampler_free(&s);
        return 0;
    }
    size_t mb = (size_t)cfg->train.micro_batch;
    uint64_t windows = p->val->total_windows, fit = windows / mb;
    const char *what = cfg->data.val[0] ? "data.val" : "the data.split part of data.train";
    if (fit == 0)
        return tri_error("%s has %llu windows of model.seq_len + 1 = %d tokens, fewer than one micro-batch "
                         "(train.micro_batch = %zu) to evaluate on",
                         what, (unsigned long long)windows, cfg->model.seq_len + 1, mb);
    if ((uint64_t)p->eval_batches > fit) {
        p->eval_batches = (int)fit;
        if (p->verbose)
            tri_log_note("train.eval_batches = %d micro-batches of %zu would pass over the %llu windows of %s more "
                         "than once; each evaluation uses %d (every window at most once)",
                         cfg->train.eval_batches, mb, (unsigned long long)windows, what, p->eval_batches);
    }
    return 0;
}

/* mkdir -p log.dir and write a probe file in it (rank 0 writes the logs). */
static int check_log_dir(const char *dir) {
    if (tri_mkdir_p(dir) != 0) return -1; /* named the directory */
    char path[TRI_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/.trident-probe-%ld", dir, (long)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int ok = fd >= 0 && write(fd, "ok\n", 3) == 3;
    int e = errno;
    if (fd >= 0 && close(fd) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    if (fd >= 0) unlink(path);
    if (!ok) return tri_error("log.dir %s: cannot write a file there: %s", dir, strerror(e));
    return 0;
}

/* statvfs of dir, or of its nearest existing ancestor (it is created at the
 * first save). 0 if the figures are known. */
static int free_bytes(const char *dir, size_t *bytes, char *probed, size_t n) {
    snprintf(probed, n, "%s", dir[0] ? dir : ".");
    for (;;) {
        struct statvfs v;
        if (statvfs(probed, &v) == 0) {
            if (v.f_blocks == 0) return -1; /* a pseudo filesystem that does not say */
            if (!tri_size_mul(bytes, (size_t)v.f_bavail, (size_t)v.f_frsize)) *bytes = SIZE_MAX;
            return 0;
        }
        if (errno != ENOENT && errno != ENOTDIR) return -1;
        char *slash = strrchr(probed, '/');
        if (!slash) {
            snprintf(probed, n, ".");
        } else if (slash == probed) {
            probed[1] = '\0';
        } else {
            *slash = '\0';
        }
        if (!strcmp(probed, ".") || !strcmp(probed, "/")) {
            if (statvfs(probed, &v) != 0 || v.f_blocks == 0) return -1;
            if (!tri_size_mul(bytes, (size_t)v.f_bavail, (size_t)v.f_frsize)) *bytes = SIZE_MAX;
            return 0;
        }
    }
}

static int check_disk(const tri_config *cfg, size_t *need_out, size_t *free_out) {
    size_t need = tri_preflight_checkpoint_bytes(&cfg->model), avail;
    char probed[TRI_PATH_MAX];
    *need_out = need;
    *free_out = SIZE_MAX;
    if (free_bytes(cfg->checkpoint.dir, &avail, probed, sizeof probed) != 0) return 0; /* cannot tell */
    *free_out = avail;
    if (need <= avail) return 0;
    char a[32], b[32];
    return tri_error("checkpoint.dir %s: its filesystem (%s) has %s free, but one checkpoint of this model needs %s "
                     "(4 bytes a parameter in model.safetensors, 8 in optimizer.safetensors): free some space or "
                     "choose another checkpoint.dir",
                     cfg->checkpoint.dir, probed, tri_size_human(a, sizeof a, (double)avail),
                     need == SIZE_MAX ? "more than 2^64 bytes" : tri_size_human(b, sizeof b, (double)need));
}

int tri_preflight_run(tri_preflight *p) {
    const tri_config *cfg = p->cfg;
    const tri_mesh *mesh = &p->dist->mesh;
    int synthetic = p->synthetic, logger = mesh->rank == 0;
    size_t ck_need = 0, ck_free = SIZE_MAX;
    tri_mem_avail avail = {SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX, 0};
    p->eval_batches = cfg->train.eval_batches;
    int rc = check_betas(&cfg->train);
    if (rc == 0)
        rc = tri_preflight_model(cfg, (size_t)cfg->train.micro_batch, mesh->tp_rank, mesh->pp_rank, 0, 1,
                                 !p->skip_memory_check, &p->mem);
    if (rc == 0 && !synthetic) rc = check_tokenizer(cfg);
    if (rc == 0 && !synthetic) rc = check_val(p);
    if (rc == 0 && !synthetic && logger) rc = check_log_dir(cfg->log.dir);
    if (rc == 0 && !synthetic) rc = check_disk(cfg, &ck_need, &ck_free);
    int bad = rc != 0;
    tri_comm_allreduce(&p->dist->world, &bad, 1, TRI_I32, TRI_MAX);
    if (bad && rc == 0)
        tri_error_rank(mesh->rank,
                       "stopping before step 1: another rank failed a preflight check (its log says which)");
    if (bad) return -1;
    if (p->verbose) {
        tri_preflight_available(&avail);
        char a[32], b[32], c[32], d[32];
        printf("preflight: about %s of memory per rank (%s available)", tri_size_human(a, 32, (double)p->mem.total),
               avail.available == SIZE_MAX ? "unknown" : tri_size_human(b, 32, (double)avail.available));
        if (p->mem.host) /* parallel.offload = optimizer */
            printf(", of it %s of optimizer state in host memory", tri_size_human(a, 32, (double)p->mem.host));
        if (!synthetic)
            printf(", %s per checkpoint (%s free)", tri_size_human(c, 32, (double)ck_need),
                   ck_free == SIZE_MAX ? "unknown" : tri_size_human(d, 32, (double)ck_free));
        printf("\n");
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* what makes a run diverge                                                  */

const char *tri_preflight_divergence_hint(const tri_config *cfg, int updates_done, char *buf, size_t n) {
    const tri_train_cfg *t = &cfg->train;
    if (updates_done == 0) {
        snprintf(buf, n,
                 "No update has been made yet, so the optimizer settings are not the cause: the model's initial "
                 "forward/backward overflowed (check the model shape and the token files).");
        return buf;
    }
    size_t len = 0;
#define ADD(...) (len += (size_t)snprintf(buf + len, len < n ? n - len : 0, __VA_ARGS__))
    ADD("Settings of this run that can make AdamW diverge: train.lr = %g (lower it)", t->lr);
    if (t->grad_clip == 0.0) ADD("; train.grad_clip = 0, clipping is off (e.g. 1.0 bounds each update)");
    if (t->lr * t->weight_decay >= 1.0)
        ADD("; train.lr x train.weight_decay = %g >= 1: the decay step alone flips and grows the weights",
            t->lr * t->weight_decay);
    if (t->beta2 >= 0.999)
        ADD("; train.beta2 = %g is close to 1: the second moment follows a sudden large gradient slowly and the "
            "update spikes (0.95 is usual for GPT)",
            t->beta2);
    if (t->beta1 * t->beta1 > t->beta2)
        ADD("; train.beta1 = %g is above sqrt(train.beta2) = %g: Adam's step is no longer bounded", t->beta1,
            sqrt(t->beta2));
    ADD(".");
#undef ADD
    return buf;
}
