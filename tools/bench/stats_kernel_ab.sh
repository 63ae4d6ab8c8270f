#!/usr/bin/env bash
# In-cache A/B of versions of the CPU stats kernel's AVX2 or AVX-512 build, in one process
# (tools/bench/stats_kernel_ab.cpp): each version of profiler/src/stats_cpu_<isa>.cpp is compiled
# under its own name, as the library compiles it, and every repetition runs them back to back on
# the same randn data. Versions that disagree on any count are flagged MISMATCH.
#
# usage: tools/bench/stats_kernel_ab.sh [--isa avx2|avx512] VERSION... [-- HARNESS ARGS]
#   VERSION       a git revision (the build's source file and the kernel's own headers,
#                 profiler/src/*.h, at it), a path to a version of that file, or "." (the
#                 working tree's); other headers (the public ones: Stats, TensorView) are the
#                 working tree's for every version
#   HARNESS ARGS  --n ELEMENTS (default 262144), --reps N (300), --scale S (1),
#                 --data normal|relu|wide|zeros
# e.g.  tools/bench/stats_kernel_ab.sh HEAD~1 .   -- --reps 500
# Needs `make build` first (links build/lib/libampscope.so for the code the builds share).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
die() { echo "stats_kernel_ab: $*" >&2; exit 2; }
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }

isa=avx2
versions=()
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --isa) [[ $# -ge 2 ]] || die "--isa needs avx2 or avx512"; isa=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; args=("$@"); break ;;
    *) versions+=("$1"); shift ;;
  esac
done
[[ $isa == avx2 || $isa == avx512 ]] || die "--isa: avx2 or avx512, not '$isa'"
[[ ${#versions[@]} -ge 1 ]] || { usage >&2; exit 2; }
[[ $(uname -m) == x86_64 ]] || die "x86-64 only"
src=profiler/src/stats_cpu_$isa.cpp
lib=$root/build/lib/libampscope.so
[[ -f $lib ]] || die "no $lib: run 'make build' first"
grep -q "${isa/avx512/avx512f}" /proc/cpuinfo || die "this CPU cannot run the $isa build"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cxx=${CXX:-c++}
flags=(-O3 -DNDEBUG -fPIC -std=gnu++17 -I "$root/profiler/include" -I "$root/profiler/src" -I "$work")
hdr=$work/stats_kernel_ab_variants.h
table=""
{
  echo '#pragma once'
  echo '#include "stats_kernel.h"'
  echo "inline constexpr const char* kIsaName = \"$isa\";"
  echo 'namespace ampscope::detail {'
} > "$hdr"
pids=()
for i in "${!versions[@]}"; do
  v=${versions[$i]}
  own=()  # a revision's own kernel headers, found before the working tree's
  if [[ $v == . ]]; then
    cp "$root/$src" "$work/v$i.cpp"
  elif [[ -f $v ]]; then
    cp "$v" "$work/v$i.cpp"
  else
    git -C "$root" show "$v:$src" > "$work/v$i.cpp" 2>/dev/null || die "no $src at revision '$v'"
    mkdir "$work/h$i"
    git -C "$root" archive "$v" profiler/src | tar -x -C "$work/h$i" --wildcards '*.h'
    own=(-I "$work/h$i/profiler/src")
  fi
  echo "void ab_run_$i(const TensorView&, i64, i64, Stats&);" >> "$hdr"
  table+="{\"$v\", ampscope::detail::ab_run_$i},"
  # every function the build defines outside its anonymous namespace, renamed per version
  renames=(-Drun_stats_$isa=ab_run_$i -Dstats_${isa}_usable=ab_usable_$i)
  [[ $isa == avx512 ]] && renames+=(-Dstats_avx512_gfni=ab_gfni_$i
    -Dset_stats_avx512_gfni=ab_set_gfni_$i -Dstats_avx512_gfni_usable=ab_gfni_usable_$i)
  "$cxx" "${own[@]}" "${flags[@]}" "${renames[@]}" -c "$work/v$i.cpp" -o "$work/v$i.o" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || die "a version failed to compile"; done
{
  echo '}  // namespace ampscope::detail'
  echo 'struct Variant {'
  echo '  const char* name;'
  echo '  void (*run)(const ampscope::TensorView&, ampscope::detail::i64, ampscope::detail::i64,'
  echo '              ampscope::Stats&);'
  echo '};'
  echo "inline constexpr Variant kVariants[] = {$table};"
  echo "inline constexpr int kNumVariants = ${#versions[@]};"
} >> "$hdr"
"$cxx" "${flags[@]}" -mf16c "$root/tools/bench/stats_kernel_ab.cpp" "$work"/v*.o -o "$work/ab" \
  -L "$root/build/lib" -lampscope -Wl,-rpath,"$root/build/lib"
cpu_flags=$(grep -m1 '^flags' /proc/cpuinfo)
has=""
for f in avx2 avx512f avx512bw avx512_bf16 amx_bf16; do [[ " $cpu_flags " == *" $f "* ]] && has+=" $f"; done
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); ISA:$has"
"$work/ab" "${args[@]}"
