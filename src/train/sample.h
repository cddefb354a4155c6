/* Text generation from a checkpoint loaded for inference (src/train/infer.h):
 * `trident sample`. One sequence, the whole model on this rank, the context
 * a sliding window of the model's seq_len tokens. */
#ifndef TRI_TRAIN_SAMPLE_H
#define TRI_TRAIN_SAMPLE_H

#include <stdint.h>
#include <stdio.h>

#include "data/tok/tokenizer.h"
#include "train/infer.h"

typedef struct tri_sample_cfg {
    long tokens;        /* tokens to generate (>= 0)                              */
    double temperature; /* softmax temperature; <= 0: greedy (the likeliest id)    */
    int top_k;          /* draw among the top_k likeliest ids; 0 (or >= V): all    */
    uint64_t seed;      /* the draws' random stream (splitmix64)                   */
} tri_sample_cfg;

/* Picks an id in [0, V) from logits (V floats, host): the largest at
 * temperature <= 0 (the first of equals), else a draw from
 * softmax(logits / temperature) restricted to the logits at or above the
 * top_k-th largest (ties at the cut-off are all kept). probs: scratch of V
 * floats (overwritten). *rng: the stream's state, advanced by one draw
 * (not at temperature <= 0). */
int32_t tri_sample_pick(const float *logits, float *probs, int V, double temperature, int top_k, uint64_t *rng);

/* The context sampling starts from, in ctx (room for T >= 1 ids), given
 * the tokenizer's begin-of-text id bos and end-of-text id eot (-1: none) and
 * the prompt's np ids: without a prompt the id training documents follow
 * (bos; a tokenizer without one: eot, else '\n'); with one, bos first when
 * the tokenizer has one and the prompt does not start with it (Llama 3's
 * files put it before every document, and Hugging Face adds it to a prompt),
 * then the prompt's last ids that fit. Returns the count of ids written. */
size_t tri_sample_context(int bos, int eot, const int32_t *pids, size_t np, size_t T, int32_t *ctx);

/* Writes prompt (NULL: none), then cfg->tokens generated tokens' text to out
 * as each comes (flushed), then a newline. The context starts as
 * tri_sample_context says. Draws only ids the
 * tokenizer has (min(its vocabulary, the model's)); the caller checks that
 * the tokenizer's vocabulary is not larger than the model's. Between tokens
 * a stop request (SIGTERM, SIGINT; base/stop.h, installed here with
 * TRI_STOP_SECOND_KILLS) ends the text with a newline and a message.
 * Returns the exit code (base/exit.h): TRI_EXIT_OK, TRI_EXIT_FAILURE (out of
 * memory, an id without text; said), or tri_exit_signal(sig) (said). */
int tri_sample_run(tri_infer *m, const tri_tokenizer *tk, const char *prompt, const tri_sample_cfg *cfg, FILE *out);

#endif
