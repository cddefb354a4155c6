/* What `tridentrun --dry-run` prints (src/launch/launch.h): the rank map, the
 * trainer's stages, the mpirun command. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/size.h"
#include "base/str.h"
#include "config/config.h"
#include "launch/launch.h"
#include "model/gpt.h"
#include "model/runtime.h"
#include "parallel/mesh.h"
#include "plan/stage_plan.h"

/* Prints one argument so that a POSIX shell reads it back unchanged. */
static void print_quoted(FILE *f, const char *s) {
    int plain = *s != '\0';
    for (const char *c = s; *c; c++)
        if (!isalnum((unsigned char)*c) && !strchr("@%+=:,./_-", *c)) plain = 0;
    if (plain) {
        fputs(s, f);
        return;
    }
    fputc('\'', f);
    for (const char *c = s; *c; c++) {
        if (*c == '\'')
            fputs("'\\''", f);
        else
            fputc(*c, f);
    }
    fputc('\'', f);
}

void tri_launch_print_command(FILE *f, const tri_launch_argv *a) {
    for (int i = 0; i < a->n; i++) {
        if (i) fputc(' ', f);
        print_quoted(f, a->v[i]);
    }
    fputc('\n', f);
}

/* "chunk 0: layers 0-3 +embedding" */
static void print_chunk(FILE *f, int c, const tri_chunk_spec *sp) {
    fprintf(f, "    chunk %d: ", c);
    if (sp->n_layers == 1)
        fprintf(f, "layer %d", sp->layers[0]);
    else
        fprintf(f, "layers %d-%d", sp->layers[0], sp->layers[sp->n_layers - 1]);
    fprintf(f, "%s%s", sp->has_embedding ? " +embedding" : "", sp->has_head ? " +head" : "");
}

/* What each rank of `trident train` holds and keeps: its pipeline stage, the
 * layers of its chunks, its parameter bytes (fp32) and the saved activations
 * the schedule's peak keeps (src/plan/stage_plan.h), plus the schedule's line. A
 * config the trainer would refuse gets its reason (on stderr) instead. */
static int print_stages(FILE *f, const tri_launch_plan *p) {
    const tri_config *cfg = p->train_cfg;
    int pp = cfg->parallel.pp;
    tri_stage_plan *sps = tri_xcalloc((size_t)pp, sizeof *sps);
    int ok = 1;
    fflush(f);
    if (tri_gpt_check_layout(&cfg->model, cfg->parallel.tp, pp, cfg->parallel.vpp, cfg->parallel.pp_layout) != 0)
        ok = 0;
    for (int s = 0; ok && s < pp; s++)
        if (tri_stage_plan_init(&sps[s], cfg, s) != 0) ok = 0;
    if (!ok) {
        fprintf(f, "pipeline: the trainer would refuse this config (the reason is the trident: line on stderr)\n");
    } else {
        tri_recompute pol = cfg->train.recompute;
        /* a CP rank holds seq_len / cp positions of each sequence */
        size_t B = (size_t)cfg->train.micro_batch, T = (size_t)cfg->model.seq_len / (size_t)cfg->parallel.cp;
        fprintf(f,
                "pipeline: schedule %s, parallel.pp %d x vpp %d, m = %d micro-batches per step per dp rank, bubble "
                "%.3f (simulated, unit costs)\n",
                tri_sched_name(sps[0].kind), pp, cfg->parallel.vpp, sps[0].m, sps[0].bubble);
        for (int r = 0; r < p->world; r++) {
            tri_mesh m;
            char err[256];
            if (tri_mesh_init_cp(&m, p->world, r, p->tp, p->cp > 1 ? p->cp : 1, p->pp, p->dp, err, sizeof err) != 0)
                break;
            const tri_stage_plan *sp = &sps[m.pp_rank];
            tri_gpt g;
            if (tri_gpt_describe(&g, &cfg->model, cfg->parallel.tp, m.tp_rank, sp->specs, sp->n_chunks) != 0) break;
            size_t params = tri_gpt_local_elems(&g) * sizeof(float);
            size_t saved = tri_stage_plan_saved_bytes(sp, &g, B, T, pol);
            size_t ws = tri_workspace_bytes(&g, B, T, pol);
            char a[32], b[32], c[32];
            fprintf(f,
                    "rank %d: stage %d, parameters %s (%zu bytes), saved activations %s (%zu bytes), workspace %s "
                    "(%zu bytes)\n",
                    r, m.pp_rank, tri_size_human(a, sizeof a, (double)params), params,
                    tri_size_human(b, sizeof b, (double)saved), saved, tri_size_human(c, sizeof c, (double)ws), ws);
            for (int k = 0; k < sp->n_chunks; k++) {
                size_t slot = tri_slot_bytes(&g, k, B, T, pol, sp->split, NULL);
                print_chunk(f, k, &sp->specs[k]);
                fprintf(f, ": %d slot%s x %s (%zu bytes)\n", sp->slots[k], sp->slots[k] == 1 ? "" : "s",
                        tri_size_human(a, sizeof a, (double)slot), slot);
            }
            tri_gpt_free(&g);
        }
    }
    for (int s = 0; s < pp; s++) tri_stage_plan_free(&sps[s]);
    free(sps);
    return ok ? 0 : -1;
}

/* The rank map: a summary line, then per rank its host, its tp/dp/pp
 * coordinates (when the layout is known) and its log. */
static void print_rank_map(FILE *f, const tri_launch_plan *p) {
    int uneven = 0;
    for (int h = 0; h < p->nhosts; h++) uneven |= p->ranks[h] != p->nproc;
    if (uneven) {
        fprintf(f, "tridentrun: %d rank%s =", p->world, p->world == 1 ? "" : "s");
        for (int h = 0; h < p->nhosts; h++) fprintf(f, "%s %d on %s", h ? " +" : "", p->ranks[h], p->hosts[h]);
    } else {
        fprintf(f, "tridentrun: %d rank%s = %d per host x %d host%s", p->world, p->world == 1 ? "" : "s", p->nproc,
                p->nhosts, p->nhosts == 1 ? "" : "s");
    }
    const int cp = p->have_layout && p->cp > 1; /* the cp column only with context parallelism */
    if (p->have_layout && cp)
        fprintf(f, "; parallel.tp %d x cp %d x pp %d x dp %d (rank order tp-cp-dp-pp)", p->tp, p->cp, p->pp, p->dp);
    else if (p->have_layout)
        fprintf(f, "; parallel.tp %d x pp %d x dp %d", p->tp, p->pp, p->dp);
    fprintf(f, "; %d core%s here, OMP_NUM_THREADS=%d%s\n", p->cores, p->cores == 1 ? "" : "s", p->threads,
            p->user_threads ? " (yours)" : "");
    if (cp)
        fprintf(f, "%6s  %-24s %4s %4s %4s %4s  %s\n", "rank", "host", "tp", "cp", "dp", "pp", "log");
    else
        fprintf(f, "%6s  %-24s %4s %4s %4s  %s\n", "rank", "host", "tp", "dp", "pp", "log");
    for (int r = 0; r < p->world; r++) {
        fprintf(f, "%6d  %-24s ", r, tri_launch_host_of(p, r));
        tri_mesh m;
        char err[256];
        int ok = p->have_layout &&
                 tri_mesh_init_cp(&m, p->world, r, p->tp, p->cp > 1 ? p->cp : 1, p->pp, p->dp, err, sizeof err) == 0;
        if (ok && cp)
            fprintf(f, "%4d %4d %4d %4d", m.tp_rank, m.cp_rank, m.dp_rank, m.pp_rank);
        else if (ok)
            fprintf(f, "%4d %4d %4d", m.tp_rank, m.dp_rank, m.pp_rank);
        else if (cp)
            fprintf(f, "%4s %4s %4s %4s", "-", "-", "-", "-");
        else
            fprintf(f, "%4s %4s %4s", "-", "-", "-");
        fprintf(f, "  %s/rank_%d.log\n", p->log_dir, r);
    }
}

int tri_launch_dry_run(FILE *f, const tri_launch_opts *o, const tri_launch_plan *p) {
    tri_launch_argv cmd;
    tri_launch_command_build(&cmd, o, p, 0);
    print_rank_map(f, p);
    int rc = p->train_cfg ? print_stages(f, p) : 0;
    fprintf(f, "mpirun command:\n");
    tri_launch_print_command(f, &cmd);
    if (o->max_restarts > 0) {
        tri_launch_argv_free(&cmd);
        tri_launch_command_build(&cmd, o, p, 1);
        fprintf(f, "on restart (up to %d):\n", o->max_restarts);
        tri_launch_print_command(f, &cmd);
    }
    tri_launch_argv_free(&cmd);
    return rc;
}
