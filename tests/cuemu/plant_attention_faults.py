#!/usr/bin/python3
"""Plants faults in the tensor-core attention (kernels/cuda/attention_tc.cu),
one at a time, rebuilds the emulated kernel tests and runs the tensor-core
attention tests (cuda_attention_tc/*), which must fail for each fault
(docs/cuda.md, "Attention"). Run by hand from the repository root with a
configured build (not a CTest: each fault rebuilds the emulated kernels):

    /usr/bin/python3 tests/cuemu/plant_attention_faults.py [--build build] [N ...]

Prints, per fault, how many tests failed; exits 1 if a fault went
unnoticed. The source file is restored at the end, whatever happens."""
import argparse, os, re, subprocess, sys

SRC = 'kernels/cuda/attention_tc.cu'

# name: (text, replacement); each text must occur in the source
FAULTS = [
    ('forward: the wait for the current K/V tile dropped',
     'tc_load<HS, BC>(Vs + (buf ^ 1) * BC * LD, vh, g.v_r, j0 + BC, kend);\n'
     '            tri_cp_async_commit();\n            tri_cp_async_wait_group<1>();',
     'tc_load<HS, BC>(Vs + (buf ^ 1) * BC * LD, vh, g.v_r, j0 + BC, kend);\n'
     '            tri_cp_async_commit();'),
    ('dk/dv: wait_group<2> for <1> (the current query tile not waited for)',
     'stage(it + 1, buf ^ 1);\n            tri_cp_async_commit();\n            tri_cp_async_wait_group<1>();',
     'stage(it + 1, buf ^ 1);\n            tri_cp_async_commit();\n            tri_cp_async_wait_group<2>();'),
    ('P as A fragment: registers 1 and 2 swapped',
     '    a[1] = tri_cu_pack_bf16x2(c0[2], c0[3]);\n    a[2] = tri_cu_pack_bf16x2(c1[0], c1[1]);',
     '    a[2] = tri_cu_pack_bf16x2(c0[2], c0[3]);\n    a[1] = tri_cu_pack_bf16x2(c1[0], c1[1]);'),
    ("forward: Q's fragments loaded in B's matrix order",
     'tri_ldmatrix_x4(qf[ks], lm_a(Qs,', 'tri_ldmatrix_x4(qf[ks], lm_b(Qs,'),
    ('forward: the diagonal itself masked',
     'if (diag && j > (e < 2 ? pa : pb)) x = -INFINITY;', 'if (diag && j >= (e < 2 ? pa : pb)) x = -INFINITY;'),
    ('forward: the mask skipped on a diagonal tile',
     'const bool diag = j0 + BC - 1 > g.q0 + r0;', 'const bool diag = j0 + BC - 1 > g.q0 + r0 + 16;'),
    ("dk/dv: the diagonal key excluded",
     'const bool seen = i < Tq && (e < 2 ? ka : kb) <= g.q0 + i;',
     'const bool seen = i < Tq && (e < 2 ? ka : kb) < g.q0 + i;'),
    ('dq: one key past the diagonal seen',
     'const bool seen = j <= (e < 2 ? pa : pb);', 'const bool seen = j <= (e < 2 ? pa : pb) + 1;'),
    ("forward: the accumulator's rescale dropped",
     '                o[nt][0] *= corr[0], o[nt][1] *= corr[0];\n'
     '                o[nt][2] *= corr[1], o[nt][3] *= corr[1];\n', ''),
    ("forward: the running sum's rescale dropped",
     'l[0] = l[0] * corr[0] + rs[0];', 'l[0] = l[0] + rs[0];'),
    # grouped-query attention (the test grouped_query_heads_match_the_cpu)
    ('dk/dv: only the first query head of each group',
     'nit = per > 0 ? per * g.G : 0;', 'nit = per > 0 ? per : 0;'),
    ('forward: query head h reads key/value head h % NKV, not h / G',
     'kvh = fa_kvh(g, h);\n    const tri_cu_bf16 *qh = q + b * g.q_b + h * HS, *kh = k + b * g.k_b + kvh * HS, '
     '*vh = v + b * g.v_b + kvh * HS;\n    const int last = (i0 + BR < Tq ? i0 + BR : Tq) - 1; /* the block\'s last query */',
     'kvh = h % (size_t)g.NKV;\n    const tri_cu_bf16 *qh = q + b * g.q_b + h * HS, *kh = k + b * g.k_b + kvh * HS, '
     '*vh = v + b * g.v_b + kvh * HS;\n    const int last = (i0 + BR < Tq ? i0 + BR : Tq) - 1; /* the block\'s last query */'),
]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--build', default='build')
    p.add_argument('which', nargs='*', type=int, help='fault numbers (default: all)')
    a = p.parse_args()
    orig = open(SRC).read()
    for name, text, _ in FAULTS:
        if text not in orig:
            print(f'plant_attention_faults: the text of "{name}" is no longer in {SRC}: update this script')
            return 1
    tests = os.path.join(a.build, 'tests', 'cuemu', 'tri_cuemu_tests')
    missed = []
    try:
        for i, (name, text, repl) in enumerate(FAULTS):
            if a.which and i not in a.which:
                continue
            with open(SRC, 'w') as f:
                f.write(orig.replace(text, repl, 1))
            b = subprocess.run(['cmake', '--build', a.build, '-j2', '--target', 'tri_cuemu_tests'],
                               capture_output=True, text=True)
            if b.returncode != 0:
                print(f'{i}: {name}: the build failed\n{b.stdout[-2000:]}{b.stderr[-2000:]}')
                missed.append(name)
                continue
            r = subprocess.run([tests, '--filter', 'cuda_attention_tc/*', '--short-filename', '-j2'],
                               capture_output=True, text=True)
            m = re.search(r'Tested: (\d+) \| Passing: (\d+) \| Failing: (\d+) \| Crashing: (\d+)', r.stdout + r.stderr)
            failed = int(m.group(3)) + int(m.group(4)) if m else 0
            print(f'{i}: {name}: {failed} tests fail' if m else f'{i}: {name}: no summary from the tests')
            if failed == 0:
                missed.append(name)
    finally:
        with open(SRC, 'w') as f:
            f.write(orig)
        subprocess.run(['cmake', '--build', a.build, '-j2', '--target', 'tri_cuemu_tests'], capture_output=True)
    if missed:
        print(f'plant_attention_faults: not caught: {"; ".join(missed)}')
        return 1
    print('plant_attention_faults: every planted fault was caught')
    return 0


if __name__ == '__main__':
    sys.exit(main())
