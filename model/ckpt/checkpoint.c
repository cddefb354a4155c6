#include "model/ckpt/checkpoint.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/ckpt/store.h"
#include "model/ckpt/safetensors.h"
#include "base/err.h"
#include "base/fs.h"
#include "base/clock.h"
#include "base/log.h"

enum { MAX_PIECES = 3 };

/* The HF order of the tensors of one block, and of the whole model. */
static const tri_param_kind k_block_order[] = {
    TRI_P_LN1W, TRI_P_LN1B, TRI_P_QKVW, TRI_P_KW,  TRI_P_VW,      TRI_P_QKVB,    TRI_P_ATTPROJW, TRI_P_ATTPROJB,
    TRI_P_LN2W, TRI_P_LN2B, TRI_P_FCW,  TRI_P_UPW, TRI_P_FCB, TRI_P_FCPROJW, TRI_P_FCPROJB,
};

/* Stored (HF) shape of a parameter. */
static int hf_shape(const tri_param *p, size_t *shape) {
    if (p->rows == 1) {
        shape[0] = p->cols;
        return 1;
    }
    if (p->hf_transposed) {
        shape[0] = p->cols;
        shape[1] = p->rows;
    } else {
        shape[0] = p->hf_rows_saved;
        shape[1] = p->cols;
    }
    return 2;
}

static int add_entry(tri_st_layout *L, const char *prefix, const tri_param *p, tri_dtype dtype) {
    char name[128];
    size_t shape[2];
    snprintf(name, sizeof name, "%s%s", prefix, p->name);
    int nd = hf_shape(p, shape);
    return tri_st_layout_add_dtype(L, name, dtype, nd, shape) < 0 ? -1 : 0;
}

/* Appends the global model's tensors to L under `prefix`, in Hugging Face's
 * order: wte, wpe, blocks in order, ln_f; stored as `dtype`. */
static int build_layout(const tri_model_cfg *cfg, const char *prefix, tri_st_layout *L, tri_dtype dtype) {
    tri_gpt g1; /* the global model's table: tp = 1, one chunk */
    if (tri_gpt_describe_single(&g1, cfg, 1, 0) != 0) return -1;
    const tri_chunk full = g1.chunks[0];
    int rc = 0;
    tri_param_kind head[] = {TRI_P_WTE, TRI_P_WPE};
    for (int k = 0; k < 2 && rc == 0; k++)
        for (int i = 0; i < full.n_params; i++)
            if (full.params[i].kind == head[k]) rc |= add_entry(L, prefix, &full.params[i], dtype);
    for (int l = 0; l < cfg->n_layer && rc == 0; l++)
        for (size_t k = 0; k < sizeof k_block_order / sizeof k_block_order[0]; k++)
            for (int i = 0; i < full.n_params; i++)
                if (full.params[i].layer == l && full.params[i].kind == k_block_order[k])
                    rc |= add_entry(L, prefix, &full.params[i], dtype);
    tri_param_kind tail[] = {TRI_P_LNFW, TRI_P_LNFB, TRI_P_LMHEAD};
    for (int k = 0; k < 3 && rc == 0; k++)
        for (int i = 0; i < full.n_params; i++)
            if (full.params[i].kind == tail[k]) rc |= add_entry(L, prefix, &full.params[i], dtype);
    tri_gpt_free(&g1);
    return rc;
}

/* The boxes of the stored tensor that this rank's slice of p covers. */
static int pieces_of(const tri_gpt *g, const tri_param *p, float *base, tri_st_piece *out) {
    int n = 0;
    if (p->split == TRI_SPLIT_NONE) {
        if (p->hf_transposed)
            out[n++] = (tri_st_piece){0, 0, p->cols, p->rows, base, p->lcols, 1};
        else
            out[n++] = (tri_st_piece){0, 0, p->rows, p->cols, base, p->lcols, 0};
        return n;
    }
    size_t S = (size_t)p->segments;
    size_t lseg = (p->split == TRI_SPLIT_ROWS ? p->lrows : p->lcols) / S;
    for (size_t s = 0; s < S; s++) {
        size_t gstart = tri_param_global_dim(p, g->tp_rank, g->tp, s * lseg);
        if (p->split == TRI_SPLIT_ROWS) {
            float *src = base + s * lseg * p->lcols;
            if (p->hf_transposed) {
                out[n++] = (tri_st_piece){0, gstart, p->cols, lseg, src, p->lcols, 1};
            } else {
                /* wte: only the rows of the real vocabulary are stored */
                if (gstart >= p->hf_rows_saved) continue;
                size_t nr = p->hf_rows_saved - gstart < lseg ? p->hf_rows_saved - gstart : lseg;
                out[n++] = (tri_st_piece){gstart, 0, nr, p->cols, src, p->lcols, 0};
            }
        } else {
            float *src = base + s * lseg;
            if (p->hf_transposed)
                out[n++] = (tri_st_piece){gstart, 0, lseg, p->rows, src, p->lcols, 1};
            else /* a bias (one row), or Llama's o_proj and down_proj (C rows) */
                out[n++] = (tri_st_piece){0, gstart, p->rows, lseg, src, p->lcols, 0};
        }
    }
    return n;
}

/* Whether this rank writes its slice of p of chunk ch (each stored element
 * exactly once). all_dp: every DP rank writes (its ZeRO shards of the
 * optimizer state), else DP rank 0 only. */
static int owns(const tri_gpt *g, const tri_chunk *ch, const tri_dist *d, const tri_param *p, int all_dp) {
    /* (context parallelism: the CP ranks of a replica hold the same tensors) */
    if ((d->mesh.dp_rank != 0 || d->mesh.cp_rank != 0) && !all_dp) return 0;
    if (p->split == TRI_SPLIT_NONE && g->tp_rank != 0) return 0;
    if (g->tp_rank % p->tp_replicas != 0) return 0; /* a replicated KV head: its first rank writes */
    if (p->kind == TRI_P_WTE && !ch->has_embedding) return 0; /* the head stage's copy */
    return 1;
}

static int agree(tri_dist *d, int failed) {
    tri_comm_allreduce_host(&d->world, &failed, 1, TRI_I32, TRI_MAX);
    return failed ? -1 : 0;
}

/* Which flat buffers of a chunk a file holds. BUF_MASTER: the fp32 master
 * weights, the optimizer's (laid out like the moments) for 16-bit
 * parameters, the parameters themselves for fp32 ones. */
typedef enum { BUF_PARAMS, BUF_EXP_AVG, BUF_EXP_AVG_SQ, BUF_MASTER } which_buf;

static float *chunk_buf(const tri_gpt *g, const tri_optim *o, int k, which_buf which) {
    if (which == BUF_MASTER) return o->master[k] ? o->master[k] : (float *)g->chunks[k].param_mem;
    return which == BUF_PARAMS ? g->chunks[k].param_mem : which == BUF_EXP_AVG ? o->m[k] : o->v[k];
}

/* Whether chunk k's buffer `which` is laid out like the optimizer state
 * (with ZeRO: this rank's shards only) rather than like the parameters. */
static int in_optim_layout(const tri_optim *o, int k, which_buf which) {
    if (which == BUF_PARAMS) return 0;
    return which != BUF_MASTER || o->master[k] != NULL;
}

/* A host buffer for the largest tensor of any chunk (the staging copies of
 * backend memory go through it). */
static float *staging_alloc(const tri_gpt *g) {
    size_t most = 1;
    for (int k = 0; k < g->n_chunks; k++)
        for (int i = 0; i < g->chunks[k].n_params; i++)
            if (g->chunks[k].params[i].numel > most) most = g->chunks[k].params[i].numel;
    float *h = malloc(most * sizeof(float));
    if (!h) tri_error("out of memory: checkpoint staging buffer of %zu floats", most);
    return h;
}

/* Where the pieces of a save go: written into fd at once (a synchronous
 * save), or recorded into a snapshot (rec, file: which of its files), with
 * their data already in the snapshot's staging memory, for a later
 * tri_model_snapshot_write (an asynchronous save). */
typedef struct sink {
    int fd;
    tri_ckpt_snapshot *rec;
    int file;
} sink;

static int sink_write(sink *k, const tri_st_layout *L, int entry, const tri_st_piece *p) {
    if (!k->rec) return tri_st_write_piece(k->fd, L, entry, p);
    tri_ckpt_snapshot *r = k->rec;
    if (r->n_ops == r->ops_cap) {
        size_t cap = r->ops_cap ? 2 * r->ops_cap : 256;
        tri_ckpt_op *v = realloc(r->ops, cap * sizeof *v);
        if (!v) {
            tri_error("out of memory: checkpoint snapshot of %zu pieces", cap);
            return -1;
        }
        r->ops = v;
        r->ops_cap = cap;
    }
    r->ops[r->n_ops++] = (tri_ckpt_op){k->file, entry, *p};
    return 0;
}

/* Writes the part of pieces pc[0, np) (of a parameter's local matrix in
 * host, lcols wide, as made by pieces_of) that holds local elements [a, e)
 * in row-major order: a ZeRO shard may start and end inside a row. */
static int write_range(sink *k, const tri_st_layout *L, int entry, const float *host, size_t lcols,
                       const tri_st_piece *pc, int np, size_t a, size_t e) {
    if (a >= e) return 0;
    /* [a, e) as up to three boxes of local rows x cols: partial first row,
     * whole rows, partial last row */
    size_t ra = a / lcols, re = (e - 1) / lcols;
    size_t box[3][4]; /* row0, nrows, col0, ncols */
    int nb = 0;
    if (ra == re) {
        box[nb][0] = ra, box[nb][1] = 1, box[nb][2] = a % lcols, box[nb][3] = e - a, nb++;
    } else {
        box[nb][0] = ra, box[nb][1] = 1, box[nb][2] = a % lcols, box[nb][3] = lcols - a % lcols, nb++;
        if (re > ra + 1) box[nb][0] = ra + 1, box[nb][1] = re - ra - 1, box[nb][2] = 0, box[nb][3] = lcols, nb++;
        box[nb][0] = re, box[nb][1] = 1, box[nb][2] = 0, box[nb][3] = e - re * lcols, nb++;
    }
    for (int q = 0; q < np; q++) {
        const tri_st_piece *p = &pc[q];
        size_t off = (size_t)(p->buf - host), lr0 = off / lcols, lc0 = off % lcols;
        size_t nlr = p->transposed ? p->nc : p->nr, nlc = p->transposed ? p->nr : p->nc;
        for (int x = 0; x < nb; x++) {
            size_t r0 = box[x][0] > lr0 ? box[x][0] : lr0;
            size_t r1 = box[x][0] + box[x][1] < lr0 + nlr ? box[x][0] + box[x][1] : lr0 + nlr;
            size_t c0 = box[x][2] > lc0 ? box[x][2] : lc0;
            size_t c1 = box[x][2] + box[x][3] < lc0 + nlc ? box[x][2] + box[x][3] : lc0 + nlc;
            if (r0 >= r1 || c0 >= c1) continue;
            float *src = (float *)host + r0 * lcols + c0;
            tri_st_piece s =
                p->transposed ? (tri_st_piece){p->r0 + (c0 - lc0), p->c0 + (r0 - lr0), c1 - c0, r1 - r0, src, lcols, 1}
                              : (tri_st_piece){p->r0 + (r0 - lr0), p->c0 + (c0 - lc0), r1 - r0, c1 - c0, src, lcols, 0};
            if (sink_write(k, L, entry, &s) != 0) return -1;
        }
    }
    return 0;
}

/* One run of a parameter's ZeRO-sharded optimizer state (tri_optim_runs):
 * written from, or read into, the rank's state buffer. */
typedef struct run_io {
    const tri_gpt *g;
    const tri_optim *o;
    float *mem, *host; /* the state buffer; the parameter's local matrix */
    int write, entry;
    sink *k; /* writing */
    const tri_st_layout *L;
    const tri_param *p;
    const tri_st_piece *pc;
    int np, rc;
} run_io;

static void run_io_fn(void *ctx, size_t a, size_t e, size_t s0) {
    run_io *r = ctx;
    if (r->rc != 0) return;
    size_t bytes = (e - a) * sizeof(float);
    if (r->write) {
        tri_optim_copy_to_host(r->o, r->g, r->host + a, r->mem + s0, bytes);
        r->rc = write_range(r->k, r->L, r->entry, r->host, r->p->lcols, r->pc, r->np, a, e);
    } else {
        tri_optim_copy_from_host(r->o, r->g, r->mem + s0, r->host + a, bytes);
    }
}

/* The pieces of this rank's slices of the buffers `which` into out: written
 * through one host buffer (out->rec NULL), or copied into out->rec's staging
 * memory, each parameter's local matrix at its own place. */
static int put_params(sink *out, const tri_st_layout *L, const char *prefix, const tri_gpt *g, const tri_optim *o,
                      const tri_dist *d, which_buf which, const char *path) {
    float *host = out->rec ? NULL : staging_alloc(g);
    int rc = (host || out->rec) ? 0 : -1;
    for (int k = 0; k < g->n_chunks && rc == 0; k++) {
        const tri_chunk *ch = &g->chunks[k];
        const float *mem = chunk_buf(g, o, k, which);
        /* ZeRO optimizer state: every DP rank writes its shards */
        int sharded = in_optim_layout(o, k, which) && o->sync != NULL;
        for (int i = 0; i < ch->n_params && rc == 0; i++) {
            const tri_param *p = &ch->params[i];
            if (!owns(g, ch, d, p, sharded)) continue;
            char name[128];
            snprintf(name, sizeof name, "%s%s", prefix, p->name);
            int e = tri_st_layout_find(L, name);
            if (e < 0) {
                tri_error("internal error: %s: tensor %s is not in the checkpoint layout", path, name);
                rc = -1;
                break;
            }
            tri_st_piece pc[MAX_PIECES];
            if (out->rec) { /* this parameter's place in the snapshot (sized by staging_need) */
                TRI_CHECK(out->rec->used + p->numel <= out->rec->cap);
                host = out->rec->staging + out->rec->used;
                out->rec->used += p->numel;
            }
            if (sharded) {
                run_io r = {.g = g,
                            .o = o,
                            .mem = (float *)mem,
                            .host = host,
                            .write = 1,
                            .k = out,
                            .entry = e,
                            .L = L,
                            .p = p,
                            .pc = pc,
                            .np = pieces_of(g, p, host, pc)};
                tri_optim_runs(o, g, k, i, run_io_fn, &r);
                rc = r.rc;
                continue;
            }
            if (which == BUF_PARAMS) { /* fp32 on the host, widened from 16-bit parameters */
                rc = tri_gpt_params_to_host(g, k, p->offset, host, p->numel);
                if (rc != 0) break;
            } else {
                tri_optim_copy_to_host(o, g, host, mem + p->offset, p->numel * sizeof(float));
            }
            int np = pieces_of(g, p, host, pc);
            for (int q = 0; q < np && rc == 0; q++) rc = sink_write(out, L, e, &pc[q]);
        }
    }
    if (!out->rec) free(host);
    return rc;
}

/* Floats of staging memory a snapshot of this rank's slices of `which`
 * needs (put_params into a snapshot takes them in the same order). */
static size_t staging_need(const tri_gpt *g, const tri_optim *o, const tri_dist *d, which_buf which) {
    size_t n = 0;
    for (int k = 0; k < g->n_chunks; k++) {
        int sharded = in_optim_layout(o, k, which) && o->sync != NULL;
        for (int i = 0; i < g->chunks[k].n_params; i++)
            if (owns(g, &g->chunks[k], d, &g->chunks[k].params[i], sharded)) n += g->chunks[k].params[i].numel;
    }
    return n;
}

static int write_params(const char *path, const tri_st_layout *L, const char *prefix, const tri_gpt *g,
                        const tri_optim *o, const tri_dist *d, which_buf which) {
    int fd = open(path, O_WRONLY);
    if (fd < 0) {
        tri_error("rank %d: %s: cannot open for writing: %s", d->mesh.rank, path, strerror(errno));
        return -1;
    }
    sink k = {.fd = fd};
    int rc = put_params(&k, L, prefix, g, o, d, which, path);
    if (close(fd) != 0 && rc == 0) {
        tri_error("%s: close: %s", path, strerror(errno));
        rc = -1;
    }
    return rc;
}

int tri_model_ckpt_open(tri_ckpt_store *store, const char *root, const char *key, int resume, tri_dist *d, char *dir,
                        size_t n, int verbose) {
    char found[TRI_CKPT_PATH_MAX] = "";
    int failed = 0;
    memset(store, 0, sizeof *store);
    if (d->mesh.rank == 0) {
        tri_ckpt_found f;
        char newest[TRI_CKPT_PATH_MAX];
        long held = 0;
        if (tri_ckpt_store_open(store, root, key) != 0) {
            failed = 1;
        } else if (resume) {
            double t0 = tri_now_s();
            int found_rc = tri_ckpt_find(store->root, &f);
            store->find_ms = (tri_now_s() - t0) * 1e3;
            if (found_rc != 0 || (f.dir[0] && tri_ckpt_store_adopt(store, f.dir) != 0))
                failed = 1;
            else if (verbose && f.note[0])
                tri_log_note("%s", f.note);
            if (!failed) snprintf(found, sizeof found, "%s", f.dir);
        } else if ((held = tri_ckpt_count(store->root, newest, sizeof newest)) != 0) {
            if (held > 0)
                tri_error("%s %s already holds %ld checkpoint%s (the newest: %s): pass --resume to continue from "
                          "it, or choose another %s",
                          key, store->root, held, held == 1 ? "" : "s", newest, key);
            failed = 1;
        }
        if (failed) tri_ckpt_store_close(store);
    }
    if (agree(d, failed) != 0) return -1;
    tri_comm_broadcast_host(&d->world, found, sizeof found, TRI_U8, 0);
    int k = snprintf(dir, n, "%s", found);
    TRI_CHECK(k >= 0 && (size_t)k < n);
    return 0;
}

/* Whether model.safetensors in `dtype` holds the master weights exactly (fp32
 * parameters saved in fp32); if not, the optimizer file keeps them. */
static int model_is_master(const tri_gpt *g, tri_dtype dtype) {
    if (dtype != TRI_F32) return 0;
    for (int k = 0; k < g->n_chunks; k++)
        if (g->chunks[k].param_dtype != TRI_F32) return 0;
    return 1;
}

/* The first part of every save, collective: the layouts of both files, and
 * on world rank 0 the temporary directory with both files created (header,
 * full size); its path reaches every rank. Returns 0 on every rank, or -1
 * on every rank (tmp may then name a directory to remove: "" if none). */
static int save_begin(tri_ckpt_store *store, long step, const tri_gpt *g, tri_dist *d, tri_dtype model_dtype,
                      tri_st_layout *Lm, tri_st_layout *Lo, char *tmp, size_t n, int *masters) {
    int failed = 0;
    /* optimizer.safetensors: exp_avg.* then exp_avg_sq.*, then master.* (fp32)
     * unless model.safetensors is the master weights already */
    *masters = !model_is_master(g, model_dtype);
    if (build_layout(&g->cfg, "", Lm, model_dtype) != 0 || build_layout(&g->cfg, "exp_avg.", Lo, TRI_F32) != 0 ||
        build_layout(&g->cfg, "exp_avg_sq.", Lo, TRI_F32) != 0 ||
        (*masters && build_layout(&g->cfg, "master.", Lo, TRI_F32) != 0))
        failed = 1;
    if (d->mesh.rank == 0 && !failed) {
        char mpath[4200], opath[4200];
        if (tri_ckpt_begin(store, step, tmp, n) != 0) failed = 1;
        snprintf(mpath, sizeof mpath, "%s/model.safetensors", tmp);
        snprintf(opath, sizeof opath, "%s/optimizer.safetensors", tmp);
        if (!failed && tri_st_create(mpath, Lm, "{\"format\": \"pt\", \"producer\": \"trident\"}") != 0) failed = 1;
        char meta[128];
        snprintf(meta, sizeof meta, "{\"step\": \"%ld\", \"optimizer\": \"adamw\"}", step);
        if (!failed && tri_st_create(opath, Lo, meta) != 0) failed = 1;
    }
    if (agree(d, failed) != 0) return -1;
    tri_comm_broadcast_host(&d->world, tmp, n, TRI_U8, 0);
    return 0;
}

/* World rank 0's last writes of a save: config.json and state.json. */
static int write_small_files(const char *tmp, const tri_model_cfg *cfg, const char *state_json) {
    char path[4200];
    char *cj = tri_hf_config_json(cfg);
    int failed = 0;
    snprintf(path, sizeof path, "%s/config.json", tmp);
    if (!cj || tri_write_file_atomic(path, cj, strlen(cj)) != 0) failed = 1;
    free(cj);
    snprintf(path, sizeof path, "%s/state.json", tmp);
    if (!failed && tri_write_file_atomic(path, state_json, strlen(state_json)) != 0) failed = 1;
    return failed ? -1 : 0;
}

int tri_model_save(tri_ckpt_store *store, long step, const tri_gpt *g, const tri_optim *o, tri_dist *d,
                   const char *state_json, int keep, tri_dtype model_dtype) {
    int is_root = d->mesh.rank == 0;
    char tmp[4096] = {0};
    tri_st_layout Lm, Lo;
    tri_st_layout_init(&Lm);
    tri_st_layout_init(&Lo);
    int failed = 0, masters = 0;
    char mpath[4200], opath[4200];
    if (save_begin(store, step, g, d, model_dtype, &Lm, &Lo, tmp, sizeof tmp, &masters) != 0) goto fail;
    snprintf(mpath, sizeof mpath, "%s/model.safetensors", tmp);
    snprintf(opath, sizeof opath, "%s/optimizer.safetensors", tmp);
    failed = write_params(mpath, &Lm, "", g, o, d, BUF_PARAMS) != 0;
    if (!failed) failed = write_params(opath, &Lo, "exp_avg.", g, o, d, BUF_EXP_AVG) != 0;
    if (!failed) failed = write_params(opath, &Lo, "exp_avg_sq.", g, o, d, BUF_EXP_AVG_SQ) != 0;
    if (!failed && masters) failed = write_params(opath, &Lo, "master.", g, o, d, BUF_MASTER) != 0;
    if (agree(d, failed) != 0) goto fail;
    if (is_root) {
        failed = write_small_files(tmp, &g->cfg, state_json) != 0;
        /* > 0: committed, only pruning old ones failed (already reported) */
        if (!failed && tri_ckpt_commit(store, step, tmp, keep) < 0) failed = 1;
    }
    if (agree(d, failed) != 0) goto fail;
    tri_st_layout_free(&Lm);
    tri_st_layout_free(&Lo);
    return 0;
fail:
    if (is_root) {
        tri_ckpt_abort(store, tmp); /* every rank is past its writes: agreed above */
        tri_error("checkpoint of step %ld not saved (its temporary directory is removed); the checkpoints saved "
                  "before are intact",
                  step);
    }
    tri_st_layout_free(&Lm);
    tri_st_layout_free(&Lo);
    return -1;
}

/* ------------------------------------------------ asynchronous saves */

size_t tri_model_snapshot_floats(const tri_gpt *g, const tri_optim *o, const tri_dist *d, tri_dtype model_dtype) {
    int masters = !model_is_master(g, model_dtype);
    return staging_need(g, o, d, BUF_PARAMS) + staging_need(g, o, d, BUF_EXP_AVG) +
           staging_need(g, o, d, BUF_EXP_AVG_SQ) + (masters ? staging_need(g, o, d, BUF_MASTER) : 0);
}

int tri_model_snapshot(tri_ckpt_snapshot *s, tri_ckpt_store *store, long step, const tri_gpt *g, const tri_optim *o,
                       tri_dist *d, const char *state_json, tri_dtype model_dtype) {
    int is_root = d->mesh.rank == 0;
    tri_st_layout_free(&s->L[0]);
    tri_st_layout_free(&s->L[1]);
    tri_st_layout_init(&s->L[0]);
    tri_st_layout_init(&s->L[1]);
    free(s->config_json);
    free(s->state_json);
    s->config_json = s->state_json = NULL;
    s->tmp[0] = '\0';
    s->step = step;
    s->n_ops = s->used = 0;
    s->bytes = 0;
    int masters = 0, failed = 0;
    if (save_begin(store, step, g, d, model_dtype, &s->L[0], &s->L[1], s->tmp, sizeof s->tmp, &masters) != 0) goto fail;
    /* The staging memory: sized once (the same every save of a run), kept. */
    size_t need = tri_model_snapshot_floats(g, o, d, model_dtype);
    if (need > s->cap) {
        /* (On the CUDA backend this is pageable memory and each copy below a
         * synchronous cudaMemcpy on the context's stream: tri_ctx offers no
         * pinned host memory or copy stream yet. Pinned memory would make
         * the copies faster, not the snapshot any less consistent.) */
        free(s->staging);
        s->staging = malloc((need ? need : 1) * sizeof(float));
        s->cap = s->staging ? need : 0;
        if (!s->staging) {
            tri_error("rank %d: out of memory: %zu bytes of checkpoint staging memory (checkpoint.async = "
                      "false saves without it)",
                      d->mesh.rank, need * sizeof(float));
            failed = 1;
        }
    }
    sink km = {.fd = -1, .rec = s, .file = 0}, ko = {.fd = -1, .rec = s, .file = 1};
    if (!failed) failed = put_params(&km, &s->L[0], "", g, o, d, BUF_PARAMS, "model.safetensors") != 0;
    if (!failed) failed = put_params(&ko, &s->L[1], "exp_avg.", g, o, d, BUF_EXP_AVG, "optimizer.safetensors") != 0;
    if (!failed)
        failed = put_params(&ko, &s->L[1], "exp_avg_sq.", g, o, d, BUF_EXP_AVG_SQ, "optimizer.safetensors") != 0;
    if (!failed && masters)
        failed = put_params(&ko, &s->L[1], "master.", g, o, d, BUF_MASTER, "optimizer.safetensors") != 0;
    if (!failed && is_root) {
        s->config_json = tri_hf_config_json(&g->cfg);
        s->state_json = strdup(state_json);
        if (!s->config_json || !s->state_json) failed = 1;
    }
    s->cfg = g->cfg;
    s->rank = d->mesh.rank;
    if (agree(d, failed) != 0) goto fail;
    return 0;
fail:
    if (is_root) {
        tri_ckpt_abort(store, s->tmp);
        tri_error("checkpoint of step %ld not saved (its temporary directory is removed); the checkpoints saved "
                  "before are intact",
                  step);
    }
    s->tmp[0] = '\0';
    return -1;
}

int tri_model_snapshot_write(tri_ckpt_snapshot *s, int sleep_ms_halfway) {
    char path[2][4200];
    const char *names[2] = {"model.safetensors", "optimizer.safetensors"};
    int fd[2] = {-1, -1}, rc = 0;
    for (int f = 0; f < 2 && rc == 0; f++) {
        snprintf(path[f], sizeof path[f], "%s/%s", s->tmp, names[f]);
        fd[f] = open(path[f], O_WRONLY | O_CLOEXEC);
        if (fd[f] < 0) rc = tri_error("rank %d: %s: cannot open for writing: %s", s->rank, path[f], strerror(errno));
    }
    for (size_t i = 0; i < s->n_ops && rc == 0; i++) {
        if (sleep_ms_halfway > 0 && i == s->n_ops / 2) usleep((useconds_t)sleep_ms_halfway * 1000u);
        const tri_ckpt_op *op = &s->ops[i];
        rc = tri_st_write_piece(fd[op->file], &s->L[op->file], op->entry, &op->piece);
    }
    for (int f = 0; f < 2; f++)
        if (fd[f] >= 0 && close(fd[f]) != 0 && rc == 0) rc = tri_error("%s: close: %s", path[f], strerror(errno));
    return rc;
}

int tri_model_snapshot_commit(tri_ckpt_snapshot *s, tri_ckpt_store *store, int keep) {
    if (write_small_files(s->tmp, &s->cfg, s->state_json) != 0) return -1;
    /* (the config.json of a snapshot is the text taken with it) */
    return tri_ckpt_commit(store, s->step, s->tmp, keep);
}

void tri_ckpt_snapshot_free(tri_ckpt_snapshot *s) {
    if (!s) return;
    free(s->staging);
    free(s->ops);
    free(s->config_json);
    free(s->state_json);
    tri_st_layout_free(&s->L[0]);
    tri_st_layout_free(&s->L[1]);
    memset(s, 0, sizeof *s);
}

int tri_st_set_find(const tri_st_set *s, const char *name, int *entry) {
    for (int i = 0; i < s->n; i++) {
        int e = tri_st_layout_find(&s->files[i].layout, name);
        if (e < 0 && s->gpt2_bare && strncmp(name, "transformer.", 12) == 0)
            e = tri_st_layout_find(&s->files[i].layout, name + 12);
        if (e >= 0) {
            *entry = e;
            return i;
        }
    }
    return -1;
}

/* Reads the tensors `prefix`<name> of this rank's slices from whichever file
 * of s holds each (one file for a checkpoint; the shards of a Hugging Face
 * directory). */
static int read_params_set(const tri_st_set *s, const char *prefix, tri_gpt *g, tri_optim *o, which_buf which) {
    float *host = staging_alloc(g);
    int rc = host ? 0 : -1;
    for (int k = 0; k < g->n_chunks && rc == 0; k++) {
        const tri_chunk *ch = &g->chunks[k];
        float *mem = chunk_buf(g, o, k, which);
        for (int i = 0; i < ch->n_params && rc == 0; i++) {
            const tri_param *p = &ch->params[i];
            char name[128];
            size_t shape[2];
            snprintf(name, sizeof name, "%s%s", prefix, p->name);
            int nd = hf_shape(p, shape);
            int e = -1, fi = tri_st_set_find(s, name, &e);
            /* master.* is there only when model.safetensors is not the masters */
            if (which == BUF_MASTER && fi < 0) continue;
            const tri_st_file *f = &s->files[fi < 0 ? 0 : fi];
            e = tri_st_expect(f, fi >= 0 ? f->layout.entries[e].name : name, nd, shape);
            if (e < 0) {
                rc = -1;
                break;
            }
            memset(host, 0, p->numel * sizeof(float)); /* padded vocab rows stay 0 */
            tri_st_piece pc[MAX_PIECES];
            int np = pieces_of(g, p, host, pc);
            for (int q = 0; q < np && rc == 0; q++) rc = tri_st_read_piece(f->fd, &f->layout, e, &pc[q]);
            if (rc != 0) break;
            /* 16-bit parameters: rounded from the fp32 values read, which
             * also become the master weights (read from model.safetensors
             * first, then from master.* when the checkpoint has them) */
            if ((which == BUF_PARAMS || (which == BUF_MASTER && o->master[k])) &&
                tri_gpt_params_to_device(g, k, p->offset, host, p->numel) != 0) {
                rc = -1;
                break;
            }
            float *dst = which == BUF_PARAMS ? (o && o->master[k] ? o->master[k] : NULL) : mem;
            int optim_layout = which == BUF_PARAMS ? dst != NULL : in_optim_layout(o, k, which);
            if (dst && optim_layout && o->sync != NULL) {
                /* ZeRO: this rank keeps the state of its shards only */
                run_io r = {.g = g, .o = o, .mem = dst, .host = host, .write = 0, .k = NULL, .entry = e, .p = p};
                tri_optim_runs(o, g, k, i, run_io_fn, &r);
            } else if (dst && (which != BUF_PARAMS || optim_layout)) {
                tri_optim_copy_from_host(o, g, dst + p->offset, host, p->numel * sizeof(float));
            }
        }
    }
    free(host);
    return rc;
}

int tri_model_read_set(const tri_st_set *s, tri_gpt *g, tri_optim *o) {
    return read_params_set(s, "", g, o, BUF_PARAMS);
}

int tri_model_layout(const tri_model_cfg *cfg, tri_st_layout *L) { return build_layout(cfg, "", L, TRI_F32); }

static int read_params(const char *path, const char *prefix, tri_gpt *g, tri_optim *o, which_buf which) {
    tri_st_file f;
    if (tri_st_open(&f, path) != 0) return -1;
    tri_st_set s = {.files = &f, .n = 1};
    int rc = read_params_set(&s, prefix, g, o, which);
    tri_st_close(&f);
    return rc;
}

int tri_model_load(const char *dir, tri_gpt *g, tri_optim *o, tri_dist *d) {
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int failed = read_params(path, "", g, o, BUF_PARAMS) != 0;
    if (!failed && o) {
        snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
        failed = read_params(path, "exp_avg.", g, o, BUF_EXP_AVG) != 0;
        if (!failed) failed = read_params(path, "exp_avg_sq.", g, o, BUF_EXP_AVG_SQ) != 0;
        if (!failed) failed = read_params(path, "master.", g, o, BUF_MASTER) != 0;
    }
    return d ? agree(d, failed) : (failed ? -1 : 0);
}

/* The Llama config's numbers beyond the sizes: rms_norm_eps, rope_theta,
 * tie_word_embeddings, rope_scaling (null, or Llama 3.1's "llama3"). 0 or
 * -1 naming the key. transformers 5 writes RoPE's numbers as one object,
 * "rope_parameters": {"rope_type": "default" | "llama3", "rope_theta": ..,
 * and llama3's factor, ...}; older versions top-level rope_theta and
 * rope_scaling. Both are read (the top-level keys first). */
static int llama_extras(const cJSON *c, const char *name, tri_model_cfg *cfg) {
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(c, "rms_norm_eps");
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(c, "rope_parameters");
    if (!cJSON_IsObject(rp)) rp = NULL;
    const cJSON *theta = cJSON_GetObjectItemCaseSensitive(c, "rope_theta");
    if (!theta && rp) theta = cJSON_GetObjectItemCaseSensitive(rp, "rope_theta");
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(c, "tie_word_embeddings");
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(c, "rope_scaling");
    if ((!rs || cJSON_IsNull(rs)) && rp) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(rp, "rope_type");
        rs = cJSON_IsString(t) && strcmp(t->valuestring, "default") != 0 ? rp : NULL;
    }
    cfg->norm_eps = cJSON_IsNumber(eps) ? eps->valuedouble : 1e-6; /* HF's LlamaConfig defaults */
    cfg->rope_theta = cJSON_IsNumber(theta) ? theta->valuedouble : 10000.0;
    cfg->tie_embeddings = cJSON_IsBool(tie) ? cJSON_IsTrue(tie) : 0;
    if (!(cfg->norm_eps > 0) || !(cfg->rope_theta > 0) || !isfinite(cfg->norm_eps) || !isfinite(cfg->rope_theta)) {
        tri_error("%s: rms_norm_eps (%g) and rope_theta (%g) must be positive numbers", name, cfg->norm_eps,
                  cfg->rope_theta);
        return -1;
    }
    cfg->rope_scaling_factor = cfg->rope_low_freq_factor = cfg->rope_high_freq_factor = 0;
    cfg->rope_original_seq_len = 0;
    if (!rs || cJSON_IsNull(rs)) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    if (!cJSON_IsString(type)) type = cJSON_GetObjectItemCaseSensitive(rs, "type");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "llama3") != 0) {
        tri_error("%s: rope_scaling of type %s: Trident implements \"llama3\" (Llama 3.1) only", name,
                  cJSON_IsString(type) ? type->valuestring : "(none)");
        return -1;
    }
    const char *k[4] = {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
    double v[4];
    for (int i = 0; i < 4; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(rs, k[i]);
        if (!cJSON_IsNumber(x) || !(x->valuedouble > 0) || !(x->valuedouble < 2147483648.0)) {
            tri_error("%s: rope_scaling.%s: expected a positive number", name, k[i]);
            return -1;
        }
        v[i] = x->valuedouble;
    }
    if (v[3] != floor(v[3]) || v[0] < 1 || !(v[2] > v[1])) {
        tri_error("%s: rope_scaling: factor %g >= 1, high_freq_factor %g > low_freq_factor %g and an integer "
                  "original_max_position_embeddings (%g) expected",
                  name, v[0], v[2], v[1], v[3]);
        return -1;
    }
    cfg->rope_scaling_factor = v[0], cfg->rope_low_freq_factor = v[1], cfg->rope_high_freq_factor = v[2];
    cfg->rope_original_seq_len = (int)v[3];
    return 0;
}

/* Hugging Face's LlamaForCausalLM config for a Llama cfg: what
 * transformers needs to load model.safetensors as it is (tensor names and
 * layouts are HF's; RoPE is HF's rotate-half, so no permutation). */
/* A number transformers reads as a float: with a decimal point even when
 * whole (cJSON writes 4.0 as 4, a Python int, which transformers' RoPE
 * validation reports: "factor field must be a float"). */
static void add_float(cJSON *o, const char *name, double v) {
    char buf[40];
    snprintf(buf, sizeof buf, "%.15g", v);
    if (strtod(buf, NULL) != v) snprintf(buf, sizeof buf, "%.17g", v); /* the shortest that reads back */
    if (!strpbrk(buf, ".eEn")) strcat(buf, ".0");
    cJSON_AddRawToObject(o, name, buf);
}

static char *llama_config_json(const tri_model_cfg *cfg) {
    cJSON *c = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("LlamaForCausalLM"));
    cJSON_AddStringToObject(c, "model_type", "llama");
    cJSON_AddNumberToObject(c, "vocab_size", cfg->vocab_size);
    cJSON_AddNumberToObject(c, "hidden_size", cfg->n_embd);
    cJSON_AddNumberToObject(c, "intermediate_size", tri_model_ffn_hidden(cfg));
    cJSON_AddNumberToObject(c, "num_hidden_layers", cfg->n_layer);
    cJSON_AddNumberToObject(c, "num_attention_heads", cfg->n_head);
    cJSON_AddNumberToObject(c, "num_key_value_heads", tri_model_n_kv_head(cfg));
    cJSON_AddNumberToObject(c, "head_dim", cfg->n_embd / cfg->n_head);
    cJSON_AddNumberToObject(c, "max_position_embeddings", cfg->seq_len);
    add_float(c, "rms_norm_eps", cfg->norm_eps > 0 ? cfg->norm_eps : 1e-5);
    add_float(c, "rope_theta", cfg->rope_theta > 0 ? cfg->rope_theta : 10000.0);
    if (cfg->rope_scaling_factor > 0) {
        cJSON *r = cJSON_AddObjectToObject(c, "rope_scaling");
        cJSON_AddStringToObject(r, "rope_type", "llama3");
        add_float(r, "factor", cfg->rope_scaling_factor);
        add_float(r, "low_freq_factor", cfg->rope_low_freq_factor);
        add_float(r, "high_freq_factor", cfg->rope_high_freq_factor);
        cJSON_AddNumberToObject(r, "original_max_position_embeddings", cfg->rope_original_seq_len);
    } else {
        cJSON_AddNullToObject(c, "rope_scaling");
    }
    cJSON_AddBoolToObject(c, "tie_word_embeddings", tri_model_tied(cfg));
    cJSON_AddStringToObject(c, "hidden_act", "silu");
    cJSON_AddBoolToObject(c, "attention_bias", 0);
    cJSON_AddBoolToObject(c, "mlp_bias", 0);
    cJSON_AddNumberToObject(c, "attention_dropout", 0.0);
    cJSON_AddNumberToObject(c, "initializer_range", 0.02);
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    char *s = cJSON_Print(c);
    cJSON_Delete(c);
    return s;
}

char *tri_hf_config_json(const tri_model_cfg *cfg) {
    if (cfg->arch == TRI_ARCH_LLAMA) return llama_config_json(cfg);
    cJSON *c = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(c, "model_type", "gpt2");
    cJSON_AddNumberToObject(c, "vocab_size", cfg->vocab_size);
    cJSON_AddNumberToObject(c, "n_positions", cfg->seq_len);
    cJSON_AddNumberToObject(c, "n_ctx", cfg->seq_len);
    cJSON_AddNumberToObject(c, "n_embd", cfg->n_embd);
    cJSON_AddNumberToObject(c, "n_layer", cfg->n_layer);
    cJSON_AddNumberToObject(c, "n_head", cfg->n_head);
    cJSON_AddNullToObject(c, "n_inner");
    cJSON_AddStringToObject(c, "activation_function", "gelu_new");
    cJSON_AddNumberToObject(c, "layer_norm_epsilon", 1e-5);
    cJSON_AddNumberToObject(c, "initializer_range", 0.02);
    cJSON_AddNumberToObject(c, "resid_pdrop", 0.0);
    cJSON_AddNumberToObject(c, "embd_pdrop", 0.0);
    cJSON_AddNumberToObject(c, "attn_pdrop", 0.0);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", 1);
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    char *s = cJSON_Print(c);
    cJSON_Delete(c);
    return s;
}

int tri_hf_config_parse(const char *json, const char *name, tri_model_cfg *cfg) {
    cJSON *c = cJSON_Parse(json);
    if (!c) {
        tri_error("%s: not valid JSON", name);
        return -1;
    }
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(c, "model_type");
    int llama = cJSON_IsString(mt) && strcmp(mt->valuestring, "llama") == 0;
    struct {
        const char *key;
        int *dst;
    } keys_gpt2[] = {
        {"n_embd", &cfg->n_embd},       {"n_head", &cfg->n_head},         {"n_layer", &cfg->n_layer},
        {"n_positions", &cfg->seq_len}, {"vocab_size", &cfg->vocab_size},
    }, keys_llama[] = {
        {"hidden_size", &cfg->n_embd},
        {"num_attention_heads", &cfg->n_head},
        {"num_hidden_layers", &cfg->n_layer},
        {"max_position_embeddings", &cfg->seq_len},
        {"vocab_size", &cfg->vocab_size},
        {"intermediate_size", &cfg->ffn_hidden},
        {"num_key_value_heads", &cfg->n_kv_head},
    }, *keys = llama ? keys_llama : keys_gpt2;
    size_t n_keys = llama ? sizeof keys_llama / sizeof keys_llama[0] : sizeof keys_gpt2 / sizeof keys_gpt2[0];
    int rc = 0;
    if (llama) {
        cfg->arch = TRI_ARCH_LLAMA;
        cfg->n_kv_head = 0; /* HF's default: num_attention_heads */
        rc = llama_extras(c, name, cfg);
    }
    for (size_t i = 0; i < n_keys && rc == 0; i++) {
        /* (num_key_value_heads may be absent: every head its own) */
        if (keys[i].dst == &cfg->n_kv_head && !cJSON_GetObjectItemCaseSensitive(c, keys[i].key)) continue;
        cJSON *v = cJSON_GetObjectItemCaseSensitive(c, keys[i].key);
        /* the range check comes before the cast: (int)1e10 is undefined */
        double x = cJSON_IsNumber(v) ? v->valuedouble : 0;
        if (!cJSON_IsNumber(v) || !(x >= 1 && x <= INT_MAX) || x != floor(x)) {
            char got[64];
            if (cJSON_IsNumber(v))
                snprintf(got, sizeof got, "%.17g", x);
            else
                snprintf(got, sizeof got, "%s", v ? "not a number" : "missing");
            tri_error("%s: %s: expected a positive integer below 2^31, got %s", name, keys[i].key, got);
            rc = -1;
            break;
        }
        *keys[i].dst = (int)x;
    }
    if (llama && cfg->n_kv_head == 0) cfg->n_kv_head = cfg->n_head;
    cJSON_Delete(c);
    return rc;
}
