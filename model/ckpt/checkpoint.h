/* Layout-independent checkpoints of a tri_gpt (and its AdamW state).
 *
 * A checkpoint directory holds
 *   model.safetensors      every tensor whole, in its global shape, under the
 *                          Hugging Face GPT-2 names and layouts (Conv1D
 *                          weights [in, out]; wte trimmed to the real vocab),
 *                          or for a Llama HF's Llama names and layouts
 *                          (linears [out, in]; q/k/v_proj and gate/up_proj
 *                          the separate tensors HF keeps, each the rows of
 *                          the fused matrix; embed_tokens and lm_head trimmed
 *                          to the real vocab; a replicated KV head written
 *                          by the first of its TP ranks)
 *                          in fp32, bf16 or fp16 (checkpoint.dtype; fp32
 *                          widens 16-bit parameters exactly)
 *   optimizer.safetensors  AdamW moments under "exp_avg.<name>" and
 *                          "exp_avg_sq.<name>", same shapes, fp32; and the
 *                          fp32 master weights under "master.<name>" unless
 *                          model.safetensors holds them exactly (fp32
 *                          parameters saved in fp32: then it is the masters)
 *   config.json            a Hugging Face GPT-2 (or Llama) config
 *   state.json             the trainer's state (the caller's text)
 * Every rank writes only the slices it owns into the one preallocated file
 * (replicated tensors by TP rank 0, only DP rank 0 writes; with the
 * distributed optimizer every DP rank writes the optimizer state of its
 * shards, slices that may begin and end inside a row), so a checkpoint saved
 * with any tp/pp/dp and parallel.zero loads with any other, and in any
 * train.precision: loading reads model.safetensors (widened to fp32 on the
 * host), rounds it into 16-bit parameters where the run has them and takes
 * it as the master weights, then master.<name> where present replaces the
 * masters (and the 16-bit parameters are rounded from them again; an fp32
 * run takes them as its parameters). So a run resumes bit for bit in its
 * own precision, whatever checkpoint.dtype was.
 */
#ifndef TRI_MODEL_CHECKPOINT_H
#define TRI_MODEL_CHECKPOINT_H

#include "model/ckpt/safetensors.h"
#include "model/ckpt/store.h"
#include "model/gpt.h"
#include "model/optim.h"
#include "parallel/dist.h"

/* Collective over the world, at start-up before anything is trained: the
 * writing rank (world rank 0) opens the checkpoint store at `root`
 * (tri_ckpt_store_open: validated with `key` named, locked, stale temp dirs
 * removed) and then
 *   resume:    finds the checkpoint to resume from (tri_ckpt_find: the newest
 *              complete one, verified) and continues its run (pruning);
 *   no resume: refuses a root that already holds a checkpoint.
 * Every rank gets the same answer: 0 with dir[n] the step dir to resume from
 * ("" for a fresh start), or -1 on every rank (rank 0 printed why). Rank 0
 * says what it chose when `verbose`. Rank 0's *store stays open (holding the
 * lock) until tri_ckpt_store_close; the other ranks' stays closed. */
int tri_model_ckpt_open(tri_ckpt_store *store, const char *root, const char *key, int resume, tri_dist *d, char *dir,
                        size_t n, int verbose);

/* Collective over the world. Writes step_<step> into the store (open on world
 * rank 0, see above) through a temporary directory and the crash-safe commit
 * of model/ckpt/store.h, then prunes to `keep` (0: keep all). Returns 0 on
 * every rank, or -1 on every rank: the temporary directory is removed and the
 * checkpoints saved before are intact. model_dtype is model.safetensors'
 * dtype: TRI_F32, TRI_BF16 or TRI_F16. */
int tri_model_save(tri_ckpt_store *store, long step, const tri_gpt *g, const tri_optim *o, tri_dist *d,
                   const char *state_json, int keep, tri_dtype model_dtype);

/* An asynchronous save in two halves (model/ckpt/async.c drives them):
 * tri_model_snapshot (collective, on the main thread) does what
 * tri_model_save does before its writes and copies every piece this rank
 * would write into host staging memory, recording where it goes;
 * tri_model_snapshot_write (any thread, no communication) then writes the
 * recorded pieces: the same bytes at the same offsets as tri_model_save, so
 * the files are identical. World rank 0 commits with
 * tri_model_snapshot_commit once every rank's write is done. */
typedef struct tri_ckpt_op {
    int file;           /* 0: model.safetensors, 1: optimizer.safetensors */
    int entry;          /* the tensor in L[file] */
    tri_st_piece piece; /* its data in the staging memory */
} tri_ckpt_op;

typedef struct tri_ckpt_snapshot {
    float *staging;   /* host memory, allocated once, reused            */
    size_t cap, used; /* floats                                         */
    tri_ckpt_op *ops; /* the pieces to write, in tri_model_save's order */
    size_t n_ops, ops_cap;
    tri_st_layout L[2]; /* the layouts of model and optimizer.safetensors */
    char tmp[4096];     /* the save's temporary directory ("": none)      */
    long step;
    int rank;                       /* world rank, for messages                       */
    tri_model_cfg cfg;              /* for config.json                                */
    char *config_json, *state_json; /* world rank 0: the small files' text */
    long long bytes;                /* world rank 0, after the commit: the checkpoint's size */
} tri_ckpt_snapshot;

/* Collective over the world. Zeroed *s the first time. Returns 0 on every
 * rank, or -1 on every rank (the temporary directory removed, the saved
 * checkpoints intact). */
int tri_model_snapshot(tri_ckpt_snapshot *s, tri_ckpt_store *store, long step, const tri_gpt *g, const tri_optim *o,
                       tri_dist *d, const char *state_json, tri_dtype model_dtype);
/* Not collective: the floats of staging memory a snapshot of this rank
 * takes (s->staging must hold them; tri_model_snapshot allocates it when it
 * is smaller). */
size_t tri_model_snapshot_floats(const tri_gpt *g, const tri_optim *o, const tri_dist *d, tri_dtype model_dtype);
/* Not collective, any thread: writes this rank's recorded pieces into the
 * temporary directory's files (sleeping sleep_ms_halfway ms halfway: a test
 * switch, model/debug.h). 0 or -1 (printed). */
int tri_model_snapshot_write(tri_ckpt_snapshot *s, int sleep_ms_halfway);
/* World rank 0, any thread, after every rank's tri_model_snapshot_write
 * succeeded: config.json, state.json and tri_ckpt_commit (its return). */
int tri_model_snapshot_commit(tri_ckpt_snapshot *s, tri_ckpt_store *store, int keep);
/* NULL-safe; frees the staging memory and zeroes *s. */
void tri_ckpt_snapshot_free(tri_ckpt_snapshot *s);

/* Collective over the world. Loads this rank's slices from the checkpoint
 * directory `dir` (a step directory); o may be NULL (inference: the
 * optimizer file is then not needed). Shapes are checked against the model;
 * errors name the file and the tensor. Returns 0 on every rank or -1 on
 * every rank. */
int tri_model_load(const char *dir, tri_gpt *g, tri_optim *o, tri_dist *d);

/* Safetensors files read as one: a checkpoint's model.safetensors, or the
 * shards of a Hugging Face directory (model.safetensors.index.json). With
 * gpt2_bare, a GPT-2 tensor "transformer.X" may also be stored as "X" (the
 * original GPT-2 files' names). */
typedef struct tri_st_set {
    tri_st_file *files;
    int n;
    int gpt2_bare;
} tri_st_set;

/* The file of s holding tensor `name` (its index in *entry), or -1. */
int tri_st_set_find(const tri_st_set *s, const char *name, int *entry);

/* The global model's tensors for cfg (names and stored shapes, fp32): what a
 * model.safetensors of this shape holds, in Hugging Face's order. */
int tri_model_layout(const tri_model_cfg *cfg, tri_st_layout *L);

/* Not collective: reads this rank's slices of every parameter from s (shapes
 * checked, errors name the file and the tensor), into the parameters and,
 * when o has fp32 masters, into them. Returns 0 or -1. */
int tri_model_read_set(const tri_st_set *s, tri_gpt *g, tri_optim *o);

/* Collective over the world (d may be NULL: one process). Starts a model
 * from a Hugging Face directory `dir` (Llama: LlamaForCausalLM; GPT-2:
 * GPT2LMHeadModel): config.json must describe g's model (every key that
 * disagrees named with both numbers), the weights are model.safetensors or
 * the shards listed by model.safetensors.index.json; every tensor the model
 * has must be there with its shape (F32, BF16 or F16 on disk, widened to
 * fp32), and a tensor it does not have is refused. Each rank reads only its
 * slices. o may be NULL; else its fp32 masters get the weights too (its
 * moments stay as they are: a fresh optimizer). Returns 0 on every rank or
 * -1 on every rank (world rank 0 printed why). */
int tri_model_import(const char *dir, tri_gpt *g, tri_optim *o, tri_dist *d, int verbose);

/* The Hugging Face config.json text for cfg (malloc'd): GPT2LMHeadModel, or
 * for model.arch llama LlamaForCausalLM (num_key_value_heads,
 * intermediate_size, rms_norm_eps, rope_theta, rope_scaling "llama3" or
 * null, tie_word_embeddings). */
char *tri_hf_config_json(const tri_model_cfg *cfg);

/* Reads a model shape from a Hugging Face config.json text: GPT-2's
 * (n_embd, n_head, n_layer, n_positions, vocab_size), or with model_type
 * "llama" Llama's (hidden_size, num_attention_heads, num_hidden_layers,
 * max_position_embeddings, vocab_size, intermediate_size, num_key_value_heads
 * and the numbers above). `name` names the file in messages. Returns 0 or -1. */
int tri_hf_config_parse(const char *json, const char *name, tri_model_cfg *cfg);

#endif
