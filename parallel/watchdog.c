/* The watchdog's deadline, polling policy and report (see watchdog.h). */
#include "parallel/watchdog.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/exitrec.h"

const tri_wd_policy tri_wd_default_policy = {
    .spin_s = 50e-6,
    .yield_s = 50e-3,
    .sleep_frac = 1e-3,
    .min_sleep_s = 20e-6,
    .max_sleep_s = 1e-3,
};

long tri_wd_pause_ns(const tri_wd_policy *p, double elapsed_s) {
    if (p == NULL) p = &tri_wd_default_policy;
    if (elapsed_s < p->spin_s) return 0;
    if (elapsed_s < p->yield_s) return -1;
    double s = elapsed_s * p->sleep_frac;
    if (s < p->min_sleep_s) s = p->min_sleep_s;
    if (s > p->max_sleep_s) s = p->max_sleep_s;
    long ns = (long)(s * 1e9 + 0.5);
    return ns > 0 ? ns : 1;
}

int tri_wd_expired(double timeout_s, double elapsed_s) { return timeout_s > 0 && elapsed_s >= timeout_s; }

void tri_wd_clock_start(tri_wd_clock *k, double now, double max_gap_s) {
    k->last = now;
    k->run = 0;
    k->paused = 0;
    k->max_gap_s = max_gap_s;
}

double tri_wd_clock_tick(tri_wd_clock *k, double now) {
    double gap = now - k->last;
    if (gap > k->max_gap_s)
        k->paused += gap;
    else if (gap > 0)
        k->run += gap;
    k->last = now;
    return k->run;
}

int tri_wd_wait(double timeout_s, const tri_wd_policy *p, int (*done)(void *ctx), void *ctx, double *waited_s) {
    tri_wd_clock k;
    tri_wd_clock_start(&k, tri_now_s(), TRI_WD_PAUSE_GAP_S);
    int rc = 0;
    for (;;) {
        if (done(ctx)) break;
        double elapsed = tri_wd_clock_tick(&k, tri_now_s());
        if (tri_wd_expired(timeout_s, elapsed)) {
            rc = -1;
            break;
        }
        long ns = tri_wd_pause_ns(p, elapsed);
        if (ns < 0) {
            sched_yield();
        } else if (ns > 0) {
            struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
            /* a signal cuts the sleep short: the loop polls and goes on */
            (void)nanosleep(&ts, NULL);
        }
    }
    if (waited_s) *waited_s = tri_wd_clock_tick(&k, tri_now_s());
    return rc;
}

/* Appends printf-style text at *at, never past len (the text is cut). */
static void add(char *buf, size_t len, size_t *at, const char *fmt, ...) {
    if (*at + 1 >= len) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *at, len - *at, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    *at += (size_t)n < len - *at ? (size_t)n : len - *at - 1;
}

/* The world ranks r[0..n) but `skip` (-1: none), comma-separated, at most 16. */
static void add_ranks(char *buf, size_t len, size_t *at, const int *r, int n, int skip) {
    enum { MAX_LISTED = 16 };
    int listed = 0, first = 1;
    for (int i = 0; i < n; i++) {
        if (r[i] == skip) continue;
        if (listed == MAX_LISTED) {
            add(buf, len, at, ",... (%d in all)", n - (skip >= 0 ? 1 : 0));
            return;
        }
        add(buf, len, at, first ? "%d" : ",%d", r[i]);
        first = 0;
        listed++;
    }
}

/* The report after "trident: rank R: ", appended at *at. */
static void describe(char *buf, size_t len, size_t *at_, const tri_wd_site *s) {
    size_t at = *at_;
    const char *group = s->group && s->group[0] ? s->group : "a group";
    add(buf, len, &at, "watchdog: ");
    const tri_progress *p = s->progress;
    if (p == NULL)
        add(buf, len, &at, "outside the training loop: ");
    else if (p->step > 0)
        add(buf, len, &at, "step %ld (%s): ", p->step, p->phase ? p->phase : "?");
    else
        add(buf, len, &at, "%s: ", p->phase ? p->phase : "before the first step");
    if (p != NULL && p->action[0]) add(buf, len, &at, "pipeline action %s: ", p->action);
    add(buf, len, &at, "%s over %s of %zu bytes", s->op ? s->op : "operation", group, s->bytes);
    if (s->peer >= 0)
        add(buf, len, &at, " %s world rank %d (tag %d)", s->op && !strcmp(s->op, "send") ? "to" : "from", s->peer,
            s->tag);
    add(buf, len, &at, " has waited %.1f s (parallel.timeout_s = %g): waiting for ", s->waited_s, s->timeout_s);
    if (s->peer >= 0) {
        add(buf, len, &at, "world rank %d", s->peer);
    } else if (s->n_members > 0 && s->members != NULL) {
        int others = s->n_members;
        for (int i = 0; i < s->n_members; i++) others -= s->members[i] == s->world_rank;
        add(buf, len, &at, "world rank%s ", others == 1 ? "" : "s");
        add_ranks(buf, len, &at, s->members, s->n_members, s->world_rank);
        add(buf, len, &at, " (%s = world ranks ", group);
        add_ranks(buf, len, &at, s->members, s->n_members, -1);
        add(buf, len, &at, ")");
    } else {
        add(buf, len, &at, "the other members of %s", group);
    }
    add(buf, len, &at, "; aborting the job");
    *at_ = at;
}

char *tri_wd_describe(char *buf, size_t len, const tri_wd_site *s) {
    if (len == 0) return buf;
    buf[0] = '\0';
    size_t at = 0;
    add(buf, len, &at, "trident: rank %d: ", s->world_rank);
    describe(buf, len, &at, s);
    return buf;
}

void tri_wd_report(const tri_wd_site *s) {
    char line[1024] = "";
    size_t at = 0;
    describe(line, sizeof line, &at, s);
    tri_error_rank(s->world_rank, "%s", line);
    char rec[1100];
    snprintf(rec, sizeof rec, "trident: rank %d: %s", s->world_rank, line);
    (void)tri_exit_record(TRI_EXIT_TIMEOUT, rec);
}

/* The heartbeat's report after "trident: rank R: ", appended at *at. */
static void describe_named(char *buf, size_t len, size_t *at, const tri_progress *p, const char *op, const char *group,
                           double waited_s, const char *verdict) {
    char where[160] = "outside the training loop";
    if (p != NULL && p->step > 0)
        snprintf(where, sizeof where, "step %ld (%s)", p->step, p->phase ? p->phase : "?");
    else if (p != NULL)
        snprintf(where, sizeof where, "%s", p->phase ? p->phase : "before the first step");
    add(buf, len, at, "heartbeat: %s: %s over %s has waited %.1f s: %s; aborting the job", where,
        op ? op : "operation", group && group[0] ? group : "a group", waited_s, verdict);
}

char *tri_wd_describe_named(char *buf, size_t len, int world_rank, const tri_progress *p, const char *op,
                            const char *group, double waited_s, const char *verdict) {
    if (len == 0) return buf;
    buf[0] = '\0';
    size_t at = 0;
    add(buf, len, &at, "trident: rank %d: ", world_rank);
    describe_named(buf, len, &at, p, op, group, waited_s, verdict);
    return buf;
}

void tri_wd_report_named(int world_rank, const tri_progress *p, const char *op, const char *group, double waited_s,
                         const char *verdict) {
    char line[1024] = "";
    size_t at = 0;
    describe_named(line, sizeof line, &at, p, op, group, waited_s, verdict);
    tri_error_rank(world_rank, "%s", line);
    char rec[1100];
    snprintf(rec, sizeof rec, "trident: rank %d: %s", world_rank, line);
    (void)tri_exit_record(TRI_EXIT_TIMEOUT, rec);
}
