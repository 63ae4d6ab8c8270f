#!/usr/bin/env bash
# Writes the report.json and precision_map.json of three demo runs (float16 with --shadow and
# input stats, bfloat16 every 3rd step, float16 with a GradScaler) into OUT, with the fields that
# change from run to run (started, duration_s, command) taken out: the oracle of a refactor that
# must not change the report. Run it before and after, then `diff -r BEFORE AFTER`.
#   usage: tools/demo_reports.sh OUT [BUILD_DIR]
set -euo pipefail
out=${1:?usage: tools/demo_reports.sh OUT [BUILD_DIR]}
build=${2:-build}
bin="$build/bin/ampscope"
[[ -x $bin ]] || { echo "no $bin: run make build first" >&2; exit 2; }
mkdir -p "$out"
run() {
  local name=$1; shift
  "$bin" demo --quiet --device cpu --out "$out/$name.run" "$@" >/dev/null
  python3 - "$out/$name.run/report.json" "$out/$name.report.json" <<'PY'
import re, sys
text = open(sys.argv[1]).read()  # byte for byte, but for the three fields that vary
text = re.sub(r'"(started|command)":"(?:[^"\\]|\\.)*"', r'"\1":""', text)
text = re.sub(r'"duration_s":[-+0-9.eE]+', '"duration_s":0', text)
open(sys.argv[2], "w").write(text)
PY
  cp "$out/$name.run/precision_map.json" "$out/$name.precision_map.json"
  rm -rf "$out/$name.run"
}
run float16-shadow --dtype float16 --steps 16 --shadow --input-stats
run bfloat16-every3 --dtype bfloat16 --steps 12 --every 3
run float16-scaler --dtype float16 --steps 12 --scaler
echo "wrote $out: compare with diff -r"
