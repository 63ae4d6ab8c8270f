#!/usr/bin/env python3
"""What ampscope costs a Python training loop, next to the tools users pick instead.

The loop: 4 nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True) + a Linear head, batch
8x64 tokens, MSE loss, AdamW, on the CPU; float32 and bfloat16 autocast. Every mode runs on the
same model in one process, rotated and interleaved round by round; each round times a block of
steps per mode (the setup step before it is not timed, nor is writing a report: out=None).
Printed: the median block time per step and its ratio to "off", a per-cost-centre breakdown
(differences of medians), the CPU model and the stats kernel build.

    PYTHONPATH=build/python python3 tools/bench/python_overhead.py [--quick] [--json FILE]
"""
import argparse
import contextlib
import copy
import json
import os
import statistics
import sys
import time
import warnings

import torch
from torch import nn

from bench_cpu import cpu_info

# ------------------------------------------------------------------------------ the loop

D_MODEL, HEADS, FFN, LAYERS, BATCH, SEQ = 256, 4, 1024, 4, 8, 64


def make_model(seed=0):
    torch.manual_seed(seed)
    layers = [nn.TransformerEncoderLayer(D_MODEL, HEADS, FFN, batch_first=True)
              for _ in range(LAYERS)]
    return nn.Sequential(*layers, nn.Linear(D_MODEL, D_MODEL))


class Loop:
    """One model, its optimizer and fixed data: step() is one training step."""

    def __init__(self, dtype, seed=0, scaler=False):
        self.model = make_model(seed)
        self.scaler = torch.amp.GradScaler("cpu") if scaler else None
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        g = torch.Generator().manual_seed(seed + 1)
        self.x = torch.randn(BATCH, SEQ, D_MODEL, generator=g)
        self.y = torch.randn(BATCH, SEQ, D_MODEL, generator=g)
        self.dtype = dtype

    def step(self):
        ctx = (torch.autocast("cpu", dtype=torch.bfloat16) if self.dtype == "bfloat16"
               else contextlib.nullcontext())
        with ctx:
            out = self.model(self.x)
            loss = nn.functional.mse_loss(out.float(), self.y)
        self.opt.zero_grad(set_to_none=True)
        if self.scaler is None:
            loss.backward()
            self.opt.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()
        return loss


# ------------------------------------------------------------------------------ modes
# Each mode is a context manager factory: mode(loop) -> context entered around the timed block.


@contextlib.contextmanager
def off(loop):
    yield


@contextlib.contextmanager
def module_hooks(loop):
    """Global forward pre and post hooks that do nothing, of the kinds ampscope installs (post
    with kwargs, always called): the floor of a module-hook tool. (Full backward hooks, which
    ampscope does not use, would add a BackwardHook per module call.)"""
    from torch.nn.modules import module as m
    hs = [m.register_module_forward_pre_hook(lambda mod, args: None),
          m.register_module_forward_hook(lambda mod, args, kwargs, out: None, with_kwargs=True,
                                         always_call=True)]
    try:
        yield
    finally:
        for h in hs:
            h.remove()


@contextlib.contextmanager
def param_hooks(loop):
    """A gradient hook on every parameter that does nothing."""
    hs = [p.register_hook(lambda g: None) for p in loop.model.parameters()]
    try:
        yield
    finally:
        for h in hs:
            h.remove()


def ampscope_mode(every, **kw):
    @contextlib.contextmanager
    def mode(loop):
        import ampscope
        from ampscope import _core
        with ampscope.profile(model=loop.model, out=None, every=every, command="bench", **kw):
            loop.step()  # step 0 (always recorded, module discovery): not timed
            before = _core.ops().read_counts()
            yield
            after = _core.ops().read_counts()
            # elements the block's reads asked for: (stats passes, NaN/Inf scans, read cache)
            mode.reads.setdefault(loop.dtype, []).append([a - b for a, b in zip(after, before)])
    mode.reads = {}
    return mode


@contextlib.contextmanager
def detect_anomaly(loop):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autograd.detect_anomaly(check_nan=True):
            yield


@contextlib.contextmanager
def torch_profiler(loop):
    from torch.profiler import ProfilerActivity, profile
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True):
            yield


class DuoLoop:
    """HF DebugUnderflowOverflow has no way to remove its hooks: it gets its own copy of the
    model (same weights, same compute), hooked once."""

    def __init__(self, base):
        from transformers.debug_utils import DebugUnderflowOverflow
        self.loop = copy.deepcopy(base)
        self.loop.opt = torch.optim.AdamW(self.loop.model.parameters(), lr=1e-4)
        self.loop.opt.load_state_dict(base.opt.state_dict())
        DebugUnderflowOverflow(self.loop.model)


MODES = {
    "off": off,
    "module hooks (no-op)": module_hooks,
    "param grad hooks (no-op)": param_hooks,
    "ampscope every=1000": ampscope_mode(1000),
    "ampscope every=1000 per-op sentinel": ampscope_mode(1000, sentinel="ops"),
    "ampscope every=10": ampscope_mode(10),
    "ampscope every=1 no op stats": ampscope_mode(1, ops="ampscope-bench-matches-no-op"),
    "ampscope every=1": ampscope_mode(1),
    "HF DebugUnderflowOverflow": None,  # its own hooked copy, see DuoLoop
    "torch detect_anomaly": detect_anomaly,
    "torch.profiler(record_shapes)": torch_profiler,
}


# ------------------------------------------------------------------------------ timing

def timed_block(loop, mode, steps):
    """Seconds per step over `steps` steps inside `mode` (its setup not timed)."""
    with mode(loop):
        t0 = time.perf_counter()
        for _ in range(steps):
            loop.step()
        return (time.perf_counter() - t0) / steps


def run_dtype(dtype, names, rounds, steps, scaler=False):
    loop = Loop(dtype, scaler=scaler)
    duo = DuoLoop(loop) if "HF DebugUnderflowOverflow" in names else None
    for _ in range(3):  # warm up: allocator, autocast caches, AdamW state
        loop.step()
        if duo:
            duo.loop.step()
    for n in names:  # and each mode once (library loads, module discovery), untimed
        timed_block(duo.loop if n == "HF DebugUnderflowOverflow" else loop, MODES[n] or off, 1)
    times = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            if n == "HF DebugUnderflowOverflow":
                times[n].append(timed_block(duo.loop, off, steps))
            else:
                times[n].append(timed_block(loop, MODES[n], steps))
        print(f"  {dtype}: round {r + 1}/{rounds} done", file=sys.stderr, flush=True)
    return {n: statistics.median(v) for n, v in times.items()}, times


# ------------------------------------------------------------------------------ output

def breakdown(r):
    """Additive cost centres per step (seconds), from differences of medians of one dtype.
    "ops matching none" runs every op through ampscope's RecordFunction callback, which returns
    at its op lookup (no stats, no sentinel): the dispatch cost of a recorded step."""
    hooks = r["module hooks (no-op)"] - r["off"]
    params = r["param grad hooks (no-op)"] - r["off"]
    watch = r["ampscope every=1000"] - r["off"]
    per_op = r["ampscope every=1000 per-op sentinel"] - r["off"]
    dispatch = r["ampscope every=1 no op stats"] - r["ampscope every=1000"]
    stats = r["ampscope every=1"] - r["ampscope every=1 no op stats"]
    recorded = r["ampscope every=1"] - r["ampscope every=1000"]
    return [
        ("module hooks: the floor of global no-op forward hooks", hooks),
        ("parameter-gradient hooks: the floor of no-op hooks", params),
        ("the watch of an unsampled step beyond those floors: hook bodies, module-output and "
         "gradient checks (every=1000 minus the floors)", watch - hooks - params),
        ("  for comparison, the per-op sentinel instead (every=1000, sentinel='ops', minus off)",
         per_op),
        ("a recorded step: RecordFunction dispatch and op lookup on every op (every=1 with no "
         "op matched, minus every=1000)", dispatch),
        ("a recorded step: stats passes, attribution, aggregation (every=1 minus the line "
         "above)", stats),
        ("every=10 predicted: every=1000 + (every=1 - every=1000) / 10", watch + recorded / 10),
        ("every=10 measured", r["ampscope every=10"] - r["off"]),
    ]


def reads_per_step(names, dtypes, steps):
    """Per ampscope mode and dtype: the elements a step's reads asked for (medians over the
    blocks), as (read by a stats pass, scanned for NaN/Inf only, answered by the read cache)."""
    out = {}
    for n in names:
        reads = getattr(MODES[n], "reads", None) or {}
        for d in dtypes:
            blocks = reads.get(d)
            if blocks:
                out.setdefault(n, {})[d] = [statistics.median(b[i] for b in blocks) / steps
                                            for i in range(3)]
    return out


def print_reads(reads, dtypes):
    print("\nwhat a step reads (M elements a step: by stats passes / NaN-Inf scans only / "
          "from the read cache):")
    for n, per in reads.items():
        cells = "  ".join(f"{d}: " + " / ".join(f"{v / 1e6:.1f}" for v in per[d])
                          for d in dtypes if d in per)
        print(f"  {n}\n      {cells}")


def print_table(results, dtypes, names):
    w = max(len(n) for n in names) + 2
    head = "".join(f"{d + ' ms':>12}{'ratio':>8}" for d in dtypes)
    print(f"{'mode':<{w}}{head}")
    for n in names:
        row = ""
        for d in dtypes:
            med, base = results[d][n], results[d]["off"]
            row += f"{med * 1e3:12.1f}{med / base:8.2f}"
        print(f"{n:<{w}}{row}")
    if len(names) != len(MODES):  # the centres need every mode
        return
    print("\ncost by centre (differences of medians; ms per step, share of 'off'):")
    parts = {d: breakdown(results[d]) for d in dtypes}
    for i, (label, _) in enumerate(parts[dtypes[0]]):
        cells = "  ".join(f"{d}: {parts[d][i][1] * 1e3:+7.2f} ms ({parts[d][i][1] / results[d]['off']:+.1%})"
                          for d in dtypes)
        print(f"  {label}\n      {cells}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 rounds instead of 7")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per dtype (default 7)")
    ap.add_argument("--steps", type=int, default=None,
                    help="timed steps per mode per round, a multiple of 10 so every=10 samples "
                         "exactly one step in ten (default 10)")
    ap.add_argument("--dtypes", default="float32,bfloat16", help="float32,bfloat16 (default both)")
    ap.add_argument("--modes", default=None, help="comma-separated subset of the modes (see below)")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    ap.add_argument("--scaler", action="store_true",
                    help="every mode's loop steps through torch.amp.GradScaler('cpu')")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args(argv)
    rounds = args.rounds if args.rounds is not None else (3 if args.quick else 7)
    steps = args.steps if args.steps is not None else 10
    dtypes = [d for d in args.dtypes.split(",") if d]
    bad = [d for d in dtypes if d not in ("float32", "bfloat16")]
    names = list(MODES) if not args.modes else [m.strip() for m in args.modes.split(",")]
    unknown = [n for n in names if n not in MODES]
    error = (f"unknown --dtypes {','.join(bad)} (float32, bfloat16)" if bad else
             f"unknown --modes {','.join(unknown)} (modes: {', '.join(MODES)})" if unknown else
             "--rounds and --steps must be >= 1" if rounds < 1 or steps < 1 else None)
    if error:
        print(f"ampscope: error: {error}", file=sys.stderr)
        return 2
    if "off" not in names:
        names.insert(0, "off")
    if args.threads:
        torch.set_num_threads(args.threads)
    model, isa = cpu_info()
    from ampscope import _core
    builds = _core.ops().stats_builds()
    print(f"cpu: {model}, {os.cpu_count()} cpus, {isa}; torch {torch.__version__} "
          f"({torch.get_num_threads()} threads, kernels {torch.backends.cpu.get_cpu_capability()})")
    print(f"ampscope stats builds: {builds}")
    print(f"loop: {LAYERS} x TransformerEncoderLayer({D_MODEL}, {HEADS}, {FFN}) + Linear, batch "
          f"{BATCH}x{SEQ}, AdamW{' + GradScaler' if args.scaler else ''}; {rounds} rounds x {steps} "
          f"steps per mode, rotated\n")
    results, raw = {}, {}
    for d in dtypes:
        results[d], raw[d] = run_dtype(d, names, rounds, steps, args.scaler)
    print_table(results, dtypes, names)
    reads = reads_per_step(names, dtypes, steps)
    print_reads(reads, dtypes)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "python_overhead", "cpu": model, "isa": isa,
                       "stats_builds": builds,
                       "torch": torch.__version__, "threads": torch.get_num_threads(),
                       "rounds": rounds, "steps": steps, "scaler": args.scaler,
                       "median_s_per_step": results,
                       "ratio_to_off": {d: {n: results[d][n] / results[d]["off"] for n in names}
                                        for d in dtypes},
                       "block_s_per_step": raw,
                       "reads_elements_per_step": reads,
                       "breakdown_s_per_step": {d: dict(breakdown(results[d])) for d in dtypes}
                       if len(names) == len(MODES) else None}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
