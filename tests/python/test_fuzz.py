"""Fuzzing the readers with a real report: a few hundred seeded mutations of the demo's
report.json (values, types, structure, bytes) go through everything a user can run on a report
(summary, HTML, map, diff, merge) in one process; each must read as `ok` or as one error line
naming the file, never a crash, hang or other exception. A sample goes through the real CLI
(exit 0 or 2 with one `ampscope: error:` line, no traceback), and mutated precision maps through
the Python front end (MapError with one line, same reader as the CLI)."""
import copy
import json
import os
import random
import subprocess

import pytest

from conftest import BUILD

SEED = 15
MUTATIONS = 300


@pytest.fixture(scope="module")
def real_report(tmp_path_factory, cli):
    out = tmp_path_factory.mktemp("fuzz-demo")
    res = cli("demo", "--device", "cpu", "--dtype", "float16", "--steps", "3", "--quiet",
              "--input-stats", "--out", out, timeout=300)
    assert res.returncode == 0, res.stderr
    return json.loads((out / "report.json").read_text())


def paths(node, prefix=()):
    """Every (path, value) in a JSON tree."""
    yield prefix, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from paths(v, prefix + (i,))


HOSTILE = ["\x1b[2J\x1b]0;pwned\x07", "a\nVerdict: clean", "\u202egnp.exe", "\xff",
           "", "x" * 5000, "+3", "03", " 3"]
VALUES = [None, -1, -(2 ** 63), 2 ** 63, 2 ** 64, 0, 1.5, -0.0, True, [], {}, "nan", [[[]]]]


def mutate_value(doc, rng):
    """Replaces or deletes one value somewhere in the report."""
    where, _ = rng.choice(list(paths(doc))[1:])
    parent = doc
    for k in where[:-1]:
        parent = parent[k]
    key = where[-1]
    roll = rng.random()
    if roll < 0.15 and isinstance(parent, dict):
        del parent[key]
    elif roll < 0.3 and isinstance(parent, dict):  # a key the readers parse (exp_hist, formats)
        parent[rng.choice(HOSTILE)] = parent.pop(key)
    else:
        parent[key] = rng.choice(VALUES + HOSTILE)
    return json.dumps(doc)


def mutate_structure(doc, rng):
    """Relations and structure: duplicate layers, swapped ranges, deep nesting, ranks."""
    kind = rng.randrange(5)
    if kind == 0 and doc["layers"]:
        doc["layers"].append(copy.deepcopy(rng.choice(doc["layers"])))
    elif kind == 1:
        doc["run"]["rank"] = doc["run"]["world_size"] + rng.randrange(3)
    elif kind == 2:
        deep = "[" * rng.choice([100, 10000])  # unclosed as well as too deep
        return json.dumps(doc)[:-1] + ', "deep": ' + deep
    elif kind == 3:
        layer = rng.choice([l for l in doc["layers"] if l["ops"]])
        st = rng.choice(layer["ops"])["stats"]
        st["absmin_nonzero"], st["absmax"] = (st["absmax"] or 1) * 2, st["absmin_nonzero"] or 0.5
    else:
        doc["run"]["every"] = 0
    return json.dumps(doc)


def mutate_bytes(text, rng):
    """Truncation, flipped bytes, BOM, NaN and 1e400 literals."""
    data = text.encode()
    kind = rng.randrange(5)
    if kind == 0:
        return data[:rng.randrange(len(data))]
    if kind == 1:
        b = bytearray(data)
        for _ in range(rng.randrange(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if kind == 2:
        return b"\xef\xbb\xbf" + data
    literal = b"NaN" if kind == 3 else b"1e400"
    i = data.find(b'"absmax":')
    return data[:i + 9] + literal + data[data.find(b",", i):]


def mutations(report):
    rng = random.Random(SEED)
    text = json.dumps(report)
    for i in range(MUTATIONS):
        roll = rng.random()
        if roll < 0.6:
            yield mutate_value(copy.deepcopy(report), rng).encode()
        elif roll < 0.8:
            yield mutate_structure(copy.deepcopy(report), rng).encode()
        else:
            yield mutate_bytes(text, rng)


def test_hundreds_of_mutations_read_ok_or_one_error_line(real_report, tmp_path):
    files = []
    for i, data in enumerate(mutations(real_report)):
        f = tmp_path / f"m{i:03d}.json"
        f.write_bytes(data)
        files.append(str(f))
    res = subprocess.run([str(BUILD / "tests" / "ampscope-report-fuzz"), *files],
                         capture_output=True, text=True, timeout=240, errors="replace")
    lines = res.stdout.splitlines()
    assert res.returncode == 0, "\n".join(l for l in lines if l.startswith("BUG"))[:3000]
    assert len(lines) == len(files)  # one line per file: no crash part-way
    errors = [l for l in lines if l != "ok"]
    for f, line in zip(files, lines):
        if line != "ok":
            assert line.startswith("error report.") and f in line, line
    # The mutations are mostly bad: most must be refused, and some (deleting an optional
    # field, a harmless value) read fine.
    assert len(errors) > MUTATIONS // 2 and len(errors) < MUTATIONS
    by_id = {l.split()[1] for l in errors}
    assert {"report.value", "report.type", "report.parse", "report.depth"} <= by_id, by_id


def test_cli_sample_exits_0_or_2_with_one_line(real_report, tmp_path, cli):
    for i, data in enumerate(list(mutations(real_report))[::15]):
        f = tmp_path / f"c{i:02d}.json"
        f.write_bytes(data)
        res = cli("summary", f, timeout=60)
        assert res.returncode in (0, 2), (f, res.returncode, res.stderr[-2000:])
        assert "Traceback" not in res.stderr and "terminate called" not in res.stderr
        if res.returncode == 2:
            assert res.stderr.count("\n") == 1 and res.stderr.startswith(f"ampscope: error: {f}:")
        else:  # printed names carry no raw control characters
            assert not any(c in res.stdout for c in "\x1b\x07\u202e")


def test_mutated_maps_through_python_are_one_line_errors(tmp_path):
    import ampscope
    rng = random.Random(SEED)
    good = {"schema": "ampscope.precision_map/1", "pin_fp32": ["a.b"], "why": {"a.b": ["x"]}}
    refused = 0
    for i in range(100):
        doc = copy.deepcopy(good)
        text = mutate_value(doc, rng).encode() if i % 3 else mutate_bytes(json.dumps(good), rng)
        f = tmp_path / f"map{i}.json"
        f.write_bytes(text)
        try:
            ampscope.load_map(str(f))
        except ampscope.MapError as e:
            refused += 1
            assert str(e).startswith(str(f) + ":") and "\n" not in str(e), str(e)
    assert refused > 30
    with pytest.raises(ampscope.MapError, match="nested deeper"):
        f.write_text('{"schema": "ampscope.precision_map/1", "pin_fp32": ' + "[" * 10000 + "]" * 10000 + "}")
        ampscope.load_map(str(f))


def test_fifo_is_refused_not_waited_on(tmp_path, cli):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    for args in (("summary", fifo), ("diff", fifo, fifo), ("demo", "--map", fifo, "--steps", "1")):
        res = cli(*args, timeout=60)
        assert res.returncode == 2 and "not a regular file" in res.stderr, res.stderr
    import ampscope
    with pytest.raises(ampscope.MapError, match="not a regular file"):
        ampscope.load_map(str(fifo))
