#!/usr/bin/env python3
"""Cost and rounding effect of ampscope's observation points in a torch.compile'd model.

Two compiled copies of one transformer stack (same weights): one compiled with no profile
active (no observation points), one compiled and run inside ampscope.profile (points inserted).
Rounds alternate between them (interleaved, so machine noise hits both); each round is a few
training steps under CPU bfloat16 autocast. Prints the median step time of each, their ratio,
and the largest difference between their outputs on the same input (before any update).

    PYTHONPATH=build/python python3 tools/bench/compile_overhead.py [--dim 256] [--rounds 7] [--every N]
"""
import argparse
import copy
import statistics
import time

import torch

import ampscope

from bench_cpu import cpu_info


def cpu_line():
    model, isa = cpu_info()
    return f"{model}, {torch.get_num_threads()} threads, ISA {isa}, torch {torch.__version__}"


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.wi, self.wo = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        att = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1)
        x = x + self.proj(att @ v)
        return x + self.wo(torch.nn.functional.gelu(self.wi(self.ln2(x))))


def steps(fn, model, x, n):
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    start = time.perf_counter()
    for _ in range(n):
        with torch.autocast("cpu", torch.bfloat16):
            y = fn(x)
        y.float().square().mean().backward()
        opt.step()
        opt.zero_grad()
    return (time.perf_counter() - start) / n


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--every", type=int, default=1, help="ampscope's every (sampled steps)")
    a = p.parse_args()
    torch.manual_seed(0)
    base = torch.nn.Sequential(*[Block(a.dim) for _ in range(a.layers)])
    x = torch.randn(8, 64, a.dim)
    plain_model, seen_model = copy.deepcopy(base), copy.deepcopy(base)
    plain, seen = torch.compile(plain_model), torch.compile(seen_model)
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        ref = plain(x).float()
        with ampscope.profile(out=None):
            got = seen(x).float()
    diff = (got - ref).abs().max().item()
    steps(plain, plain_model, x, 1)  # compile the training graphs of both
    with ampscope.profile(out=None):
        steps(seen, seen_model, x, 1)
    t_plain, t_seen = [], []
    for _ in range(a.rounds):
        t_plain.append(steps(plain, plain_model, x, a.steps))
        with ampscope.profile(out=None, every=a.every):
            t_seen.append(steps(seen, seen_model, x, a.steps))
    mp, ms = statistics.median(t_plain), statistics.median(t_seen)
    print(cpu_line())
    print(f"compiled step, unobserved: {mp * 1e3:.2f} ms; observed: {ms * 1e3:.2f} ms; "
          f"ratio {ms / mp:.2f}x (median of {a.rounds} interleaved rounds of {a.steps} steps, "
          f"d={a.dim}, {a.layers} blocks, batch 8x64, bfloat16 autocast, every {a.every})")
    print(f"forward output, observed vs unobserved graph: max |diff| {diff:.3g} "
          f"(output absmax {ref.abs().max().item():.3g})")


if __name__ == "__main__":
    main()
