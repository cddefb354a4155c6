#!/usr/bin/python3
"""TensorBoard's own reader against `trident train --set log.tensorboard=true`.

A small fp16 run (the first steps skip on a loss scale too high, validation
every 3 steps, a checkpoint every 5) is killed by the fault switch after
step 8, having logged steps 6-8 past its last checkpoint, and resumed: its
second event file starts with a SessionLog START at step 6. Then:

  1. Every event file read record by record: the length and both masked
     CRC-32Cs checked with TensorBoard's own masked_crc32c (its pure-Python
     CRC table, not Trident's), each record parsed by TensorBoard's event_pb2,
     the first being file_version "brain.Event:2"; TensorBoard's record reader
     (the one its loaders use, which raises DataLossError on a bad CRC) reads
     the same number of records.
  2. EventAccumulator (what `tensorboard --logdir` runs) loads log.dir, and
     its scalars must be exactly metrics.jsonl's numbers (every number and
     true/false of every line, under the tag its key documents): each tag's steps
     those of the lines that carry its key, taking a step's last line (the
     resumed run's), so the killed run's steps 6-8 must have been dropped;
     each value the float32 of the JSON number (exactly, for the %.17g ones;
     within half a unit of the last printed digit for the others). The
     same through plugin_event_accumulator, what `tensorboard
     --load_fast=false` serves (it takes a log dir's first START as the
     start, later ones as restarts; the default Rust loader keeps one point
     per step, the newest, whatever the records say).

The reader runs in a virtualenv under the build directory (BUILD/tb_venv,
/usr/bin/python3 -m venv --system-site-packages, `pip install tensorboard`,
made once and reused). Where it cannot be made, the test is skipped (exit
77) with a message saying why.

usage: test_tensorboard.py TRIDENT SOURCE_DIR BUILD_DIR
"""
import glob
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

SKIP = 77

# The tags of metrics.jsonl's keys, as documented (src/train/metrics.h): the
# known keys by a table, any other by its prefix, else train/<key>.
TAGS = {
    "loss": "train/loss",
    "val_loss": "val/loss",
    "lr": "train/lr",
    "grad_norm": "train/grad_norm",
    "loss_scale": "train/loss_scale",
    "skipped": "train/skipped",
    "skipped_steps": "train/skipped_steps",
    "ms": "perf/step_ms",
    "tokens_per_s": "perf/tokens_per_s",
    "mfu": "perf/mfu",
}
PREFIXES = [("val_", "val/"), ("ckpt_", "checkpoint/"), ("checkpoint_", "checkpoint/"), ("perf_", "perf/")]


def tag_of(key):
    if key in TAGS:
        return TAGS[key]
    if "/" in key:
        return key
    for prefix, group in PREFIXES:
        if key.startswith(prefix) and len(key) > len(prefix):
            return group + key[len(prefix):]
    return "train/" + key


def ensure_venv(build):
    venv = os.path.join(build, "tb_venv")
    py = os.path.join(venv, "bin", "python")
    ok = os.path.join(venv, ".tensorboard_ok")
    if os.path.exists(ok):
        return py
    try:
        if not os.path.exists(py):
            subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv], check=True,
                           capture_output=True)
        subprocess.run([py, "-m", "pip", "install", "-q", "tensorboard"], check=True, capture_output=True,
                       timeout=600)
        subprocess.run([py, "-c", "from tensorboard.backend.event_processing import event_accumulator"],
                       check=True, capture_output=True)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
        err = getattr(e, "stderr", b"") or b""
        print("tensorboard_reader tests skipped: cannot install tensorboard into %s: %s %s" %
              (venv, e, err.decode(errors="replace")[-300:].replace("\n", " ")))
        sys.exit(SKIP)
    open(ok, "w").close()
    return py


def write_llmc(path, tokens):
    header = struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253))
    with open(path, "wb") as f:
        f.write(header)
        f.write(struct.pack("<%dH" % len(tokens), *tokens))


def data_tokens(src):
    """Byte tokens of this repository's text (README, docs): real text, vocab 256."""
    text = b""
    for name in ["README.md"] + sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(src, "docs"))):
        if name.endswith(".md"):
            with open(os.path.join(src, name), "rb") as f:
                text += f.read()
    return list(text)


def train(trident, src, work, extra, expect):
    cmd = [trident, "train", os.path.join(src, "configs", "tiny-test.json"), "--threads", "2",
           "--set", "data.train=train.bin", "--set", "data.val=val.bin",
           "--set", "log.dir=run", "--set", "checkpoint.dir=run/ck", "--set", "log.tensorboard=true",
           "--set", "train.steps=12", "--set", "train.eval_every=3", "--set", "checkpoint.every=5",
           "--set", "train.precision=fp16", "--set", "train.loss_scale_init=8388608",
           "--set", "debug.fail_step=8", "--set", "debug.fail_rank=0",
           # a synchronous save: the injected _exit three steps after step 5's save
           # must find it committed (an asynchronous one may still be writing)
           "--set", "checkpoint.async=false"] + extra
    p = subprocess.run(["timeout", "300"] + cmd, capture_output=True, text=True, cwd=work)
    if p.returncode != expect:
        raise SystemExit("FAIL: exit %d, expected %d: %s\n%s%s" % (p.returncode, expect, " ".join(cmd), p.stdout,
                                                                     p.stderr))


# ---- run inside the venv: everything that imports tensorboard ---------------------------

READER = r'''
import json, struct, sys
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub import pywrap_tensorflow as pw
from tensorboard.compat.tensorflow_stub import errors
from tensorboard.backend.event_processing import event_accumulator as ea

out = {"files": {}, "scalars": {}}
for path in sys.argv[2:]:
    recs = []
    with open(path, "rb") as f:
        data = f.read()
    off = 0
    while off < len(data):
        head = data[off:off + 8]
        (n,) = struct.unpack("<Q", head)
        (crc_len,) = struct.unpack("<I", data[off + 8:off + 12])
        body = data[off + 12:off + 12 + n]
        (crc_body,) = struct.unpack("<I", data[off + 12 + n:off + 16 + n])
        if len(body) != n or crc_len != pw.masked_crc32c(head) or crc_body != pw.masked_crc32c(body):
            raise SystemExit("FAIL: %s: record at byte %d: length %d, CRCs %08x %08x, tensorboard computes %08x %08x"
                             % (path, off, n, crc_len, crc_body, pw.masked_crc32c(head), pw.masked_crc32c(body)))
        ev = event_pb2.Event.FromString(body)
        recs.append({"wall_time": ev.wall_time, "step": ev.step, "what": ev.WhichOneof("what"),
                     "file_version": ev.file_version,
                     "start": ev.HasField("session_log") and ev.session_log.status == event_pb2.SessionLog.START})
        off += 16 + n
    reader = pw.PyRecordReader_New(path, 0, None)
    k = 0
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            break
        k += 1
    out["files"][path] = {"records": recs, "reader_records": k}

acc = ea.EventAccumulator(sys.argv[1], size_guidance={ea.SCALARS: 0})
acc.Reload()
out["file_version"] = acc.file_version
for tag in acc.Tags()["scalars"]:
    out["scalars"][tag] = [(e.step, e.value, e.wall_time) for e in acc.Scalars(tag)]

# what `tensorboard --load_fast=false` serves: simple_value migrated to scalar tensors
from tensorboard.backend.event_processing import plugin_event_accumulator as pea
from tensorboard.util import tensor_util
acc = pea.EventAccumulator(sys.argv[1], size_guidance={pea.TENSORS: 0})
acc.Reload()
out["plugin_scalars"] = {}
for tag in acc.Tags()["tensors"]:
    out["plugin_scalars"][tag] = [(e.step, float(tensor_util.make_ndarray(e.tensor_proto)), e.wall_time)
                                  for e in acc.Tensors(tag)]
json.dump(out, sys.stdout)
'''


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def tolerance(text, value):
    """Half a unit of the last digit printed in metrics.jsonl, plus float32's rounding."""
    mant, _, exp = text.lower().partition("e")
    decimals = len(mant.partition(".")[2])
    unit = 10.0 ** (-decimals) * (10.0 ** int(exp) if exp else 1.0)
    return 0.5 * unit + 2.0 ** -23 * abs(value)


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    trident, src, build = (os.path.abspath(a) for a in sys.argv[1:])
    py = ensure_venv(build)
    work = tempfile.mkdtemp(prefix="tri_tensorboard_")
    try:
        toks = data_tokens(src)
        cut = len(toks) * 9 // 10
        write_llmc(os.path.join(work, "train.bin"), toks[:cut])
        write_llmc(os.path.join(work, "val.bin"), toks[cut:])
        train(trident, src, work, [], 3)  # the fault switch: exit 3 before step 9
        train(trident, src, work, ["--resume"], 0)
        logdir = os.path.join(work, "run")
        files = sorted(glob.glob(os.path.join(logdir, "events.out.tfevents.*")))
        if len(files) != 2:
            raise SystemExit("FAIL: %d event files in %s, expected one per start: %s" % (len(files), logdir, files))
        p = subprocess.run([py, "-c", READER, logdir] + files, capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit("FAIL: TensorBoard's reader: %s%s" % (p.stdout, p.stderr))
        got = json.loads(p.stdout)

        failures = []

        def check(ok, what):
            if not ok:
                failures.append(what)

        # 1. the records
        for i, path in enumerate(files):
            recs = got["files"][path]["records"]
            check(recs and recs[0]["what"] == "file_version" and recs[0]["file_version"] == "brain.Event:2",
                  "%s: first record %s" % (path, recs[:1]))
            check(got["files"][path]["reader_records"] == len(recs),
                  "%s: TensorBoard's record reader read %d records, the CRC walk %d" %
                  (path, got["files"][path]["reader_records"], len(recs)))
            starts = [r["step"] for r in recs if r["start"]]
            check(starts == ([1] if i == 0 else [6]), "%s: SessionLog START at steps %s" % (path, starts))
        check(got["file_version"] == 2.0, "EventAccumulator file_version %s" % got["file_version"])

        # 2. the scalars against metrics.jsonl: each (tag, step) from its last line
        want = {}
        killed_steps = set()
        lines = 0
        with open(os.path.join(logdir, "metrics.jsonl")) as f:
            for line in f:
                lines += 1
                d = json.loads(line, parse_float=lambda s: (float(s), s), parse_int=lambda s: (int(s), s))
                step = d.pop("step")[0]
                for key, v in d.items():
                    if v is True or v is False:
                        v = (1.0 if v else 0.0, "1")
                    if not isinstance(v, tuple):
                        continue  # an object (mem), a list or a string: no scalar
                    want.setdefault(tag_of(key), {})[step] = v
        with open(os.path.join(logdir, "metrics.jsonl")) as f:
            seen = set()
            for line in f:
                d = json.loads(line)
                for key in d:
                    if key != "step" and not isinstance(d[key], dict) and (d["step"], key) in seen:
                        killed_steps.add(d["step"])
                    seen.add((d["step"], key))
        check({6, 7, 8} <= killed_steps, "metrics.jsonl repeats steps %s, expected the killed run's 6-8 among them"
              % sorted(killed_steps))
        checked = 0
        for loader in ("scalars", "plugin_scalars"):
            have = got[loader]
            check(set(have) == set(want), "%s tags: TensorBoard %s, metrics.jsonl %s" %
                  (loader, sorted(have), sorted(want)))
            for tag in sorted(want):
                series = have.get(tag, [])
                steps = [s for s, _, _ in series]
                check(steps == sorted(want[tag]), "%s %s: TensorBoard's steps %s, metrics.jsonl's %s" %
                      (loader, tag, steps, sorted(want[tag])))
                for step, value, _ in series:
                    if step not in want[tag]:
                        continue
                    x, text = want[tag][step]
                    if len(text.replace("-", "").replace(".", "").lstrip("0")) >= 15:
                        ok = value == f32(x)  # %.17g: the float32 of the same double
                    else:
                        ok = abs(value - x) <= tolerance(text, x)
                    check(ok, "%s %s step %d: TensorBoard %r, metrics.jsonl %s" % (loader, tag, step, value, text))
                    checked += 1
        skipped = len(want.get("train/skipped", {}))
        check(skipped > 0, "no step skipped on a loss scale of 2^23: the run no longer shows train/skipped "
              "(raise train.loss_scale_init in this test)")
        check("val/loss" in want and "train/loss" in want, "no val/loss or train/loss")
        if failures:
            print("\n".join("FAIL: " + f for f in failures))
            sys.exit(1)
        print("tensorboard_reader: %d scalars of %d tags from 2 event files (%d metrics.jsonl lines, %d skipped "
              "steps, the killed run's steps 6-8 dropped) read back by TensorBoard's EventAccumulator and its plugin loader" %
              (checked, len(want), lines, skipped))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
