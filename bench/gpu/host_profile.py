#!/usr/bin/env python3
"""Where a GPU host's CPU time goes, from a gperftools CPU profile.

GPU hosts have neither perf nor nsys (and run under gVisor), but
gperftools' sampling profiler works there: it needs only SIGPROF. Carry
libprofiler.so.0 and libunwind.so.8 from this build host (Debian packages
libgoogle-perftools4, libunwind8) next to the binaries and run, on the GPU
host:

  LD_LIBRARY_PATH=prof LD_PRELOAD=prof/libprofiler.so.0 \\
    CPUPROFILE=$OUT/relay.prof CPUPROFILE_FREQUENCY=5000 \\
    ./collectives --transport nccl --ranks 1 --collective all_reduce \\
      -b 8 -e 8 -n 200000 -w 300 -c 0 --cuda-stream own

then here, with the same binary:

  bench/gpu/host_profile.py relay.prof gpu_one/collectives RunRow

Prints, for the samples whose stack holds ROOT (a function of the binary,
e.g. the timed loop), what each sample was doing: the innermost CUDA or NCCL
API call (cudaStreamQuery, the NCCL library), else the innermost function of
the binary. Libraries of the GPU host are named, not symbolised (their files
are not here); the binary is symbolised with addr2line.
"""
import collections
import re
import struct
import subprocess
import sys


def load(path):
    """Samples (count, [pc...]) and executable mappings of a legacy
    gperftools CPU profile: 64-bit words, header, records, trailer, maps."""
    data = open(path, 'rb').read()
    word = lambda i: struct.unpack_from('<Q', data, i * 8)[0]
    i = 2 + word(1)  # Header: 0, header words, version, period, padding.
    samples = []
    while True:
        count, depth = word(i), word(i + 1)
        if count == 0 and depth == 1 and word(i + 2) == 0:
            i += 3
            break
        samples.append((count, [word(i + 2 + k) for k in range(depth)]))
        i += 2 + depth
    maps = []
    for line in data[i * 8:].decode(errors='replace').splitlines():
        m = re.match(r'([0-9a-f]+)-([0-9a-f]+) (\S+) ([0-9a-f]+) \S+ \d+\s*(.*)',
                     line)
        if m and 'x' in m.group(3):
            maps.append((int(m.group(1), 16), int(m.group(2), 16),
                         int(m.group(4), 16), m.group(5).split('/')[-1] or '?'))
    return samples, maps


def main():
    if len(sys.argv) != 4:
        sys.exit('usage: host_profile.py PROFILE BINARY ROOT')
    profile, binary, root = sys.argv[1:]
    samples, maps = load(profile)
    base = binary.split('/')[-1]
    names = {}

    def frame(pc, leaf):
        for lo, hi, offset, lib in maps:
            if lo <= pc < hi:
                if lib != base:
                    return '[' + lib + ']'
                # Return addresses point after the call.
                address = pc - lo + offset - (0 if leaf else 1)
                if address not in names:
                    out = subprocess.run(['addr2line', '-f', '-C', '-e', binary,
                                          hex(address)], capture_output=True,
                                         text=True).stdout.split('\n')[0]
                    names[address] = re.sub(
                        r'\(.*', '', out.replace('(anonymous namespace)', 'anon'))
                return names[address]
        return '?'

    by_cause = collections.Counter()
    total = 0
    for count, pcs in samples:
        frames = [frame(pc, k == 0) for k, pc in enumerate(pcs)]
        if not any(root in f for f in frames):
            continue
        total += count
        cause = frames[0]
        for f in frames:
            if f.startswith(('cuda', 'nccl')):
                cause = f
                break
            if f.startswith('[libnccl'):
                cause = 'NCCL (inside an nccl* call)'
                break
            if f.startswith(('relay::', 'absl::', 'std::')):
                cause = f
                break
        by_cause[cause] += count
    print(f'{total} samples under {root}')
    for cause, count in by_cause.most_common(30):
        print(f'{count:6d} {100.0 * count / max(total, 1):5.1f}%  {cause[:100]}')


if __name__ == '__main__':
    main()
