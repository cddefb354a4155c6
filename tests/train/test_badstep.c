/* The pure part of src/train/badstep.c: sample ranges (merging, parsing,
 * the data position), the running mean a spike is measured against
 * (against a direct double computation of its definition), and the
 * state.json round trip. The trainer's part runs end to end in
 * tests/system/test_bad_steps.c. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/testutil.h"
#include "train/badstep.h"

static void expect_ranges(const tri_badstep *b, int n, const uint64_t *pairs) {
    cr_assert_eq(b->n_ranges, n, "%d ranges, want %d", b->n_ranges, n);
    for (int i = 0; i < n; i++) {
        cr_expect_eq(b->ranges[i].begin, pairs[2 * i], "range %d begin %llu", i,
                     (unsigned long long)b->ranges[i].begin);
        cr_expect_eq(b->ranges[i].end, pairs[2 * i + 1], "range %d end %llu", i, (unsigned long long)b->ranges[i].end);
    }
}

Test(badstep, ranges_stay_sorted_and_merged) {
    tri_badstep b;
    tri_badstep_init(&b);
    cr_assert_eq(tri_badstep_add_range(&b, 100, 200), 0);
    cr_assert_eq(tri_badstep_add_range(&b, 10, 20), 0);
    cr_assert_eq(tri_badstep_add_range(&b, 300, 400), 0);
    expect_ranges(&b, 3, (const uint64_t[]){10, 20, 100, 200, 300, 400});
    cr_assert_eq(tri_badstep_add_range(&b, 150, 300), 0); /* overlaps one, touches the next: one range */
    expect_ranges(&b, 2, (const uint64_t[]){10, 20, 100, 400});
    cr_assert_eq(tri_badstep_add_range(&b, 5, 10), 0);  /* touching */
    cr_assert_eq(tri_badstep_add_range(&b, 30, 30), 0); /* empty: nothing */
    expect_ranges(&b, 2, (const uint64_t[]){5, 20, 100, 400});
    cr_assert_eq(tri_badstep_add_range(&b, 0, 1000), 0); /* covers all */
    expect_ranges(&b, 1, (const uint64_t[]){0, 1000});
}

Test(badstep, too_many_ranges_are_refused) {
    tri_badstep b;
    tri_badstep_init(&b);
    for (int i = 0; i < TRI_BADSTEP_MAX_RANGES; i++) cr_assert_eq(tri_badstep_add_range(&b, 10 * i, 10 * i + 5), 0);
    char err[512];
    tt_err_capture(err, sizeof err);
    int rc = tri_badstep_add_range(&b, 100000, 100005);
    tt_err_capture(NULL, 0);
    cr_expect_eq(rc, -1);
    cr_expect(strstr(err, "train.skip_samples") != NULL, "%s", err);
    cr_expect_eq(b.n_ranges, TRI_BADSTEP_MAX_RANGES, "unchanged");
    /* one that merges still fits */
    cr_expect_eq(tri_badstep_add_range(&b, 3, 12), 0);
}

/* the position against a brute-force walk: a step at p starts at the first
 * sample at or after p that no range holds, ranges being whole steps */
Test(badstep, the_data_position_jumps_past_ranges) {
    tri_badstep b;
    tri_badstep_init(&b);
    cr_assert_eq(tri_badstep_parse_ranges(&b, " 48-64 , 96-104,200-208", "k"), 0);
    expect_ranges(&b, 3, (const uint64_t[]){48, 64, 96, 104, 200, 208});
    for (uint64_t p = 0; p < 300; p++) {
        uint64_t q = p;
        int moved = 1;
        while (moved) {
            moved = 0;
            for (int i = 0; i < b.n_ranges; i++)
                if (q >= b.ranges[i].begin && q < b.ranges[i].end) q = b.ranges[i].end, moved = 1;
        }
        cr_expect_eq(tri_badstep_position(&b, p), q, "position of %llu", (unsigned long long)p);
    }
}

Test(badstep, malformed_ranges_name_the_key_and_the_piece) {
    const char *bad[] = {"5", "5-", "-5", "8-4", "4-4", "1-2,", "1-2;3-4", "a-b", "1-9007199254740992", "1-2,3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tri_badstep b;
        tri_badstep_init(&b);
        char err[512];
        tt_err_capture(err, sizeof err);
        int rc = tri_badstep_parse_ranges(&b, bad[i], "train.skip_samples");
        tt_err_capture(NULL, 0);
        cr_expect_eq(rc, -1, "\"%s\" accepted", bad[i]);
        cr_expect(strstr(err, "train.skip_samples") != NULL, "\"%s\": %s", bad[i], err);
    }
    tri_badstep b;
    tri_badstep_init(&b);
    cr_expect_eq(tri_badstep_parse_ranges(&b, "", "k"), 0);
    cr_expect_eq(tri_badstep_parse_ranges(&b, "   ", "k"), 0);
    cr_expect_eq(b.n_ranges, 0);
}

/* m_n = m_{n-1} + (x_n - m_{n-1}) / min(n, 50), against the definition in
 * long double: the mean of the first 50, then the exponential mean */
Test(badstep, the_running_mean_is_the_documented_one) {
    tri_badstep b;
    tri_badstep_init(&b);
    long double mean = 0;
    for (int n = 1; n <= 200; n++) {
        double x = 3.0 + sin(0.37 * n) + 0.01 * n;
        if (n <= TRI_BADSTEP_SPIKE_N) {
            long double s = 0;
            for (int k = 1; k <= n; k++) s += 3.0 + sin(0.37 * k) + 0.01 * k;
            mean = s / n;
        } else {
            mean = mean + ((long double)x - mean) / TRI_BADSTEP_SPIKE_N;
        }
        /* not yet warm: nothing is a spike */
        if (n <= TRI_BADSTEP_SPIKE_WARMUP) cr_expect(!tri_badstep_is_spike(&b, 1e30, 3.0), "spike at %d", n);
        tri_badstep_note_loss(&b, x);
        cr_expect(fabsl((long double)b.spike_mean - mean) <= 1e-12L * mean, "n %d: %.17g vs %.17Lg", n, b.spike_mean,
                  mean);
    }
    cr_expect(tri_badstep_is_spike(&b, 3.01 * b.spike_mean, 3.0));
    cr_expect(!tri_badstep_is_spike(&b, 2.99 * b.spike_mean, 3.0));
}

Test(badstep, state_round_trips_exactly) {
    tri_badstep a;
    tri_badstep_init(&a);
    cr_assert_eq(tri_badstep_parse_ranges(&a, "48-64,4503599627370496-4503599627370504", "k"), 0);
    for (int i = 0; i < 13; i++) tri_badstep_note_loss(&a, 5.0 + 1.0 / (i + 3));
    a.skipped = 7;
    a.in_a_row = 2;
    a.streak_begin = 72;
    a.rollbacks = 3;
    cJSON *root = cJSON_CreateObject();
    tri_badstep_to_state(&a, root);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    tri_badstep b;
    tri_badstep_init(&b);
    cr_assert_eq(tri_badstep_parse_ranges(&b, "10-20", "k"), 0);
    cr_assert_eq(tri_badstep_from_state(&b, text, "state.json", 1), 0, "%s", text);
    cr_expect(b.spike_mean == a.spike_mean, "%.17g vs %.17g", b.spike_mean, a.spike_mean);
    cr_expect_eq(b.spike_count, 13);
    cr_expect_eq(b.skipped, 7);
    cr_expect_eq(b.in_a_row, 2);
    cr_expect_eq(b.streak_begin, 72);
    cr_expect_eq(b.rollbacks, 3);
    /* the ranges are added to those already there */
    expect_ranges(&b, 3, (const uint64_t[]){10, 20, 48, 64, 4503599627370496ull, 4503599627370504ull});
    /* without ranges: only the counters */
    tri_badstep c;
    tri_badstep_init(&c);
    cr_assert_eq(tri_badstep_from_state(&c, text, "state.json", 0), 0);
    cr_expect_eq(c.n_ranges, 0);
    cr_expect_eq(c.skipped, 7);
    free(text);
    /* absent (an older checkpoint): unchanged */
    tri_badstep d = a;
    cr_expect_eq(tri_badstep_from_state(&d, "{\"step\": 3}", "s", 1), 0);
    cr_expect(memcmp(&d, &a, sizeof d) == 0);
}

Test(badstep, malformed_state_names_the_file_and_key) {
    const char *bad[] = {
        "{\"bad_steps\": 3}",
        "{\"bad_steps\": {\"skipped_steps\": -1, \"bad_in_a_row\": 0, \"streak_begin\": 0, \"rollbacks\": 0, "
        "\"spike_count\": 0, \"spike_mean\": 0, \"skip_samples\": []}}",
        "{\"bad_steps\": {\"skipped_steps\": 1, \"bad_in_a_row\": 0, \"streak_begin\": 0, \"rollbacks\": 0, "
        "\"spike_count\": 0, \"spike_mean\": \"x\", \"skip_samples\": []}}",
        "{\"bad_steps\": {\"skipped_steps\": 1, \"bad_in_a_row\": 0, \"streak_begin\": 0, \"rollbacks\": 0, "
        "\"spike_count\": 0, \"spike_mean\": 1, \"skip_samples\": [[5, 4]]}}",
        "{\"bad_steps\": {\"skipped_steps\": 1, \"bad_in_a_row\": 0, \"streak_begin\": 0, \"rollbacks\": 0, "
        "\"spike_count\": 0, \"spike_mean\": 1, \"skip_samples\": [[1, 2, 3]]}}",
        "{\"bad_steps\": {\"skipped_steps\": 1, \"bad_in_a_row\": 0, \"streak_begin\": 0, \"rollbacks\": 0, "
        "\"spike_count\": 0, \"spike_mean\": 1}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tri_badstep b;
        tri_badstep_init(&b);
        tri_badstep before = b;
        char err[512];
        tt_err_capture(err, sizeof err);
        int rc = tri_badstep_from_state(&b, bad[i], "ck/state.json", 1);
        tt_err_capture(NULL, 0);
        cr_expect_eq(rc, -1, "accepted: %s", bad[i]);
        cr_expect(strstr(err, "ck/state.json") && strstr(err, "bad_steps"), "%s", err);
        cr_expect(memcmp(&b, &before, sizeof b) == 0, "changed by a refused state");
    }
}
