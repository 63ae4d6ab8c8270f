"""FSDP2 (fully_shard per Linear and the root) on 2 CPU ranks (gloo) under torchrun: training is
unchanged by ampscope, every rank writes its report with the layer and parameter names
fully_shard keeps, parameter gradients come from the local shards, collectives carry no stats,
and `ampscope merge` adds the shards up to the whole parameters. Oracles: the same script run
without ampscope (losses), DTensor.full_tensor() of each gradient computed in the script."""
import json

import pytest

from conftest import TEARDOWN_ABORT, free_port

SCRIPT = r"""
import json, os, sys, torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

mode, oracle_path = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 30),
                            torch.nn.ReLU(), torch.nn.Linear(30, 4))
if mode == "plant":  # layer 2's outputs pass float16's 65504
    with torch.no_grad():
        model[2].weight.mul_(1e5)
for m in model:
    if isinstance(m, torch.nn.Linear):
        fully_shard(m)
fully_shard(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
torch.manual_seed(1 + rank)
dtype = torch.float16 if mode == "plant" else torch.bfloat16
losses, full = [], {}
for _ in range(3):
    with torch.autocast("cpu", dtype=dtype):
        loss = model(torch.randn(8, 16)).float().pow(2).mean()
    loss.backward()
    for name, p in model.named_parameters():
        g = p.grad.full_tensor()  # the whole gradient (a collective: every rank calls it)
        n = full.setdefault(name, {"count": 0, "zeros": 0, "nan": 0})
        n["count"] += g.numel()
        n["zeros"] += int((g == 0).sum())
        n["nan"] += int(g.isnan().sum())
    opt.step()
    opt.zero_grad()
    losses.append(loss.item())
with open(oracle_path + f".{rank}", "w") as f:
    json.dump({"losses": losses, "full": full}, f)
dist.barrier()  # no rank tears gloo down while another still has work in flight
dist.destroy_process_group()
"""


def run_script(torchrun, script, *args, ampscope_out=None):
    prefix = ["-m", "ampscope", "--out", ampscope_out] if ampscope_out else []
    res = torchrun(*prefix, script, *args)
    assert res.returncode == 0, res.stderr[-4000:]


def oracle(path, rank):
    return json.loads(open(f"{path}.{rank}").read())


def layer(report, name):
    [l] = [l for l in report["layers"] if l["name"] == name]
    return l


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    p = tmp_path_factory.mktemp("fsdp") / "fsdp_train.py"
    p.write_text(SCRIPT)
    return p


def test_fsdp2_training_is_unchanged_and_merge_adds_shards(torchrun, cli, script, tmp_path):
    run_script(torchrun, script, "clean", tmp_path / "bare")
    out = tmp_path / "out"
    run_script(torchrun, script, "clean", tmp_path / "prof", ampscope_out=out)
    reports = []
    for rank in (0, 1):
        assert oracle(tmp_path / "prof", rank)["losses"] == oracle(tmp_path / "bare", rank)["losses"]
        r = json.loads((out / f"report.rank{rank}.json").read_text())
        assert (r["run"]["rank"], r["run"]["world_size"], r["run"]["steps"]) == (rank, 2, 3)
        for name in ("0", "2", "4"):  # the names fully_shard keeps
            l = layer(r, name)
            assert l["type"] == "FSDPLinear"
            fwd = [o for o in l["ops"] if o["op"] == "aten::linear" and o["phase"] == "forward"]
            assert fwd and sum(o["calls"] for o in fwd) == 3  # once per step, not per wrapper
            assert {p["name"] for p in l["params"]} == {f"{name}.weight", f"{name}.bias"}
        # collectives are recorded as such, with no stats (their buffers fill asynchronously)
        coll = [o for l in r["layers"] for o in l["ops"] if o["op"].startswith("c10d::")]
        assert coll and all(o["stats"]["count"] == 0 for o in coll)
        assert r["first_nonfinite"] is None
        reports.append(r)
    merged = tmp_path / "merged.json"
    res = cli("merge", out / "report.rank0.json", out / "report.rank1.json", "-o", merged)
    assert res.returncode == 0, res.stderr
    m = json.loads(merged.read_text())
    assert any("exact sums" in n for n in m["run"]["notes"])
    full = oracle(tmp_path / "prof", 0)["full"]
    for name, want in full.items():
        layer_name = name.rsplit(".", 1)[0]
        [p] = [p for p in layer(m, layer_name)["params"] if p["name"] == name]
        # the shards of each step add up to the whole gradient (oracle: full_tensor())
        assert (p["grad"]["count"], p["grad"]["zeros"], p["grad"]["nan"]) == \
            (want["count"], want["zeros"], want["nan"]), name
        shard_counts = [q["grad"]["count"] for r in reports for q in layer(r, layer_name)["params"]
                        if q["name"] == name]
        assert len(shard_counts) == 2 and all(0 < c < want["count"] for c in shard_counts)


def test_fsdp2_planted_float16_overflow_named_per_rank_and_once_merged(cli, script, tmp_path):
    out = tmp_path / "out"
    # through `ampscope run -- torchrun ...`: every rank runs under `-m ampscope`
    def run():
        return cli("run", "--out", out, "--", "torchrun", "--nnodes", "1", "--nproc_per_node", "2",
                   "--master_addr", "127.0.0.1", "--master_port", free_port(), script, "plant",
                   tmp_path / "prof", timeout=300)
    res = run()
    if res.returncode != 0 and TEARDOWN_ABORT in res.stderr:
        res = run()  # torch's gloo teardown, now and then (conftest)
    assert res.returncode == 0, res.stderr[-4000:]
    for rank in (0, 1):
        r = json.loads((out / f"report.rank{rank}.json").read_text())
        e = r["first_nonfinite"]
        assert e and (e["layer"], e["phase"], e["step"]) == ("2", "forward", 0), e
        assert e["inputs_finite"]
    merged = tmp_path / "merged.json"
    res = cli("merge", out / "report.rank0.json", out / "report.rank1.json", "-o", merged)
    assert res.returncode == 0, res.stderr
    m = json.loads(merged.read_text())
    assert m["first_nonfinite"]["layer"] == "2"
    pins = [rec for rec in m["recommendations"] if rec["action"] == "pin_fp32"]
    assert [rec["layer"] for rec in pins] == ["2"], m["recommendations"]
