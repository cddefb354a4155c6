#!/usr/bin/python3
"""Tests of scripts/plot.py (run by CTest as `plot`):

- the fit of L(C) = a C^-b + c gives back known a, b, c from exact data (relative
  error < 1e-6) and from noisy data (within 4 standard errors), and its standard
  errors match the spread of the estimates over many noisy draws (within 30%);
- the script, run on a generated sweep (summary.jsonl + run directories whose
  losses follow a known law), prints the law's parameters (relative error < 1e-4)
  and writes non-empty PNGs: loss vs step, vs tokens, vs compute, throughput and
  MFU vs ranks, measured vs planned step time.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "plot.py")
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import plot  # noqa: E402

FAILS = []


def check(cond, msg):
    if not cond:
        FAILS.append(msg)
        print("FAIL: " + msg)


def test_fit_exact():
    C = np.geomspace(1e10, 1e15, 40)
    for a, b, c in ((50.0, 0.12, 1.8), (3e3, 0.3, 0.5), (8.0, 0.05, 3.0)):
        f = plot.fit_power_law(C, a * C ** -b + c)
        for name, want in (("a", a), ("b", b), ("c", c)):
            check(abs(f[name] - want) <= 1e-6 * abs(want), "exact %s: got %.10g, want %.10g" % (name, f[name], want))


def test_fit_noisy_and_its_standard_errors():
    rng = np.random.default_rng(11)
    C = np.geomspace(1e11, 1e15, 30)
    a, b, c, sigma = 200.0, 0.15, 2.0, 0.01
    L0 = a * C ** -b + c
    est, ses = [], []
    for _ in range(150):
        f = plot.fit_power_law(C, L0 + rng.normal(0, sigma, C.size))
        est.append((f["b"], f["c"]))
        ses.append((f["b_se"], f["c_se"]))
    est, ses = np.array(est), np.array(ses)
    f = plot.fit_power_law(C, L0 + rng.normal(0, sigma, C.size))
    for name, want in (("a", a), ("b", b), ("c", c)):
        err = abs(f[name] - want)
        check(err <= 4 * f[name + "_se"], "noisy %s: %.6g is %.3g away, %.3g standard errors"
              % (name, f[name], err, err / f[name + "_se"]))
    for i, name in enumerate(("b", "c")):
        spread, mean_se = est[:, i].std(), ses[:, i].mean()
        check(abs(mean_se / spread - 1) < 0.3, "%s: standard error %.3g vs the estimates' spread %.3g"
              % (name, mean_se, spread))


def write_run(d, steps, fpt, tps, law, ms, mfu):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        f.write('{"step": 1, "mem": {"params": 1}}\n')
        for s in range(1, steps + 1):
            L = law(fpt * tps * s)
            f.write(json.dumps({"step": s, "loss": L + 0.05, "lr": 1e-3, "grad_norm": 1.0, "ms": ms,
                                "tokens_per_s": tps / ms * 1e3, "mfu": mfu}) + "\n")
            if s % 10 == 0:
                f.write(json.dumps({"step": s, "val_loss": L}) + "\n")


def test_script_on_a_sweep():
    a, b, c = 40.0, 0.1, 1.5

    def law(C):
        return a * C ** -b + c

    tmp = tempfile.mkdtemp(prefix="tri_plot_")
    out = os.path.join(tmp, "sweep")
    rows = []
    # four model sizes (one rank), then a dp and a tp family for the throughput plot
    layouts = [(1, 1, 1)] * 4 + [(1, 1, 2), (1, 1, 4), (2, 1, 1), (4, 1, 1)]
    for i, (tp, pp, dp) in enumerate(layouts):
        fpt = 1e6 * 3 ** (i % 4)  # flops per token
        tps = 2048
        name = "p%d" % i
        rd = os.path.join(out, name)
        ranks = tp * pp * dp
        write_run(rd, 100, fpt, tps, law, ms=50.0 / ranks ** 0.8, mfu=0.4 / ranks ** 0.1)
        rows.append({"point": name, "run_dir": rd, "status": "ok", "params": fpt / 6, "flops_per_token": fpt,
                     "tokens_per_step": tps, "steps": 100, "tokens": 100 * tps, "flops": fpt * 100 * tps,
                     "step_ms": 50.0 / ranks ** 0.8, "tokens_per_s": tps / (50.0 / ranks ** 0.8) * 1e3,
                     "mfu": 0.4 / ranks ** 0.1, "tp": tp, "pp": pp, "dp": dp, "ranks": ranks,
                     "planned_step_s": 0.05 / ranks ** 0.75})
    with open(os.path.join(out, "summary.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    p = subprocess.run([sys.executable, SCRIPT, out], capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, "plot.py exited %d: %s %s" % (p.returncode, p.stdout, p.stderr))
    got = {}
    for name in ("a", "b", "c"):
        m = re.search(r"^\s+%s = ([-+0-9.eE]+) \+- ([-+0-9.eEnaif]+)" % name, p.stdout, re.M)
        check(m is not None, "no '%s = ... +- ...' line in: %s" % (name, p.stdout))
        if m:
            got[name] = float(m.group(1))
    for name, want in (("a", a), ("b", b), ("c", c)):
        if name in got:
            check(abs(got[name] - want) <= 1e-4 * abs(want), "printed %s = %.8g, the law's is %.8g"
                  % (name, got[name], want))
    with open(os.path.join(out, "fit.json")) as f:
        fj = json.load(f)
    check(fj["loss"] == "val", "the fit used %s loss, the runs have validation losses" % fj["loss"])
    for png in ("loss_vs_step.png", "loss_vs_tokens.png", "loss_vs_compute.png", "throughput_vs_ranks.png",
                "step_time_planned.png"):
        path = os.path.join(out, png)
        ok = os.path.isfile(path) and os.path.getsize(path) > 1000
        check(ok, "%s missing or empty" % path)
        if ok:
            with open(path, "rb") as f:
                check(f.read(8) == b"\x89PNG\r\n\x1a\n", "%s is not a PNG" % path)
    # a bare run directory: tokens per step from the option
    p = subprocess.run([sys.executable, SCRIPT, "--tokens-per-step", "2048", "--out", os.path.join(tmp, "one"),
                        os.path.join(out, "p0")], capture_output=True, text=True, timeout=120)
    check(p.returncode == 0 and os.path.getsize(os.path.join(tmp, "one", "loss_vs_tokens.png")) > 1000,
          "bare run directory: %s %s" % (p.stdout, p.stderr))
    # bad input: exit 2 with the path named
    p = subprocess.run([sys.executable, SCRIPT, os.path.join(tmp, "nope")], capture_output=True, text=True)
    check(p.returncode != 0 and "nope" in p.stderr + p.stdout, "missing input: %d %s" % (p.returncode, p.stderr))
    subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    test_fit_exact()
    test_fit_noisy_and_its_standard_errors()
    test_script_on_a_sweep()
    if FAILS:
        print("%d check(s) failed" % len(FAILS))
        sys.exit(1)
    print("test_plot: all checks passed")
