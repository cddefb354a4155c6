#!/usr/bin/python3
"""The house rules of docs/architecture.md, checked on the source tree (and,
with --build DIR, on the built libraries):

  includes   a product file (src kernels parallel model data) includes nothing
             under tests/, and each folder only what its layer may use
             (the table LAYERS below, the rule of docs/architecture.md)
  cycles     no two modules include each other, directly or around a circle
             (a module: a .c and its .h, by path without the extension), and
             no module calls into a module that calls back (with --build: the
             defined and undefined symbols of each object file)
  size       no product file over 1,000 lines
  messages   no fprintf(stderr, ...) outside src/base (errors: base/err.h,
             notes and warnings: base/log.h); the exceptions are listed below
  env        the environment variables of our own are spelled TRIDENT_*
  state      (with --build) no writable object of static storage in a product
             object file (.data, .bss, thread-local), other than the signal
             flags listed below

Prints one line per violation and exits 1 if there is any, 0 otherwise.
CTest runs it on the build it tests (`house`)."""
import argparse, os, re, subprocess, sys
from collections import defaultdict

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
PRODUCT = ('src', 'kernels', 'parallel', 'model', 'data')
EXTS = ('.c', '.h', '.cu', '.cuh')

# Which folders each folder's files may include (its own always). The order
# of the design: base < kernels < parallel < model, data beside them, the
# programs' wings of src/ on top; src/cli (the commands) may use every wing.
LOWER = ['src/base', 'kernels']
LAYERS = {
    'src/base': [],
    'kernels': ['src/base'],
    'parallel': LOWER,
    'model': LOWER + ['parallel'],
    'data': ['src/base'],
    'src/config': LOWER + ['parallel', 'model'],
    'src/plan': LOWER + ['parallel', 'model', 'data', 'src/config'],
    'src/train': LOWER + ['parallel', 'model', 'data', 'src/config', 'src/plan'],
    'src/sweep': LOWER + ['parallel', 'model', 'data', 'src/config', 'src/train', 'src/plan'],
    'src/launch': LOWER + ['parallel', 'model', 'data', 'src/config', 'src/plan'],
    'src/cli': LOWER + ['parallel', 'model', 'data', 'src/config', 'src/plan', 'src/train', 'src/sweep',
                        'src/launch'],
}

# fprintf(stderr, ...) that stays, with the reason.
STDERR_OK = {
    'src/base/err.c': 'the one place errors are printed',
    'src/base/log.c': 'the one place notes and warnings are printed',
    'src/base/status.c': 'the one place progress lines and closing summaries are printed',
    'kernels/cuda/common.cuh': 'device-side report of a failed check in a kernel (printf on the GPU)',
}

# Writable static storage that stays, with the reason (file: symbols).
STATE_OK = {
    'src/base/stop.c': {'g_stop'},  # the stop flag a signal handler sets
    # the signal a sweep was stopped by, and the running point's pid that the
    # handler passes SIGINT/SIGTERM on to (set around its wait)
    'src/sweep/run.c': {'g_signal', 'g_child'},
    # tridentrun's signal handler: the signal seen, how many, the child it
    # passes them on to, and whether the first goes on as SIGUSR1
    'src/launch/sigfwd.c': {'g_signal', 'g_requests', 'g_child_pid', 'g_graceful'},
    # the SIGBUS guard of tri_dataset_read: the jump buffer of the read in
    # progress (per thread), the handler it chains to and its one-time
    # install; a signal handler can reach nothing passed in
    'data/dataset.c': {'guard_jmp', 'prev_sigbus', 'guard_once'},
}

# What nvcc writes into every .cu's host object (launch stubs, the fat binary's handle)
NVCC_GENERATED = re.compile(r'__device_stub__|__cudaFatCubinHandle|__nv_|__cudaPrelinkedFatbins|__fatDeviceText')

INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def product_files():
    out = []
    for top in PRODUCT:
        for d, _, fs in os.walk(os.path.join(ROOT, top)):
            for f in fs:
                if f.endswith(EXTS):
                    out.append(os.path.relpath(os.path.join(d, f), ROOT))
    return sorted(out)


def folder_of(path):
    parts = path.split('/')
    if parts[0] == 'src' and len(parts) > 2:
        return 'src/' + parts[1]
    return parts[0]


def resolve(inc, frm):
    for base in (os.path.dirname(frm), '', 'src'):
        p = os.path.normpath(os.path.join(base, inc))
        if os.path.isfile(os.path.join(ROOT, p)):
            return p
    return None


def strip_comments(text):
    text = re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group(0).count('\n'), text, flags=re.S)
    return re.sub(r'//[^\n]*', '', text)


def check_includes(files, bad):
    graph = defaultdict(set)
    for f in files:
        text = open(os.path.join(ROOT, f), encoding='utf-8', errors='replace').read()
        for inc in INC.findall(strip_comments(text)):
            if inc.startswith('tests/') or '/tests/' in inc:
                bad.append(f'{f}: includes {inc}: product code never includes tests/')
                continue
            r = resolve(inc, f)
            if r is None:
                continue  # a generated or system header, or one the build supplies
            if r.startswith('tests/'):
                bad.append(f'{f}: includes {inc} ({r}): product code never includes tests/')
                continue
            src, dst = folder_of(f), folder_of(r)
            if src != dst and src in LAYERS and dst not in LAYERS[src]:
                bad.append(f'{f}: includes {r}: {src}/ may not use {dst}/ (docs/architecture.md)')
            a, b = os.path.splitext(f)[0], os.path.splitext(r)[0]
            if a != b:
                graph[a].add(b)
    return graph


def cycles(graph):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, on, stack, out, n = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def check_text(files, bad):
    for f in files:
        text = open(os.path.join(ROOT, f), encoding='utf-8', errors='replace').read()
        lines = text.count('\n')
        if lines > 1000:
            bad.append(f'{f}: {lines} lines, over 1,000')
        code = strip_comments(text)
        if f not in STDERR_OK:
            for m in re.finditer(r'fprintf\s*\(\s*stderr', code):
                line = code.count('\n', 0, m.start()) + 1
                bad.append(f'{f}:{line}: fprintf(stderr, ...): report through base/err.h or base/log.h')
        for m in re.finditer(r'getenv\s*\(\s*"(TRI_[A-Z0-9_]*)"', code):
            line = code.count('\n', 0, m.start()) + 1
            bad.append(f'{f}:{line}: environment variable {m.group(1)}: ours are spelled TRIDENT_*')


def objects(build):
    """(target, source path relative to ROOT, object path) of every object
    file CMake built for the top-level targets of `build`."""
    out = []
    top = os.path.join(build, 'CMakeFiles')
    for d, _, fs in os.walk(top):
        for fn in fs:
            if not fn.endswith('.o'):
                continue
            p = os.path.join(d, fn)
            # CMakeFiles/<target>.dir/<source path relative to ROOT>.o
            m = re.match(r'([^/]+)\.dir/(.*)\.o$', os.path.relpath(p, top))
            if m and not m.group(2).startswith('__/'):
                out.append((m.group(1), m.group(2), p))
    return out


def check_objects(build, bad):
    sym_def, sym_use = defaultdict(set), defaultdict(set)
    seen = set()
    for target, src, path in objects(build):
        if not src.startswith(PRODUCT) or not target.startswith(('tri_', 'trident', 'tridentrun')):
            continue
        if target.startswith(('tri_kernels_', 'tri_cuemu', 'tri_gpu', 'tri_fuzz', 'tri_tests', 'tri_fault',
                              'tri_sanitizer')):
            continue
        if src in seen or not os.path.isfile(os.path.join(ROOT, src)):
            continue  # (an object left in the build by a file since moved)
        seen.add(src)
        dump = subprocess.run(['objdump', '-t', path], capture_output=True, text=True).stdout
        for line in dump.splitlines():
            m = re.match(r'^[0-9a-f]+\s+(\S)\s+(\S*)\s+(\*?[\w.]+)\s+[0-9a-f]+\s+(\S+)$', line)
            if not m:
                continue
            bind, kind, sect, name = m.group(1), m.group(2), m.group(3), m.group(4)
            if 'O' in kind and sect in ('.data', '.bss', '.tdata', '.tbss') or \
                    ('O' in kind and sect.startswith(('.data.', '.bss.', '.tbss.', '.tdata.')) and
                     not sect.startswith('.data.rel.ro')):
                base = name.split('.')[0]
                if base in STATE_OK.get(src, ()) or NVCC_GENERATED.search(name):
                    continue
                bad.append(f'{src}: {name} in {sect}: writable file-scope state (pass it in a context struct)')
        nm = subprocess.run(['nm', '--defined-only', '-g', path], capture_output=True, text=True).stdout
        for line in nm.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in 'TDBR':
                sym_def[parts[2]].add(os.path.splitext(src)[0])
        nm = subprocess.run(['nm', '-u', path], capture_output=True, text=True).stdout
        for line in nm.splitlines():
            parts = line.split()
            if parts and parts[0] == 'U':
                sym_use[os.path.splitext(src)[0]].add(parts[1])
    graph = defaultdict(set)
    for mod, syms in sym_use.items():
        for s in syms:
            for d in sym_def.get(s, ()):
                if d != mod:
                    graph[mod].add(d)
    for comp in cycles(graph):
        bad.append('call cycle between modules: ' + ' <-> '.join(comp))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--build', help='a build directory: also check the object files')
    ap.add_argument('--root', help='the source tree (default: the one this script is in)')
    a = ap.parse_args()
    global ROOT
    if a.root:
        ROOT = os.path.abspath(a.root)
    bad = []
    files = product_files()
    graph = check_includes(files, bad)
    for comp in cycles(graph):
        bad.append('include cycle between modules: ' + ' <-> '.join(comp))
    check_text(files, bad)
    if a.build:
        check_objects(os.path.abspath(a.build), bad)
    for b in bad:
        print(b)
    print(f'check_house: {len(files)} product files, {len(bad)} violation(s)')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
