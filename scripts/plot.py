#!/usr/bin/python3
"""Draws Trident's training metrics and sweep summaries as PNGs.

usage: scripts/plot.py [--out DIR] [--tokens-per-step N] [--flops-per-token F]
                       [--fit frontier|final|none] [--loss auto|train|val] INPUT...

INPUT is a run directory (holding metrics.jsonl), a metrics.jsonl file, a sweep's
summary.jsonl, or a sweep's output directory (holding summary.jsonl). It writes,
into --out (default: the first input's directory):

  loss_vs_step.png      training loss (lines) and validation loss (markers) per run
  loss_vs_tokens.png    the same against tokens seen
  loss_vs_compute.png   loss against training FLOPs (tri_gpt_flops_per_token x tokens),
                        with the fitted law L(C) = a C^-b + c, when there are runs of
                        at least two model sizes; the fit is printed and saved in fit.json
  throughput_vs_ranks.png  tokens/s and MFU against ranks, one line per layout family,
                        when a summary has runs on more than one rank count
  step_time_planned.png measured against planned step time, when a summary has planned_step_s

The fit (--fit frontier, the default) uses the compute-efficient frontier: over every
logged point of every run, the points whose loss is below that of every point with
less compute; --fit final uses each run's final loss. Parameters come from nonlinear
least squares (numpy only: variable projection over b, then Gauss-Newton with
Levenberg-Marquardt damping), with standard errors from the Jacobian at the
solution, sqrt(diag(s^2 (J^T J)^-1)), s^2 = RSS / (n - 3).

Tokens per step for a bare run directory come from --tokens-per-step, else from the
run's point.json (written by `trident sweep`), else from tokens_per_s x ms.
Exit codes: 0 ok, 2 bad input, 3 matplotlib missing (install python3-matplotlib).
"""
import argparse
import json
import math
import os
import sys

import numpy as np


# --------------------------------------------------------------------------
# The fit: L(C) = a C^-b + c

def _solve_ac(x, y, b):
    """For a fixed b, the least-squares a and c (L is linear in them), and the RSS."""
    A = np.stack([x ** (-b), np.ones_like(x)], axis=1)
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    r = A @ coef - y
    return coef[0], coef[1], float(r @ r)


def _jacobian(x, a, b):
    xb = x ** (-b)
    return np.stack([xb, -a * xb * np.log(x), np.ones_like(x)], axis=1)


def fit_power_law(C, L, b_max=3.0):
    """Fits L = a C^-b + c by nonlinear least squares.

    Returns a dict: a, b, c (C in the units given), their standard errors a_se, b_se,
    c_se, the covariance of (a, b, c), C0 (the geometric mean of C) with a0 = a C0^-b
    and a0_se (the law written as a0 (C/C0)^-b + c, whose a0 is far less correlated
    with b), rss, rms, n. Needs at least 3 points (4 for standard errors)."""
    C = np.asarray(C, dtype=np.float64)
    L = np.asarray(L, dtype=np.float64)
    if C.shape != L.shape or C.ndim != 1:
        raise ValueError("C and L must be 1-D arrays of the same length")
    if len(C) < 3:
        raise ValueError("a fit of a, b, c needs at least 3 points, got %d" % len(C))
    if not (np.all(np.isfinite(C)) and np.all(np.isfinite(L)) and np.all(C > 0)):
        raise ValueError("C must be finite and > 0, L finite")
    C0 = float(np.exp(np.mean(np.log(C))))
    x = C / C0  # a well-conditioned scale: x^-b near 1
    # variable projection: the best (a, c) for each b on a grid, then refine b
    grid = np.concatenate([np.linspace(1e-4, 0.05, 50), np.linspace(0.05, b_max, 300)[1:]])
    rss = np.array([_solve_ac(x, L, b)[2] for b in grid])
    b = float(grid[int(np.argmin(rss))])
    a, c, best = _solve_ac(x, L, b)
    p = np.array([a, b, c])
    # Levenberg-Marquardt on all three parameters
    lam = 1e-3
    for _ in range(200):
        J = _jacobian(x, p[0], p[1])
        r = p[0] * x ** (-p[1]) + p[2] - L
        g = J.T @ r
        H = J.T @ J
        improved = False
        while lam < 1e12:
            step = np.linalg.solve(H + lam * np.diag(np.diag(H) + 1e-300), -g)
            q = p + step
            rq = q[0] * x ** (-q[1]) + q[2] - L
            new = float(rq @ rq)
            if np.isfinite(new) and new <= best:
                improved = best - new > 1e-15 * max(best, 1e-300) or new == 0.0
                p, best, lam = q, new, max(lam / 10, 1e-12)
                break
            lam *= 10
        if not improved or np.max(np.abs(step) / (np.abs(p) + 1e-12)) < 1e-13:
            break
    a0, b, c = (float(v) for v in p)
    n = len(C)
    J = _jacobian(x, a0, b)
    cov0 = np.full((3, 3), np.nan)
    if n > 3:
        s2 = best / (n - 3)
        try:
            cov0 = s2 * np.linalg.inv(J.T @ J)
        except np.linalg.LinAlgError:
            pass
    # back to C's own units: a = a0 C0^b (delta method for its variance)
    a = a0 * C0 ** b
    G = np.array([[C0 ** b, a0 * C0 ** b * math.log(C0), 0.0], [0, 1, 0], [0, 0, 1]])
    cov = G @ cov0 @ G.T
    se = np.sqrt(np.maximum(np.diag(cov), 0))
    return {
        "a": a, "b": b, "c": c,
        "a_se": float(se[0]), "b_se": float(se[1]), "c_se": float(se[2]),
        "cov": cov.tolist(),
        "C0": C0, "a0": a0, "a0_se": float(math.sqrt(max(cov0[0, 0], 0))) if n > 3 else float("nan"),
        "rss": best, "rms": math.sqrt(best / n), "n": n,
    }


def frontier(points):
    """The compute-efficient frontier of (C, L) points: those whose L is below that of
    every point with less or equal compute, in order of C."""
    out, best = [], math.inf
    for C, L in sorted(points):
        if L < best:
            out.append((C, L))
            best = L
    return out


# --------------------------------------------------------------------------
# Reading runs

class Run:
    def __init__(self, label, path):
        self.label = label
        self.path = path  # metrics.jsonl
        self.steps, self.loss = [], []
        self.val_steps, self.val = [], []
        self.tokens_per_step = None
        self.flops_per_token = None
        self.summary = None  # its summary line, if it came from a sweep

    def read(self):
        by_step, val_by_step, tps_est = {}, {}, []
        with open(self.path) as f:
            for ln in f:
                try:
                    o = json.loads(ln)
                except ValueError:
                    continue  # a line cut by a crash
                s = o.get("step")
                if s is None:
                    continue
                if isinstance(o.get("loss"), (int, float)):
                    by_step[s] = o["loss"]  # a resumed run repeats steps: the last wins
                    if o.get("tokens_per_s") and o.get("ms"):
                        tps_est.append(o["tokens_per_s"] * o["ms"] / 1e3)
                if isinstance(o.get("val_loss"), (int, float)):
                    val_by_step[s] = o["val_loss"]
        self.steps = sorted(by_step)
        self.loss = [by_step[s] for s in self.steps]
        self.val_steps = sorted(val_by_step)
        self.val = [val_by_step[s] for s in self.val_steps]
        if self.tokens_per_step is None and tps_est:
            self.tokens_per_step = float(round(np.median(tps_est)))
        return self


def read_point_json(run_dir, run):
    p = os.path.join(run_dir, "point.json")
    if os.path.isfile(p):
        with open(p) as f:
            o = json.load(f)
        run.tokens_per_step = run.tokens_per_step or o.get("tokens_per_step")
        run.flops_per_token = run.flops_per_token or o.get("flops_per_token")


def load_inputs(inputs, args):
    """-> (runs, summary rows)"""
    runs, rows = [], []
    for inp in inputs:
        if os.path.isdir(inp) and os.path.isfile(os.path.join(inp, "summary.jsonl")):
            inp = os.path.join(inp, "summary.jsonl")
        if os.path.isdir(inp):
            m = os.path.join(inp, "metrics.jsonl")
            if not os.path.isfile(m):
                raise SystemExit("plot.py: %s: no metrics.jsonl or summary.jsonl in it" % inp)
            r = Run(os.path.basename(os.path.normpath(inp)), m)
            r.tokens_per_step, r.flops_per_token = args.tokens_per_step, args.flops_per_token
            read_point_json(inp, r)
            runs.append(r.read())
        elif os.path.basename(inp).startswith("summary") or inp.endswith("summary.jsonl"):
            base = os.path.dirname(inp)
            with open(inp) as f:
                for i, ln in enumerate(f):
                    if not ln.strip():
                        continue
                    try:
                        row = json.loads(ln)
                    except ValueError as e:
                        raise SystemExit("plot.py: %s: line %d: %s" % (inp, i + 1, e))
                    rows.append(row)
                    d = row.get("run_dir", "")
                    cands = [d, os.path.join(base, os.path.basename(d))]
                    m = next((os.path.join(c, "metrics.jsonl") for c in cands
                              if c and os.path.isfile(os.path.join(c, "metrics.jsonl"))), None)
                    if m is None:
                        continue  # a point that has not run
                    r = Run(row.get("point", d), m)
                    r.tokens_per_step = row.get("tokens_per_step")
                    r.flops_per_token = row.get("flops_per_token")
                    r.summary = row
                    runs.append(r.read())
        elif os.path.isfile(inp):
            r = Run(os.path.basename(os.path.dirname(os.path.abspath(inp))), inp)
            r.tokens_per_step, r.flops_per_token = args.tokens_per_step, args.flops_per_token
            read_point_json(os.path.dirname(os.path.abspath(inp)), r)
            runs.append(r.read())
        else:
            raise SystemExit("plot.py: %s: no such file or directory" % inp)
    return runs, rows


# --------------------------------------------------------------------------
# Figures

def save(fig, out, name, written):
    path = os.path.join(out, name)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    written.append(path)


def plot_curves(plt, runs, out, written):
    for xname, fname in (("step", "loss_vs_step.png"), ("tokens", "loss_vs_tokens.png")):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        drawn = 0
        for i, r in enumerate(runs):
            scale = 1.0
            if xname == "tokens":
                if not r.tokens_per_step:
                    continue
                scale = r.tokens_per_step
            color = "C%d" % (i % 10)
            if r.steps:
                ax.plot(np.array(r.steps) * scale, r.loss, color=color, lw=1.2, label=r.label)
                drawn += 1
            if r.val_steps:
                ax.plot(np.array(r.val_steps) * scale, r.val, "o--", color=color, ms=4, lw=0.8,
                        label=None if r.steps else r.label)
        if not drawn:
            plt.close(fig)
            continue
        ax.set_xlabel("step" if xname == "step" else "tokens")
        ax.set_ylabel("loss (lines: train, markers: validation)")
        if xname == "tokens":
            ax.set_xscale("log")
        ax.grid(alpha=0.3)
        if len(runs) <= 12:
            ax.legend(fontsize=7)
        save(fig, out, fname, written)
        plt.close(fig)


def compute_points(r, which):
    """(C, L) over a run's logged points: validation or training loss."""
    fpt, tps = r.flops_per_token, r.tokens_per_step
    if not fpt or not tps:
        return []
    steps, loss = (r.val_steps, r.val) if which == "val" else (r.steps, r.loss)
    return [(fpt * tps * s, l) for s, l in zip(steps, loss) if s > 0 and math.isfinite(l)]


def fmt_fit(fit):
    return ("  a = %.6g +- %.2g\n  b = %.6g +- %.2g\n  c = %.6g +- %.2g\n"
            "  (the same law as a0 * (C / %.4g)^-b + c: a0 = %.6g +- %.2g)\n  residual rms = %.3g over %d points"
            % (fit["a"], fit["a_se"], fit["b"], fit["b_se"], fit["c"], fit["c_se"], fit["C0"], fit["a0"],
               fit["a0_se"], fit["rms"], fit["n"]))


def plot_compute(plt, runs, args, out, written):
    usable = [r for r in runs if r.flops_per_token and r.tokens_per_step]
    sizes = {r.flops_per_token for r in usable}
    if len(sizes) < 2:
        return None
    which = args.loss
    if which == "auto":
        which = "val" if all(len(r.val) >= 3 for r in usable) else "train"
    fig, ax = plt.subplots(figsize=(7, 4.5))
    allpts, finals = [], []
    for i, r in enumerate(sorted(usable, key=lambda r: r.flops_per_token)):
        pts = compute_points(r, which)
        if not pts:
            continue
        allpts += pts
        finals.append(pts[-1])
        label = r.label
        if r.summary and r.summary.get("params"):
            label = "%s (%.3g M params)" % (r.label, r.summary["params"] / 1e6)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "-", color="C%d" % (i % 10), lw=1, alpha=0.8,
                label=label)
    fit = None
    if args.fit != "none":
        pts = frontier(allpts) if args.fit == "frontier" else sorted(finals)
        if len(pts) >= 4:
            C = np.array([p[0] for p in pts])
            L = np.array([p[1] for p in pts])
            fit = fit_power_law(C, L)
            fit.update({"mode": args.fit, "loss": which, "runs": len(usable)})
            ax.plot(C, L, "k.", ms=4, label="fitted points (%s)" % args.fit)
            cc = np.geomspace(min(p[0] for p in allpts), max(p[0] for p in allpts), 200)
            ax.plot(cc, fit["a"] * cc ** (-fit["b"]) + fit["c"], "k--", lw=1.5,
                    label="L = %.3g C^-%.3f + %.3f" % (fit["a"], fit["b"], fit["c"]))
            print("fit L(C) = a * C^-b + c, C in FLOPs (%d points: the %s of %d runs, %s loss):"
                  % (fit["n"], "frontier" if args.fit == "frontier" else "final losses", len(usable), which))
            print(fmt_fit(fit))
            if fit["b"] < 1e-3 or fit["b"] > 2.9 or not math.isfinite(fit["b_se"]) or fit["b_se"] > abs(fit["b"]):
                print("plot.py: warning: the fit is poorly determined (b at the edge of [0, 3] or its standard "
                      "error above its value): the runs may be too short, or too close in size, for a law")
            with open(os.path.join(out, "fit.json"), "w") as f:
                json.dump(fit, f, indent=1)
            written.append(os.path.join(out, "fit.json"))
        else:
            print("plot.py: %d points for the fit, it needs 4: no fitted law" % len(pts))
    ax.set_xscale("log")
    ax.set_xlabel("training compute C (FLOPs, 6N-style: flops_per_token x tokens)")
    ax.set_ylabel("%s loss" % ("validation" if which == "val" else "training"))
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    save(fig, out, "loss_vs_compute.png", written)
    plt.close(fig)
    return fit


def layout_family(row):
    parts = [k for k in ("tp", "pp", "dp") if int(row.get(k, 1) or 1) > 1]
    return "+".join(parts) if parts else "1 rank"


def plot_throughput(plt, rows, out, written):
    rows = [r for r in rows if r.get("tokens_per_s") and r.get("ranks")]
    if len({r["ranks"] for r in rows}) < 2:
        return
    fams = {}
    for r in rows:
        fams.setdefault(layout_family(r), []).append(r)
    single = fams.pop("1 rank", [])
    fig, axs = plt.subplots(1, 2, figsize=(10, 4))
    for i, (fam, rs) in enumerate(sorted(fams.items())):
        rs = sorted(single + rs, key=lambda r: r["ranks"])
        for ax, key in zip(axs, ("tokens_per_s", "mfu")):
            pts = [(r["ranks"], r[key]) for r in rs if r.get(key) is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color="C%d" % i, label=fam)
    if not fams:
        for ax, key in zip(axs, ("tokens_per_s", "mfu")):
            ax.plot([r["ranks"] for r in single], [r[key] for r in single], "o")
    for ax, name in zip(axs, ("tokens/s", "MFU")):
        ax.set_xlabel("ranks")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    save(fig, out, "throughput_vs_ranks.png", written)
    plt.close(fig)


def plot_planned(plt, rows, out, written):
    rows = [r for r in rows if r.get("planned_step_s") and r.get("step_ms")]
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(5.5, 5))
    meas = [r["step_ms"] / 1e3 for r in rows]
    plan = [r["planned_step_s"] for r in rows]
    ax.loglog(plan, meas, "o")
    for r, x, y in zip(rows, plan, meas):
        ax.annotate(r.get("point", ""), (x, y), fontsize=6)
    lo, hi = min(meas + plan) / 1.5, max(meas + plan) * 1.5
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="measured = planned")
    ax.set_xlabel("planned step time (s)")
    ax.set_ylabel("measured step time (s)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    save(fig, out, "step_time_planned.png", written)
    plt.close(fig)


def main(argv):
    ap = argparse.ArgumentParser(description="Trident metrics and sweep summaries as PNGs")
    ap.add_argument("inputs", nargs="+", metavar="INPUT")
    ap.add_argument("--out", help="directory of the PNGs (default: the first input's directory)")
    ap.add_argument("--tokens-per-step", type=float, help="global_batch x seq_len of a bare run directory")
    ap.add_argument("--flops-per-token", type=float, help="tri_gpt_flops_per_token of a bare run directory")
    ap.add_argument("--fit", choices=("frontier", "final", "none"), default="frontier")
    ap.add_argument("--loss", choices=("auto", "train", "val"), default="auto",
                    help="the loss of the compute plot (auto: validation if every run has 3 or more)")
    args = ap.parse_args(argv)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print("plot.py: matplotlib is missing (%s): install python3-matplotlib "
              "(scripts/install_deps.sh)" % e, file=sys.stderr)
        return 3
    try:
        runs, rows = load_inputs(args.inputs, args)
    except (OSError, ValueError) as e:
        print("plot.py: %s" % e, file=sys.stderr)
        return 2
    first = args.inputs[0]
    out = args.out or (first if os.path.isdir(first) else os.path.dirname(os.path.abspath(first)))
    os.makedirs(out, exist_ok=True)
    written = []
    plot_curves(plt, runs, out, written)
    plot_compute(plt, runs, args, out, written)
    plot_throughput(plt, rows, out, written)
    plot_planned(plt, rows, out, written)
    for p in written:
        print("plot.py: wrote %s" % p)
    if not written:
        print("plot.py: nothing to draw (no metrics with a loss)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
