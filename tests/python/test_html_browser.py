"""The HTML report in a real browser (headless Chromium from Debian, driven by selenium).

The demo report and hand-made reports (clean, NaN on two ranks, 1,000 layers, hostile names) are
rendered with `ampscope html` and loaded from disk. Each page must load without console errors,
show every section, run no injected script, reference nothing outside the file, and its table,
histograms, sort, filter and selectors must work. Screenshots go to <build>/html-screenshots/.
"""
import copy
import json
import math
import os
import shutil
import time

import pytest

from conftest import BUILD

SHOTS = BUILD / "html-screenshots"
SECTIONS = ["summary", "verdict", "recommendations", "layers", "histograms", "gradients",
            "loss-scale", "what-if"]
PWN_IMG = "<img src=x onerror=document.title='pwned'>"
PWN_SCRIPT = "</script><script>window.__pwned=1</script>"
CHROMEDRIVER = "/usr/bin/chromedriver"

# --------------------------------------------------------------------------------- hand-made

FORMATS = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")


def stats(lo, n, scale=10, nan=0, posinf=0, neginf=0, zeros=2):
    """A stats block whose histogram holds scale*(k+1) values in binade lo+k, k < n."""
    hist = {str(lo + k): scale * (k + 1) for k in range(n)}
    finite = sum(hist.values())
    return {"count": finite + zeros + nan + posinf + neginf, "nan": nan, "posinf": posinf,
            "neginf": neginf, "zeros": zeros, "absmax": math.ldexp(1.5, lo + n - 1),
            "absmin_nonzero": math.ldexp(1.0, lo), "mean": 0.0, "rms": 1.0, "exp_hist": hist,
            "overflow": {f: (scale if f == "float8_e4m3fn" and lo + n > 8 else 0) for f in FORMATS},
            "underflow": {f: (scale if f == "float16" and lo < -24 else 0) for f in FORMATS},
            "subnormal": {f: 0 for f in FORMATS}}


def op(name, phase, lo, n, calls=12, **kw):
    low = phase != "optimizer"
    return {"op": name, "phase": phase, "calls": calls, "input_dtype": "float32",
            "compute_dtype": "float16" if low else "float32",
            "output_dtype": "float16" if low else "float32",
            "autocast": "lower_precision" if phase == "forward" else "none",
            "casts": 2 * calls if phase == "forward" else 0, "first_step": 0, "last_step": 11,
            "nonfinite_from_finite": kw.pop("nff", 0), "first_nonfinite_step": -1,
            "stats": stats(lo, n, **kw)}


def linear(name, seed=0):
    return {"name": name, "type": "Linear",
            "ops": [op("aten::linear", "forward", -6 + seed % 4, 10),
                    op("AddmmBackward0", "backward", -30 + seed % 5, 14)],
            "params": [{"name": name + ".weight", "dtype": "float32", "updates": 12,
                        "grad": stats(-32 + seed % 3, 12)}]}


def report(layers, **extra):
    r = {"schema": "ampscope.report/1",
         "run": {"torch_version": "2.11.0", "device": "cpu", "autocast_dtype": "float16",
                 "steps": 12, "started": "2026-12-03T08:00:00Z", "duration_s": 1.5,
                 "command": "python train.py", "rank": 0, "world_size": 1, "every": 1,
                 "shadow": False, "stopped": "", "notes": []},
         "layers": layers, "first_nonfinite": None,
         "loss_scale": [{"step": s, "scale": 65536.0 / (2 ** (s // 3)), "found_inf": s % 3 == 2}
                        for s in range(12)],
         "recommendations": []}
    r.update(extra)
    return r


def model(prefix_blocks=2):
    layers = [{"name": "", "type": "TinyNet", "ops": [], "params": []}]
    for b in range(prefix_blocks):
        layers.append({"name": f"blocks.{b}", "type": "Block", "ops": [], "params": []})
        layers += [linear(f"blocks.{b}.fc1", b), linear(f"blocks.{b}.fc2", b + 1)]
    layers.append(linear("head", 7))
    layers.append({"name": "<outside>", "type": "", "params": [],
                   "ops": [op("aten::cross_entropy_loss", "forward", -3, 4)]})
    return layers


def clean_report():
    return report(model())


def nan_report():
    """Inf in blocks.1.fc2 on rank 1; rank 0 clean: a merged two-rank report."""
    layers = model()
    bad = next(l for l in layers if l["name"] == "blocks.1.fc2")
    bad["ops"][0] = op("aten::linear", "forward", 8, 9, nff=2, posinf=40)
    event = {"step": 7, "phase": "forward", "layer": "blocks.1.fc2", "op": "aten::linear",
             "kind": "inf", "inputs_finite": True, "fp32_also_nonfinite": False,
             "compute_dtype": "float16", "output_stats": None, "rank": 1}
    rec = {"layer": "blocks.1.fc2", "action": "pin_fp32", "severity": "critical",
           "reasons": ["nonfinite_origin", "overflow_float16"],
           "evidence": {"first_nonfinite": {"op": "aten::linear", "step": 7, "kind": "inf"}}}
    r = report(layers, first_nonfinite=event, first_nonfinite_by_rank=[event],
               recommendations=[rec])
    r["run"]["world_size"] = 2
    return r


def big_report(blocks=250):
    """1,000 Linear layers in 250 blocks (1,251 layers with the blocks and the root)."""
    layers = [{"name": "", "type": "Big", "ops": [], "params": []}]
    for b in range(blocks):
        layers.append({"name": f"blocks.{b}", "type": "Block", "params": [],
                       "ops": [op("aten::add", "forward", -4, 8)]})
        for i, leaf in enumerate(("q", "k", "v", "o")):
            l = linear(f"blocks.{b}.{leaf}", b + i)
            l["ops"] += [op("aten::gelu", "forward", -12, 20), op("GeluBackward0", "backward", -40, 26)]
            layers.append(l)
    return report(layers)


def hostile_report():
    layers = model()
    layers[2]["name"] = PWN_IMG
    layers[2]["type"] = PWN_SCRIPT
    layers[2]["ops"][0]["op"] = PWN_SCRIPT
    layers[2]["params"][0]["name"] = PWN_IMG + ".weight"
    layers[3]["name"] = "quote\"d 'name' & <b>bold</b>"
    r = report(layers)
    r["run"]["command"] = "python " + PWN_IMG
    r["run"]["notes"] = [PWN_SCRIPT]
    r["first_nonfinite"] = {"step": 1, "phase": "forward", "layer": PWN_IMG, "op": PWN_SCRIPT,
                            "kind": "nan", "inputs_finite": True, "fp32_also_nonfinite": True,
                            "compute_dtype": "float16", "output_stats": None, "rank": 0}
    r["recommendations"] = [{"layer": PWN_IMG, "action": "fix_model", "severity": "critical",
                             "reasons": ["nonfinite_in_fp32"],
                             "evidence": {"note": PWN_SCRIPT, "op": PWN_IMG}}]
    return r


# --------------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as e:
        pytest.skip(f"selenium is not installed ({e}); tools/install-deps.sh installs it")
    if not shutil.which("chromium") or not os.path.exists(CHROMEDRIVER):
        pytest.skip("chromium / chromium-driver not installed (Debian packages; tools/install-deps.sh)")
    opts = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000", "--disable-extensions"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    except Exception as e:  # the browser itself cannot start here
        pytest.skip(f"headless chromium could not start: {str(e).splitlines()[0]}")
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def pages(tmp_path_factory, cli):
    """Hand-made reports as report.json and their report.html, rendered by `ampscope html`."""
    root = tmp_path_factory.mktemp("html")
    out = {}
    for name, make in (("clean", clean_report), ("nan", nan_report), ("big", big_report),
                       ("hostile", hostile_report)):
        src = root / f"{name}.json"
        src.write_text(json.dumps(make()))
        html = root / f"{name}.html"
        res = cli("html", src, "-o", html)
        assert res.returncode == 0, res.stderr
        out[name] = (json.loads(src.read_text()), html)
    return out


@pytest.fixture(scope="module")
def demo(tmp_path_factory, cli):
    out = tmp_path_factory.mktemp("demo")
    # --scaler: the C++ GradScaler, so the demo's report has a loss-scale curve with skipped steps.
    res = cli("demo", "--device", "cpu", "--dtype", "float16", "--steps", "12", "--quiet", "--scaler",
              "--out", out, timeout=600)
    assert res.returncode == 0, res.stderr
    return json.loads((out / "report.json").read_text()), out / "report.html"


# --------------------------------------------------------------------------------- helpers

def load(driver, path):
    """Opens a report from disk and waits for its script to fill the layer table."""
    from selenium.webdriver.support.ui import WebDriverWait
    driver.get_log("browser")  # drop what an earlier page left
    t0 = time.time()
    driver.get(path.resolve().as_uri())
    WebDriverWait(driver, 60).until(lambda d: d.execute_script(
        "return document.readyState === 'complete' && "
        "document.querySelectorAll('#layer-table tbody tr').length > 0"))
    return time.time() - t0


def severe(driver):
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def check_page(driver, path, shot):
    """Every check that holds for every report page; saves a full-page screenshot."""
    from selenium.webdriver.common.by import By
    assert severe(driver) == []
    for sid in SECTIONS:
        el = driver.find_element(By.ID, sid)
        assert el.is_displayed() and el.size["height"] > 0, sid
    assert driver.execute_script("return typeof window.__pwned") == "undefined"
    assert driver.title.startswith("ampscope report") and driver.title != "pwned"  # title unchanged
    assert driver.execute_script("return document.scripts.length") == 2  # the page's own two
    assert driver.execute_script("return document.images.length") == 0
    refs = driver.execute_script("""
        var out = [];
        document.querySelectorAll('*').forEach(function (e) {
          ['src', 'href', 'xlink:href', 'action', 'poster', 'data'].forEach(function (a) {
            var v = e.getAttribute(a);
            if (v !== null && v.charAt(0) !== '#' && v.indexOf('data:') !== 0) out.push(a + '=' + v);
          });
        });
        return out;""")
    assert refs == []
    assert driver.execute_script("return performance.getEntriesByType('resource').length") == 0
    SHOTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1400, min(height + 40, 12000))
    driver.save_screenshot(str(SHOTS / f"{shot}.png"))
    driver.set_window_size(1400, 1000)
    assert severe(driver) == []


def table_names(driver):
    return driver.execute_script("""
        return Array.prototype.map.call(document.querySelectorAll('#layer-table tr.layer'),
          function (tr) { return tr.querySelector('.lname').title.split(' \\u2014 ')[0]; });""")


def label(name):
    return "(root)" if name == "" else name


def open_details(driver, name):
    """Clicks a layer's name in the table (it must be visible) and returns its detail row."""
    from selenium.webdriver.common.by import By
    index = table_names(driver).index(label(name))
    driver.find_elements(By.CSS_SELECTOR, "#layer-table tr.layer")[index].find_element(
        By.CSS_SELECTOR, "button.lname").click()
    row = driver.find_elements(By.CSS_SELECTOR, "#layer-table tr.layer")[index]  # the table re-rendered
    return row.find_element(By.XPATH, "following-sibling::tr[1]")


# --------------------------------------------------------------------------------- tests

def test_demo_report_in_a_browser(browser, demo):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait
    rep, html = demo
    load(browser, html)
    check_page(browser, html, "demo")
    # Loss-scale curve: one marker per skipped step of the JSON.
    skipped = sum(1 for p in rep["loss_scale"] if p["found_inf"])
    assert len(browser.find_elements(By.CSS_SELECTOR, "#loss-scale g.skip")) == skipped
    # Expanding a layer draws one histogram per op entry and per parameter gradient.
    target = rep["first_nonfinite"]["layer"] if rep["first_nonfinite"] else rep["layers"][-1]["name"]
    layer = next(l for l in rep["layers"] if l["name"] == target)
    detail = open_details(browser, target)
    assert "detail" in detail.get_attribute("class")
    assert len(detail.find_elements(By.CSS_SELECTOR, "svg.histogram")) == len(layer["ops"]) + len(layer["params"])
    assert len(detail.find_elements(By.CSS_SELECTOR, "table.ops tbody tr")) == len(layer["ops"])
    # Sorting by casts: descending, the top row holds the most casts of any layer (from the JSON).
    browser.find_element(By.CSS_SELECTOR, "th[data-key=casts]").click()
    casts = [int(c.text) for c in browser.find_elements(By.CSS_SELECTOR, "#layer-table tr.layer td:nth-child(6)")]
    assert len(casts) == len(rep["layers"])
    assert casts == sorted(casts, reverse=True)
    assert casts[0] == max(sum(o["casts"] for o in l["ops"]) for l in rep["layers"])
    browser.find_element(By.CSS_SELECTOR, "th[data-key=casts]").click()  # ascending
    browser.find_element(By.CSS_SELECTOR, "th[data-key=casts]").click()  # back to the tree
    # Filtering: the rows are exactly the layers whose name, type or op names match.
    query = "ffn.w"
    browser.find_element(By.ID, "layer-filter").send_keys(query)
    want = [label(l["name"]) for l in rep["layers"]
            if query in (l["name"] + " " + l["type"] + " " + " ".join(o["op"] for o in l["ops"])).lower()]
    WebDriverWait(browser, 10).until(lambda d: table_names(d) == want)
    assert want
    # The format selector redraws against another format.
    Select(browser.find_elements(By.CSS_SELECTOR, "select.fmt-select")[0]).select_by_visible_text("float8_e4m3fn")
    assert browser.find_element(By.CSS_SELECTOR, "th[data-key=overflow]").text == "Overflow fp8 e4m3"
    caps = browser.find_elements(By.CSS_SELECTOR, "#agg-hists .cap")
    assert caps and all("in float8_e4m3fn" in c.text for c in caps)
    assert severe(browser) == []


def test_embedded_data_matches_the_json_it_came_from(browser, demo):
    """The page's data block, as the browser parses it, against report.json: same layers in the
    same order, same ops with the same dtypes and counts, same histogram bins."""
    rep, html = demo
    load(browser, html)
    data = browser.execute_script(
        "return JSON.parse(document.getElementById('ampscope-data').textContent)")
    strs = data["strs"]
    assert [l["name"] for l in data["layers"]] == [l["name"] for l in rep["layers"]]

    def bins(st):
        return {str(st[9] + k): n for k, n in enumerate(st[10]) if n}

    def counts(st, key):  # 0 stands for [0, 0, 0, 0]
        return dict(zip(data_formats, st[key] if st[key] else [0] * 4))

    data_formats = [f["name"] for f in data["formats"]]
    for jl, dl in zip(rep["layers"], data["layers"]):
        assert dl["type"] == jl["type"]
        assert len(dl["ops"]) == len(jl["ops"]) and len(dl["params"]) == len(jl["params"])
        for jo, do in zip(jl["ops"], dl["ops"]):
            assert [strs[do[0]], strs[do[1]], do[2], strs[do[3]], strs[do[4]], strs[do[5]], strs[do[6]],
                    do[7], do[10]] == [jo["op"], jo["phase"], jo["calls"], jo["input_dtype"],
                                       jo["compute_dtype"], jo["output_dtype"], jo["autocast"],
                                       jo["casts"], jo["nonfinite_from_finite"]]
            st, js = do[11], jo["stats"]
            assert st[:5] == [js["count"], js["nan"], js["posinf"], js["neginf"], js["zeros"]]
            assert bins(st) == js["exp_hist"]
            assert counts(st, 6) == js["overflow"] and counts(st, 7) == js["underflow"]
            assert counts(st, 8) == js["subnormal"]
        for jp, dp in zip(jl["params"], dl["params"]):
            assert dp[0] == jp["name"] and strs[dp[1]] == jp["dtype"]
            assert dp[3][:5] == [jp["grad"][k] for k in ("count", "nan", "posinf", "neginf", "zeros")]
            assert bins(dp[3]) == jp["grad"]["exp_hist"]
    assert browser.find_element("id", "layer-count").text.endswith(f"of {len(rep['layers'])} layers")


def test_clean_report(browser, pages):
    rep, html = pages["clean"]
    load(browser, html)
    check_page(browser, html, "clean")
    from selenium.webdriver.common.by import By
    banner = browser.find_element(By.ID, "verdict")
    assert "clean" in banner.get_attribute("class") and "Clean" in banner.text
    # Collapsed tree: the root's children are visible, the blocks' children are not.
    names = table_names(browser)
    assert names == ["(root)", "blocks.0", "blocks.1", "head", "<outside>"]
    # Opening blocks.0 shows exactly its two children.
    row = browser.find_elements(By.CSS_SELECTOR, "#layer-table tr.layer")[1]
    row.find_element(By.CSS_SELECTOR, "button.tw").click()
    assert table_names(browser) == ["(root)", "blocks.0", "blocks.0.fc1", "blocks.0.fc2", "blocks.1",
                                    "head", "<outside>"]
    # Loss-scale curve: one marker per skipped step of the JSON.
    skipped = sum(1 for p in rep["loss_scale"] if p["found_inf"])
    assert len(browser.find_elements(By.CSS_SELECTOR, "#loss-scale g.skip")) == skipped
    assert severe(browser) == []


def test_nan_report_with_rank_selector(browser, pages):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select
    rep, html = pages["nan"]
    load(browser, html)
    check_page(browser, html, "nan")
    banner = browser.find_element(By.ID, "verdict")
    assert "bad" in banner.get_attribute("class")
    assert "step 7" in banner.text and "blocks.1.fc2" in banner.text and "Precision problem" in banner.text
    assert browser.find_element(By.ID, "ranks").is_displayed()
    sel = Select(browser.find_element(By.ID, "rank-select"))
    sel.select_by_value("1")
    detail = browser.find_element(By.ID, "rank-detail").text
    assert "Rank 1" in detail and "blocks.1.fc2" in detail and "step 7" in detail
    sel.select_by_value("0")
    assert "no non-finite value" in browser.find_element(By.ID, "rank-detail").text
    # The verdict's link reveals the layer in the table, details open.
    banner.find_element(By.CSS_SELECTOR, "a.goto").click()
    row = browser.find_element(By.CSS_SELECTOR, "#layer-table tr.layer.bad")
    assert "blocks.1.fc2" in row.find_element(By.CSS_SELECTOR, ".lname").get_attribute("title")
    detail_row = row.find_element(By.XPATH, "following-sibling::tr[1]")
    assert len(detail_row.find_elements(By.CSS_SELECTOR, "svg.histogram")) == 3  # 2 ops + 1 param
    # "Only layers with findings" leaves the recommended layer.
    browser.find_element(By.ID, "layer-findings").click()
    assert table_names(browser) == ["blocks.1.fc2"]
    assert severe(browser) == []


def test_thousand_layers_stay_small_and_responsive(browser, pages):
    from selenium.webdriver.common.by import By
    rep, html = pages["big"]
    assert sum(1 for l in rep["layers"] if l["type"] == "Linear") == 1000
    assert html.stat().st_size < 5 * 1024 * 1024
    seconds = load(browser, html)
    assert seconds < 15, f"1,000-layer page took {seconds:.1f} s to load"
    check_page(browser, html, "big")
    # Collapsed by default: only the root and its children (the blocks) are rendered.
    assert len(table_names(browser)) == 1 + 250
    t0 = time.time()
    browser.find_element(By.ID, "expand-all").click()
    assert len(table_names(browser)) == len(rep["layers"])
    assert time.time() - t0 < 5
    browser.find_element(By.ID, "collapse-all").click()
    # Sorting a flat list shows one page of rows and a button for the rest.
    browser.find_element(By.CSS_SELECTOR, "th[data-key=calls]").click()
    assert len(table_names(browser)) == 250
    browser.find_element(By.CSS_SELECTOR, "button.more").click()
    assert len(table_names(browser)) == 500
    assert severe(browser) == []


def test_hostile_names_stay_text(browser, pages):
    from selenium.webdriver.common.by import By
    rep, html = pages["hostile"]
    raw = html.read_text()
    assert "<img src=x" not in raw and raw.count("<script") == 2
    load(browser, html)
    # The hostile layer's details put its op name into the DOM too (as text).
    browser.find_element(By.CSS_SELECTOR, "#verdict a.goto").click()
    check_page(browser, html, "hostile")
    text = browser.find_element(By.TAG_NAME, "body").text
    assert PWN_IMG in text and PWN_SCRIPT in text and "quote\"d 'name' & <b>bold</b>" in text
    assert browser.execute_script("return document.querySelectorAll('b').length") == \
        browser.execute_script("return document.querySelectorAll('main b').length")
    assert not browser.execute_script(
        "return Array.prototype.some.call(document.querySelectorAll('b'), function (b) {"
        " return b.textContent === 'bold'; })")
    assert "Fix the model." in browser.find_element(By.ID, "verdict").text
