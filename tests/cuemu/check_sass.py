#!/usr/bin/python3
"""Checks of compiled CUDA kernels that need no GPU (CTests attention_sass_*,
tests/cuemu/CMakeLists.txt; docs/cuda.md).

  check_sass.py spills --nvcc NVCC --arch 80 --arch 90 -I DIR ... [--flag F ...]
                       --kernels REGEX --expect N --source SOURCE
      Compiles SOURCE for each architecture with `nvcc --resource-usage`
      (ptxas -v) and reads, for every kernel whose mangled name REGEX finds,
      its registers and spill stores and loads. Fails when one of them spills
      (local memory for registers: a tensor-core kernel that spills has lost
      its speed) or when fewer than N kernels per architecture match (the
      check would be empty).

  check_sass.py hmma --module LIB --arch 80 --arch 90 --kernels REGEX
                     --expect N [--nvcc NVCC] [--tools DIR ...]
      Reads the SASS of every kernel of LIB whose mangled name REGEX finds
      (cuobjdump --dump-sass) and fails when one of them has no HMMA (tensor
      core) instruction for one of the architectures, or when fewer than N
      kernels match. cuobjdump is looked for on PATH, beside nvcc, then in
      each --tools DIR (scripts/install_deps.sh puts NVIDIA's wheels of
      cuobjdump and nvdisasm in build-tools/cuda/nvidia/cu13/bin); its
      folder goes first on PATH and in NVDISASM_PATH so that it finds
      nvdisasm. Without one it prints why and exits 77 (CTest: Skipped).

Prints one line per kernel and architecture, and the verdict."""
import argparse, os, re, shutil, subprocess, sys, tempfile

SKIP = 77


def short(name):
    """_Z16fa_tc_fwd_kernelILi64EEv... -> fa_tc_fwd_kernel<64>, _Z13fa_fwd_kernelIfEv... -> fa_fwd_kernel<f>,
    _Z13fa_fwd_kernelI11tri_cu_bf16E... -> fa_fwd_kernel<tri_cu_bf16> (for the lines we print)."""
    m = re.match(r'_Z(\d+)', name)
    if not m:
        return name
    at = m.end() + int(m.group(1))
    base, rest = name[m.end():at], name[at:]
    m = re.match(r'ILi(\d+)E', rest) or re.match(r'I(\d+)', rest)
    if m and rest.startswith('IL'):
        return f'{base}<{m.group(1)}>'
    if m:
        return f'{base}<{rest[m.end():m.end() + int(m.group(1))]}>'
    return f'{base}<{rest[1]}>' if rest.startswith('I') else base


def spills(a):
    flags = ['-c', '-O3', '-std=c++17', '--resource-usage', '-x', 'cu']
    for d in a.include:
        flags += ['-I', d]
    flags += a.flag or []
    bad, count = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for arch in a.arch:
            cmd = [a.nvcc] + flags + ['-gencode', f'arch=compute_{arch},code=sm_{arch}', a.source, '-o',
                                      os.path.join(tmp, f'k{arch}.o')]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print(r.stdout + r.stderr)
                print(f'check_sass: nvcc failed for sm_{arch}: {" ".join(cmd)}')
                return 1
            cur, spill = None, (0, 0)
            for line in (r.stdout + r.stderr).splitlines():
                m = re.search(r'Function properties for (\S+)', line)
                if m:
                    cur = m.group(1) if re.search(a.kernels, m.group(1)) else None
                    continue
                m = re.search(r'(\d+) bytes spill stores, (\d+) bytes spill loads', line)
                if m and cur:
                    spill = (int(m.group(1)), int(m.group(2)))
                    continue
                m = re.search(r'Used (\d+) registers', line)
                if m and cur:  # ptxas prints the registers after the spills
                    count[arch] = count.get(arch, 0) + 1
                    print(f'sm_{arch} {short(cur)}: {m.group(1)} registers, {spill[0]} bytes spill stores, '
                          f'{spill[1]} bytes spill loads' + ('  <- spills' if spill != (0, 0) else ''))
                    if spill != (0, 0):
                        bad.append(f'sm_{arch} {short(cur)}')
                    cur = None
    for arch in a.arch:
        if count.get(arch, 0) < a.expect:
            print(f'check_sass: sm_{arch}: {count.get(arch, 0)} kernels match {a.kernels!r}, expected {a.expect}')
            return 1
    if bad:
        print(f'check_sass: {len(bad)} kernels spill registers to local memory: {", ".join(bad)}')
        return 1
    print(f'check_sass: no spills in the {a.expect} kernels matching {a.kernels!r} on sm_{", sm_".join(a.arch)}')
    return 0


def find_cuobjdump(a):
    found = shutil.which('cuobjdump')
    if not found and a.nvcc:
        c = os.path.join(os.path.dirname(os.path.realpath(a.nvcc)), 'cuobjdump')
        found = c if os.access(c, os.X_OK) else None
    for d in a.tools or []:
        if found:
            break
        c = os.path.join(d, 'cuobjdump')
        found = c if os.access(c, os.X_OK) else None
    return found


def hmma(a):
    tool = find_cuobjdump(a)
    if not tool:
        where = ', '.join(['PATH'] + ([os.path.dirname(a.nvcc)] if a.nvcc else []) + (a.tools or []))
        print(f'check_sass: SKIP: no cuobjdump ({where}); scripts/install_deps.sh fetches NVIDIA\'s wheels '
              'of cuobjdump and nvdisasm into build-tools/cuda')
        return SKIP
    env = dict(os.environ)
    bindir = os.path.dirname(tool)
    env['PATH'] = bindir + os.pathsep + env.get('PATH', '')
    env.setdefault('NVDISASM_PATH', bindir)
    r = subprocess.run([tool, '--dump-resource-usage', a.module], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        print(f'check_sass: {tool} could not read {a.module}')
        return 1
    names = sorted({m.group(1) for m in re.finditer(r'Function (\S+):', r.stdout) if re.search(a.kernels, m.group(1))})
    if len(names) < a.expect:
        print(f'check_sass: {len(names)} kernels of {a.module} match {a.kernels!r}, expected {a.expect}')
        return 1
    bad = []
    for name in names:
        r = subprocess.run([tool, '--dump-sass', '-fun', name, a.module], capture_output=True, text=True, env=env)
        sections = re.split(r'code for (sm_\d+)', r.stdout)
        seen = {}
        for arch, text in zip(sections[1::2], sections[2::2]):
            if 'Function : ' + name in text:
                seen[arch] = seen.get(arch, 0) + len(re.findall(r'\bHMMA\b', text))
        for arch in a.arch:
            n = seen.get(f'sm_{arch}')
            print(f'sm_{arch} {short(name)}: ' + ('no SASS' if n is None else f'{n} HMMA'))
            if not n:
                bad.append(f'sm_{arch} {short(name)}')
    if bad:
        print(f'check_sass: no HMMA in {len(bad)} kernels: {", ".join(bad)}')
        return 1
    print(f'check_sass: HMMA in each of the {len(names)} kernels matching {a.kernels!r} on sm_{", sm_".join(a.arch)}')
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('mode', choices=['spills', 'hmma'])
    p.add_argument('--source')
    p.add_argument('--nvcc')
    p.add_argument('--module')
    p.add_argument('--arch', action='append', required=True)
    p.add_argument('-I', dest='include', action='append', default=[])
    p.add_argument('--flag', action='append')
    p.add_argument('--tools', action='append')
    p.add_argument('--kernels', required=True)
    p.add_argument('--expect', type=int, required=True)
    a = p.parse_args()
    a.arch = [re.sub(r'-(real|virtual)$', '', x) for x in a.arch]
    if a.mode == 'spills':
        if not a.nvcc or not a.source:
            p.error('spills needs --nvcc and --source')
        return spills(a)
    if not a.module:
        p.error('hmma needs --module')
    return hmma(a)


if __name__ == '__main__':
    sys.exit(main())
