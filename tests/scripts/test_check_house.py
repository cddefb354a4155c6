#!/usr/bin/python3
"""scripts/check_house.py against a small tree built here with one planted
breach of each rule (and a clean twin that must pass): every breach must be
reported by its own line, and nothing else."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, '..', '..', 'scripts', 'check_house.py')


def write(root, path, text):
    p = os.path.join(root, path)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, 'w') as f:
        f.write(text)


def compile_obj(root, build, target, src):
    obj = os.path.join(build, 'CMakeFiles', target + '.dir', src + '.o')
    os.makedirs(os.path.dirname(obj), exist_ok=True)
    subprocess.check_call(['gcc', '-c', '-O0', '-I', root, '-I', os.path.join(root, 'src'),
                           os.path.join(root, src), '-o', obj])


def run(root, build):
    r = subprocess.run(['/usr/bin/python3', SCRIPT, '--root', root, '--build', build], capture_output=True, text=True)
    return r.returncode, r.stdout


def clean_tree(root):
    write(root, 'src/base/err.h', '#pragma once\nint tri_error(const char *fmt, ...);\n')
    write(root, 'src/base/err.c', '#include <stdio.h>\n#include "base/err.h"\n'
          'int tri_error(const char *fmt, ...) { fprintf(stderr, "%s", fmt); return -1; }\n')
    write(root, 'kernels/k.h', '#pragma once\n#include "base/err.h"\nint k(void);\n')
    write(root, 'kernels/k.c', '#include "kernels/k.h"\nint k(void) { return tri_error("k"); }\n')
    write(root, 'parallel/p.h', '#pragma once\n#include "kernels/k.h"\nint p(void);\n')
    write(root, 'parallel/p.c', '#include "parallel/p.h"\nint p(void) { return k(); }\n')
    write(root, 'model/m1.h', '#pragma once\nint m1(int);\n')
    write(root, 'model/m1.c', '#include "model/m1.h"\n#include "parallel/p.h"\nint m1(int x) { return x ? p() : 0; }\n')


def main():
    bad_lines = {
        'tests include': 'kernels/bad.c: includes tests/x.h: product code never includes tests/',
        'layer': 'kernels/bad.c: includes parallel/p.h: kernels/ may not use parallel/',
        'stderr': 'kernels/bad.c:7: fprintf(stderr, ...)',
        'env': 'kernels/bad.c:8: environment variable TRI_FOO: ours are spelled TRIDENT_*',
        'include cycle': 'include cycle between modules: data/x <-> data/y',
        'size': 'model/big.c: 1001 lines, over 1,000',
        'state': 'model/state.c: counter in .bss: writable file-scope state',
        'call cycle': 'call cycle between modules: model/m1 <-> model/m2',
    }
    with tempfile.TemporaryDirectory() as tmp:
        root, build = os.path.join(tmp, 'clean'), os.path.join(tmp, 'clean-build')
        clean_tree(root)
        for t, src in (('tri_base', 'src/base/err.c'), ('tri_kernels', 'kernels/k.c'),
                       ('tri_parallel', 'parallel/p.c'), ('tri_model', 'model/m1.c')):
            compile_obj(root, build, t, src)
        rc, out = run(root, build)
        assert rc == 0 and out.strip().endswith('0 violation(s)'), 'the clean tree failed:\n' + out

        root, build = os.path.join(tmp, 'bad'), os.path.join(tmp, 'bad-build')
        clean_tree(root)
        write(root, 'tests/x.h', '#pragma once\n')
        write(root, 'kernels/bad.c', '#include <stdio.h>\n#include <stdlib.h>\n#include "tests/x.h"\n'
              '#include "parallel/p.h"\n\nvoid bad(void) {\n    fprintf(stderr, "x");\n'
              '    (void)getenv("TRI_FOO");\n}\n')
        write(root, 'data/x.h', '#pragma once\n#include "data/y.h"\n')
        write(root, 'data/y.h', '#pragma once\n#include "data/x.h"\n')
        write(root, 'model/big.c', '/* x */\n' * 1001)
        write(root, 'model/state.c', 'static int counter;\nint bump(void) { return ++counter; }\n')
        write(root, 'model/m2.h', '#pragma once\nint m2(int);\n')
        write(root, 'model/m2.c', '#include "model/m2.h"\n#include "model/m1.h"\nint m2(int x) { return m1(x - 1); }\n')
        write(root, 'model/m1.c', '#include "model/m1.h"\n#include "model/m2.h"\nint m1(int x) { return x ? m2(x) : 0; }\n')
        for t, src in (('tri_base', 'src/base/err.c'), ('tri_kernels', 'kernels/k.c'), ('tri_model', 'model/state.c'),
                       ('tri_model', 'model/m1.c'), ('tri_model', 'model/m2.c')):
            compile_obj(root, build, t, src)
        rc, out = run(root, build)
        assert rc == 1, 'exit code %d:\n%s' % (rc, out)
        for what, line in bad_lines.items():
            assert line in out, '%s not reported (want "%s"):\n%s' % (what, line, out)
        n = len([l for l in out.splitlines() if not l.startswith('check_house:')])
        # the m1 <-> m2 include cycle is reported too, besides the call cycle
        assert n == len(bad_lines) + 1, 'unexpected lines:\n' + out
    print('test_check_house: every planted breach reported, the clean tree passes')
    return 0


if __name__ == '__main__':
    sys.exit(main())
