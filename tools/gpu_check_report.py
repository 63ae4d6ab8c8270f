#!/usr/bin/env python3
"""One-line verdicts for tools/gpu_check.sh.

gpu_check_report.py REPORT.json [--syncs COUNTS.json STEPS]
    the CUDA demo's report: loss-scale history present, the planted overflow of blocks.1.ffn.wo
    found and pinned; exit 1 when not.
gpu_check_report.py --bench LOG JSON
    a benchmark's ratios from its JSON (stats: throughput vs at::sum, composed vs stats;
    overhead: full / every-10 step time vs off), falling back to the log's last line.
"""
import json
import pathlib
import sys

PLANTED = "blocks.1.ffn.wo"


def demo_verdict(path, syncs=None, steps=None):
    r = json.loads(pathlib.Path(path).read_text())
    problems = []
    ls = r.get("loss_scale", [])
    if not ls:
        problems.append("no loss_scale entries")
    elif len(ls) != r["run"]["steps"]:
        problems.append(f"{len(ls)} loss_scale entries for {r['run']['steps']} steps")
    if r["run"].get("device") != "cuda":
        problems.append(f"run.device is {r['run'].get('device')!r}")
    fnf = r.get("first_nonfinite") or {}
    pins = [x["layer"] for x in r.get("recommendations", []) if x["action"] == "pin_fp32"]
    if PLANTED not in pins:
        problems.append(f"{PLANTED} not pinned (pins: {pins})")
    skipped = sum(1 for p in ls if p["found_inf"])
    text = (f"first non-finite: step {fnf.get('step')} {fnf.get('layer')} {fnf.get('op')}; "
            f"pin_fp32 {pins}; loss scale {ls[0]['scale']:g} -> {ls[-1]['scale']:g} "
            f"({len(ls)} updates, {skipped} skipped)" if ls else "no loss scale")
    if "host_syncs" in r["run"]:  # the user's syncs seen by CUPTI, ampscope's own excluded
        text += f"; run.host_syncs {r['run']['host_syncs']} ({r['run']['host_syncs'] / len(ls or [0]):.1f}/step)"
    if syncs:  # every blocking CUDA call of the process (tools/bench/sync_count.c)
        counts = json.loads(pathlib.Path(syncs).read_text())
        text += f"; all host syncs {counts['total']} in {steps} steps ({counts['total'] / int(steps):.1f}/step)"
    if problems:
        print("; ".join(problems) + " | " + text)
        return 1
    print("ok: " + text)
    return 0


def stats_bench(rows):
    parts = []
    for dtype in sorted({r["dtype"] for r in rows}):
        mine = [r for r in rows if r["dtype"] == dtype]
        big = max(mine, key=lambda r: r["bytes"])
        parts.append(f"{dtype} {big['stats_over_sum_throughput']:.2f}x sum, "
                     f"composed {big['composed_over_stats_time']:.1f}x slower")
    agree = all(r["counts_agree"] for r in rows)
    return f"largest size: {'; '.join(parts)} (bars 0.8x / 5x); counts agree: {agree}"


def overhead_bench(j):
    text = (f"step {j['step_ms']['off']:.2f} ms; full {j['overhead']['full']:.3f}x (bar 1.25x), "
            f"every-10 {j['overhead']['every10']:.3f}x (bar 1.03x)")
    syncs = {k: v for k, v in j.items() if "sync" in k}
    if syncs:
        text += f"; {json.dumps(syncs)}"
    return text


def bench_verdict(log, path):
    p = pathlib.Path(path)
    if not p.exists():
        lines = [l for l in pathlib.Path(log).read_text().splitlines() if l.strip()]
        print(lines[-1] if lines else "no output")
        return 0
    j = json.loads(p.read_text())
    print(stats_bench(j) if isinstance(j, list) else overhead_bench(j))
    return 0


def main(argv):
    if argv[:1] == ["--bench"]:
        return bench_verdict(argv[1], argv[2])
    if len(argv) == 4 and argv[1] == "--syncs":
        return demo_verdict(argv[0], argv[2], argv[3])
    return demo_verdict(argv[0])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
