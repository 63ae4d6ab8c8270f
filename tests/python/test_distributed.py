"""torchrun with 2 CPU processes (gloo): each rank writes its own report, and `ampscope merge`
combines them."""
import json
import textwrap

SCRIPT = """
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
    torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(3):
    x = torch.randn(4, 8)
    if step == 2 and dist.get_rank() == 1:
        x[0, 0] = float("nan")  # rank 1's data goes bad at the last step
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
dist.barrier()  # no rank tears gloo down while another still has work in flight
dist.destroy_process_group()
"""


def test_two_ranks_write_rank_reports_and_merge(torchrun, cli, tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text(textwrap.dedent(SCRIPT))
    out = tmp_path / "out"
    res = torchrun("-m", "ampscope", "--out", out, script, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    reports = []
    for rank in (0, 1):
        r = json.loads((out / f"report.rank{rank}.json").read_text())
        assert r["run"]["rank"] == rank and r["run"]["world_size"] == 2
        assert r["run"]["steps"] == 3
        assert (out / f"report.rank{rank}.html").exists()
        reports.append(r)
    merged_path = tmp_path / "merged.json"
    res = cli("merge", out / "report.rank0.json", out / "report.rank1.json", "-o", merged_path)
    assert res.returncode == 0, res.stderr
    merged = json.loads(merged_path.read_text())
    assert merged["schema"] == "ampscope.report/1" and merged["run"]["world_size"] == 2

    def calls(report, layer, op):
        return sum(o["calls"] for l in report["layers"] if l["name"] == layer
                   for o in l["ops"] if o["op"] == op and o["phase"] == "forward")

    for layer in ("module.0", "module.2"):
        assert calls(merged, layer, "aten::linear") == sum(calls(r, layer, "aten::linear") for r in reports) == 6
    # rank 1's report speaks for rank 1: its event is its own, and its page does not claim the
    # other rank was clean
    e = reports[1]["first_nonfinite"]
    assert (e["rank"], e["step"], e["layer"]) == (1, 2, "<outside>")
    html = (out / "report.rank1.html").read_text()
    assert "This is the report of rank 1 of 2: it saw a non-finite value" in html
    assert "rank(s) saw no non-finite value" not in html
    assert 1 in [x["rank"] for x in merged["first_nonfinite_by_rank"]]


FSDP2 = """
import sys, torch, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
dist.init_process_group("gloo")
log = open(f"{sys.argv[1]}.rank{dist.get_rank()}", "w")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32),
                            torch.nn.ReLU(), torch.nn.Linear(32, 4))
for m in model:
    if isinstance(m, torch.nn.Linear):
        fully_shard(m)
fully_shard(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 16)
for step in range(3):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(step, repr(loss.item()), file=log, flush=True)
dist.barrier()  # no rank tears gloo down while another still has work in flight
dist.destroy_process_group()
"""


def test_fsdp2_trains_under_the_profiler_with_the_same_losses(torchrun, tmp_path):
    """FSDP2's DTensor parameters once crashed the in-place input check (no storage of their
    own): the run must finish, and its losses equal the unprofiled run's (torch is the oracle)."""
    script = tmp_path / "fsdp2.py"
    script.write_text(textwrap.dedent(FSDP2))
    plain = torchrun(script, tmp_path / "plain")
    assert plain.returncode == 0, plain.stderr[-3000:]
    out = tmp_path / "out"
    prof = torchrun("-m", "ampscope", "--out", out, script, tmp_path / "prof")
    assert prof.returncode == 0, prof.stderr[-3000:]
    for rank in (0, 1):
        got = (tmp_path / f"prof.rank{rank}").read_text()
        assert got == (tmp_path / f"plain.rank{rank}").read_text() and got.count("\n") == 3
    for rank in (0, 1):
        report = json.loads((out / f"report.rank{rank}.json").read_text())
        assert report["run"]["rank"] == rank and report["run"]["steps"] == 3
        names = {l["name"] for l in report["layers"]}
        assert {"0", "2", "4"} <= names
        assert report["first_nonfinite"] is None
        assert not [r for r in report["recommendations"] if r["action"] != "loss_scaling"]
