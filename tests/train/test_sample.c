/* The token draw of `trident sample` (src/train/sample.h, tri_sample_pick)
 * against an independent computation: the argmax at temperature 0, and the
 * frequencies of many draws against softmax(logits / T) over the top k,
 * computed here in double. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "train/sample.h"

#define V 8
static const float LOGITS[V] = {0.5f, 2.0f, -1.0f, 1.5f, 2.0f, 0.0f, 1.0f, -3.0f};

/* the expected probability of each id: softmax(logits / temp) over the k
 * largest (k = 0: all), by sorting rather than by a threshold search */
static void expected(double temp, int k, double *p) {
    int order[V];
    for (int i = 0; i < V; i++) order[i] = i;
    for (int i = 0; i < V; i++)
        for (int j = i + 1; j < V; j++)
            if (LOGITS[order[j]] > LOGITS[order[i]]) {
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    double cut = k > 0 && k < V ? LOGITS[order[k - 1]] : -INFINITY, sum = 0;
    for (int i = 0; i < V; i++) sum += p[i] = LOGITS[i] >= cut ? exp(LOGITS[i] / temp) : 0.0;
    for (int i = 0; i < V; i++) p[i] /= sum;
}

static void check_frequencies(double temp, int k) {
    enum { N = 40000 };
    long count[V] = {0};
    float probs[V];
    uint64_t rng = 12345;
    for (int n = 0; n < N; n++) {
        memset(probs, 0xff, sizeof probs); /* poisoned scratch: NaN */
        int32_t id = tri_sample_pick(LOGITS, probs, V, temp, k, &rng);
        cr_assert(id >= 0 && id < V, "id %d", id);
        count[id]++;
    }
    double p[V];
    expected(temp, k, p);
    for (int i = 0; i < V; i++) {
        double f = (double)count[i] / N, sd = sqrt(p[i] * (1 - p[i]) / N);
        if (p[i] == 0.0)
            cr_expect_eq(count[i], 0, "T %g top-k %d: id %d is outside the top k but was drawn %ld times", temp, k, i,
                         count[i]);
        else
            cr_expect(fabs(f - p[i]) <= 5 * sd + 1e-3, "T %g top-k %d: id %d drawn %.4f of the time, expected %.4f",
                      temp, k, i, f, p[i]);
    }
}

Test(sample, temperature_zero_is_the_first_largest_logit) {
    float probs[V];
    uint64_t rng = 1, before = rng;
    cr_expect_eq(tri_sample_pick(LOGITS, probs, V, 0.0, 40, &rng), 1, "ids 1 and 4 tie: the first wins");
    cr_expect_eq(rng, before, "a greedy pick draws nothing");
}

Test(sample, top_k_one_is_greedy_at_any_temperature) {
    float probs[V];
    uint64_t rng = 7;
    for (int n = 0; n < 1000; n++) {
        int32_t id = tri_sample_pick(LOGITS, probs, V, 2.0, 1, &rng);
        /* the two largest tie: both are at the cut-off and both kept */
        cr_assert(id == 1 || id == 4, "draw %d: id %d", n, id);
    }
}

Test(sample, draws_follow_the_softmax_over_all_ids) { check_frequencies(1.0, 0); }

Test(sample, draws_follow_the_softmax_over_the_top_k) {
    check_frequencies(1.0, 3);
    check_frequencies(0.5, 4);
    check_frequencies(3.0, V); /* k = V: all */
}

Test(sample, the_same_seed_draws_the_same_ids) {
    float probs[V];
    uint64_t a = 99, b = 99;
    for (int n = 0; n < 200; n++)
        cr_assert_eq(tri_sample_pick(LOGITS, probs, V, 1.0, 0, &a), tri_sample_pick(LOGITS, probs, V, 1.0, 0, &b));
}

/* The starting context, against the rule written out by hand: GPT-2's kind
 * (no begin-of-text) starts from end-of-text alone or the prompt as it is;
 * Llama 3's kind puts begin-of-text first, once, and keeps it when the
 * prompt is cut to the window. */
Test(sample, the_context_starts_where_training_documents_start) {
    int32_t ctx[8];
    const int32_t prompt[] = {5, 6, 7, 8, 9}, with_bos[] = {1, 5, 6};
    cr_assert_eq(tri_sample_context(-1, 0, NULL, 0, 8, ctx), 1);
    cr_assert_eq(ctx[0], 0, "no prompt, no begin-of-text: end-of-text");
    cr_assert_eq(tri_sample_context(-1, -1, NULL, 0, 8, ctx), 1);
    cr_assert_eq(ctx[0], '\n', "neither: a newline");
    cr_assert_eq(tri_sample_context(1, 2, NULL, 0, 8, ctx), 1);
    cr_assert_eq(ctx[0], 1, "no prompt: begin-of-text");
    cr_assert_eq(tri_sample_context(-1, 0, prompt, 5, 3, ctx), 3);
    cr_assert(ctx[0] == 7 && ctx[1] == 8 && ctx[2] == 9, "GPT-2 kind: the prompt's last 3 ids");
    cr_assert_eq(tri_sample_context(1, 2, prompt, 5, 8, ctx), 6);
    cr_assert(ctx[0] == 1 && ctx[1] == 5 && ctx[5] == 9, "begin-of-text, then the prompt");
    cr_assert_eq(tri_sample_context(1, 2, prompt, 5, 3, ctx), 3);
    cr_assert(ctx[0] == 1 && ctx[1] == 8 && ctx[2] == 9, "begin-of-text kept, the prompt's last 2 ids");
    cr_assert_eq(tri_sample_context(1, 2, with_bos, 3, 8, ctx), 3);
    cr_assert(ctx[0] == 1 && ctx[1] == 5 && ctx[2] == 6, "a prompt that starts with it gets no second one");
}
