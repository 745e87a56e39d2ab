#!/usr/bin/env bash
# File: bench/gpu/stage.sh
#
# Copies what a device lease needs from the folder bench/gpu/build.sh
# filled into a git-ignored folder to carry (the device tool's `carry`),
# stripping the binaries: a lease is refused before it starts when the
# tree and the carried folders pass 64 MiB, and the unstripped folder alone
# is about 88 MB. Name the files the lease's command uses; what they
# run or import from the folder comes with them.
#
# Usage: bench/gpu/stage.sh [--from DIR] [--xz] OUT_DIR [FILE...]
#   --from DIR  the built folder (default gpu_bin)
#   --xz        pack the files into OUT_DIR/bins.tar.xz (about an eighth of
#               the size) with OUT_DIR/run.sh, which unpacks them on the GPU
#               host and runs one: `bash gpu_run/run.sh lease.sh $OUT`
#   FILE...     names inside it (default: every file, not the torch/
#               folder, which comes when named: `torch`)
# Example:
#   bench/gpu/build.sh gpu_bin
#   bench/gpu/stage.sh gpu_run nccl_transport_test collectives \
#     nccl_collectives gpu_env.sh compare_nccl.sh
#   (then run with carry ["gpu_run"]; keep gpu_run/ in .git/info/exclude)
# A lease brings back at most 8 files from $OUT (2 folders deep): pack a
# run's outputs into a few archives before its command ends, or the rest
# is left behind.
set -euo pipefail
from=gpu_bin
xz=0
while [ $# -gt 0 ]; do
  case "$1" in
    --from) from="$2"; shift 2 ;;
    --xz) xz=1; shift ;;
    *) break ;;
  esac
done
out="${1:?usage: stage.sh [--from DIR] OUT_DIR [FILE...]}"
shift
[ -d "$from" ] || { echo "stage.sh: no folder $from (run bench/gpu/build.sh)" >&2; exit 2; }
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  for f in "$from"/*; do
    [ -f "$f" ] || continue
    case "$(basename "$f")" in torch) continue ;; esac
    files+=("$(basename "$f")")
  done
fi
# And what they use beside them, to the end: a script's "$here/NAME"
# (the built folder's files it runs or reads) and a Python script's
# imports of the folder's modules; the relaybench package comes with any
# script that runs it.
uses() {  # FILE: the names in $from it refers to
  head -c 4 "$from/$1" | grep -q "ELF" && return 0
  { grep -o '\$here/[A-Za-z0-9_.]*' "$from/$1" | sed 's|^\$here/||'
    sed -n 's/^\(from\|import\) \([A-Za-z0-9_]*\).*/\2.py/p' "$from/$1"
  } | sort -u | while read -r name; do
    [ -f "$from/$name" ] && echo "$name"
  done
  return 0
}
for ((i = 0; i < ${#files[@]}; i++)); do
  [ -f "$from/${files[i]}" ] || continue  # Reported below.
  for name in $(uses "${files[i]}"); do
    [[ " ${files[*]} " == *" $name "* ]] || files+=("$name")
  done
done
rm -rf "$out"
mkdir -p "$out"
for f in "${files[@]}"; do
  if [ "$f" = torch ] && [ -d "$from/torch" ]; then  # Only when named.
    cp -r "$from/torch" "$out/"
    continue
  fi
  [ -f "$from/$f" ] || { echo "stage.sh: $from/$f does not exist" >&2; exit 2; }
  cp "$from/$f" "$out/"
  chmod u+w "$out/$f"
  if head -c 4 "$out/$f" | grep -q "ELF"; then strip "$out/$f"; fi
done
if [ -d "$from/relaybench" ] && grep -lq "relaybench" "${files[@]/#/$from/}" 2>/dev/null; then
  cp -r "$from/relaybench" "$out/"
fi
if [ "$xz" = 1 ]; then
  packed="$(mktemp -d)"
  tar cJf "$packed/bins.tar.xz" -C "$out" .
  rm -rf "$out"
  mkdir -p "$out"
  mv "$packed/bins.tar.xz" "$out/"
  rmdir "$packed"
  cat >"$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# Unpacks bins.tar.xz (bench/gpu/stage.sh --xz) into a fresh folder and runs
# one of its files with the rest of the arguments: run.sh FILE ARGS...
set -eu
file="${1:?usage: run.sh FILE ARGS...}"
shift
dir="$(mktemp -d /tmp/relay_bins.XXXXXX)"
tar xJf "$(dirname "$0")/bins.tar.xz" -C "$dir"
exec bash "$dir/$file" "$@"
RUN
fi
size=$(du -sm "$out" | cut -f1)
echo "staged ${#files[@]} files in $out: $size MB"
if [ "$size" -gt 40 ]; then
  echo "stage.sh: $size MB is close to the 64 MiB a lease carries with the tree;" \
       "name fewer files, or pack them with --xz" >&2
fi
