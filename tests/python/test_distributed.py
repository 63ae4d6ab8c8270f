"""torchrun with 2 CPU processes (gloo): each rank writes its own report, and `ampscope merge`
combines them."""
import json
import socket
import textwrap

SCRIPT = """
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
    torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(3):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(torch.randn(4, 8)).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_ranks_write_rank_reports_and_merge(run_py, cli, tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text(textwrap.dedent(SCRIPT))
    out = tmp_path / "out"
    res = run_py("-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
                 "--master_addr", "127.0.0.1", "--master_port", free_port(),
                 "-m", "ampscope", "--out", out, script, timeout=600)
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
