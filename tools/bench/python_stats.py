#!/usr/bin/env python3
"""ampscope.tensor_stats from Python against x.sum() (one read of memory), on randn tensors.

The Python path hands the tensor's memory to the C++ kernel as it is (no copy; the JSON it
returns is a few hundred bytes). Prints median times of interleaved repetitions and the
throughput ratio stats / sum (the bar: >= 0.5, goal 0.8).

    PYTHONPATH=build/python python3 tools/bench/python_stats.py [--sizes 256M,1G] [--json FILE]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

from bench_cpu import cpu_info

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * units[s[-1]]) if s[-1] in units else int(s)


def randn_of(nbytes, dtype):
    n = nbytes // torch.tensor([], dtype=dtype).element_size()
    t = torch.empty(n, dtype=dtype)
    chunk = 1 << 24
    for i in range(0, n, chunk):  # in chunks: no float32 copy of the whole tensor
        t[i:i + chunk] = torch.randn(min(chunk, n - i))
    return t


def measure(t, reps, ampscope):
    ts, tsum = [], []
    ampscope.tensor_stats(t)
    t.sum()
    for _ in range(reps):
        t0 = time.perf_counter()
        ampscope.tensor_stats(t)
        t1 = time.perf_counter()
        t.sum()
        t2 = time.perf_counter()
        ts.append(t1 - t0)
        tsum.append(t2 - t1)
    return statistics.median(ts), statistics.median(tsum)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="256M,1G", help="bytes per tensor (default 256M,1G)")
    ap.add_argument("--dtypes", default="float32,bfloat16,float16")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    try:
        sizes = [parse_size(s) for s in args.sizes.split(",") if s]
        dtypes = [DTYPES[d] for d in args.dtypes.split(",") if d]
    except (KeyError, ValueError) as e:
        print(f"ampscope: error: bad --sizes or --dtypes: {e}", file=sys.stderr)
        return 2
    import ampscope
    from ampscope import _core
    model, isa = cpu_info()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cpus; "
          f"{model}, {isa}; ampscope stats builds: {_core.ops().stats_builds()}")
    print(f"{'size':>8} {'dtype':>9} {'stats ms':>9} {'sum ms':>8} {'stats/sum thr':>14}")
    rows = []
    for nbytes in sizes:
        for dt in dtypes:
            t = randn_of(nbytes, dt)
            st, su = measure(t, args.reps, ampscope)
            del t
            name = str(dt).replace("torch.", "")
            rows.append({"bytes": nbytes, "dtype": name, "stats_s": st, "sum_s": su,
                         "stats_over_sum_throughput": su / st})
            print(f"{nbytes >> 20:>6}Mi {name:>9} {st * 1e3:9.2f} {su * 1e3:8.2f} {su / st:14.2f}",
                  flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "python_stats", "threads": torch.get_num_threads(),
                       "cpu": model, "isa": isa, "stats_builds": _core.ops().stats_builds(),
                       "results": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
