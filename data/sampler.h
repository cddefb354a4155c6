/* Which token windows make up each training step, as a pure function of
 * (spec, seed, seq_len, step, global_batch) and the files' contents: never
 * of the parallel layout, the number of ranks or the order ranks ask in.
 *
 * Windows. A dataset of n tokens holds n_windows = (n - 1) / seq_len windows
 * of seq_len + 1 tokens starting at multiples of seq_len (neighbours overlap
 * by one token): inputs are the first seq_len tokens, targets the last
 * seq_len. Windows cross document boundaries, as in Megatron's GPT dataset.
 *
 * Samples. Sequence j of step s is global sample k = s * global_batch + j.
 * Sample k goes to dataset d(k) of the blend (below), which becomes that
 * dataset's i-th sample; with W windows in its part, its epoch is i / W and
 * its window perm_{seed,d,epoch}(i % W), perm being a keyed Feistel bijection
 * on [0, W) (cycle walking) that needs no memory and differs per epoch.
 *
 * Blends. The spec (config data.train) is "a.bin" or "0.7:a.bin,0.3:b.bin"
 * (weights need not sum to 1; without weights, several files are weighted by
 * their window counts). The assignment d(k) is an earliest-deadline schedule
 * over one period of S samples, precomputed at init (S = the smallest common
 * denominator of the weights, at most TRI_SAMPLER_MAX_PERIOD; weights that
 * need more are rounded to multiples of 1/S): after any K samples, dataset d
 * has received floor(K w_d) or ceil(K w_d) of them, i.e. less than one away
 * from its share. Lookup is O(1) per sample.
 *
 * Split. With val_fraction f > 0 each dataset's last round(f * n_windows)
 * windows (at least one) form the validation part and the rest the training
 * part; a sampler serves one part.
 *
 * Resume needs nothing but the number of samples consumed (plus the spec,
 * seq_len and seed): there is no other state.
 */
#ifndef TRI_DATA_SAMPLER_H
#define TRI_DATA_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "data/dataset.h"

#define TRI_SAMPLER_MAX_DATASETS 64
#define TRI_SAMPLER_MAX_PERIOD   ((uint64_t)1 << 18)

enum { TRI_SPLIT_TRAIN = 0, TRI_SPLIT_VAL = 1 };

typedef struct tri_sampler_source {
    tri_dataset ds;        /* the open file                                   */
    double weight;         /* share of samples actually used: per_period / period */
    uint64_t first_window; /* first window of this part                       */
    uint64_t n_windows;    /* windows in this part (>= 1)                     */
    uint64_t per_period;   /* samples of this dataset in each period          */
} tri_sampler_source;

typedef struct tri_sampler {
    int n_sources;
    tri_sampler_source *src; /* [n_sources]                                  */
    int seq_len;
    uint64_t seed;
    uint64_t total_windows; /* sum of n_windows (the eval pass length)      */
    uint64_t period;        /* S                                            */
    uint16_t *slot_source;  /* [period] dataset of sample k with k % S == p */
    uint32_t *slot_rank;    /* [period] its samples of that dataset before p in the period */
} tri_sampler;

/* Opens every file of `spec` (checking ids against vocab_size when > 0),
 * checks each holds at least one window of seq_len + 1 tokens, and builds
 * the blend schedule. Uses every window for training (no split).
 * Returns 0, or -1 after printing one line "trident: ..." (*s zeroed). */
int tri_sampler_init(tri_sampler *s, const char *spec, int seq_len, int vocab_size, uint64_t seed);

/* Same, serving one part of a train/val split: val_fraction in [0, 1)
 * (0: no split; then part must be TRI_SPLIT_TRAIN), part TRI_SPLIT_TRAIN or
 * TRI_SPLIT_VAL. Each dataset needs at least one window in each part. */
int tri_sampler_init_split(tri_sampler *s, const char *spec, int seq_len, int vocab_size, uint64_t seed,
                           double val_fraction, int part);

/* Closes the files and zeroes *s. NULL-safe. */
void tri_sampler_free(tri_sampler *s);

/* Where global sample k goes: the source index and the window (within that
 * dataset, counting from its window 0, i.e. tokens [w*seq_len, w*seq_len +
 * seq_len + 1)). Either output may be NULL. */
void tri_sampler_locate(const tri_sampler *s, uint64_t k, int *source, uint64_t *window);

/* Sequences [first, first + count) of step `step`'s global batch of
 * global_batch sequences (first + count <= global_batch):
 * inputs (count, seq_len) and targets (count, seq_len), overwritten.
 * Reentrant: ranks and threads may call it concurrently. Returns 0, or -1
 * after printing when a file was truncated under the job (tri_dataset_read);
 * the same for the two fill functions below. */
int tri_sampler_fill(const tri_sampler *s, uint64_t step, size_t global_batch, size_t first, size_t count,
                     int32_t *inputs, int32_t *targets);

/* Global samples [first_sample, first_sample + count), whatever steps they
 * fall in: the trainer counts samples consumed (as Megatron does), so a run
 * resumed with another global batch still continues the same sample stream.
 * tri_sampler_fill(step, G, first, count) is this with first_sample =
 * step * G + first. */
int tri_sampler_fill_samples(const tri_sampler *s, uint64_t first_sample, size_t count, int32_t *inputs,
                             int32_t *targets);

/* Validation batches: sequences batch_index * batch + r (r < batch) of the
 * sequential list of all windows of the part (source 0's in order, then
 * source 1's, ...), wrapping around at total_windows. No shuffling. Callers
 * that average a loss keep batch_index * batch + batch <= total_windows
 * (see tri_sampler_eval_batches): past it, windows count twice.
 * inputs, targets: (batch, seq_len), overwritten. */
int tri_sampler_fill_eval(const tri_sampler *s, size_t batch_index, size_t batch, int32_t *inputs, int32_t *targets);

/* Batches of `batch` sequences that cover every window once: ceil(total/batch). */
size_t tri_sampler_eval_batches(const tri_sampler *s, size_t batch);

#endif
