#!/usr/bin/env bash
# File: embed/torch/pack_for_host.sh
#
# Packs what a host with another torch (a GPU host's PyTorch 2.x with CUDA)
# needs to build relay's torch extension there without Bazel: the
# extension's sources, relay's and Abseil's headers, relay's objects as
# Bazel built them here (//embed/torch:relay_link_bundle, position
# independent, UCX left out), Debian's Abseil shared libraries, and
# build_against_torch.py, which compiles and links the extension with
# torch.utils.cpp_extension on that host.
#
# Usage: embed/torch/pack_for_host.sh OUT_DIR
# Then on the host: python3 OUT_DIR/build_against_torch.py
#   (writes OUT_DIR/relay_torch/_relay_torch.so; put OUT_DIR on PYTHONPATH
#   and `import relay_torch`).
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:?usage: embed/torch/pack_for_host.sh OUT_DIR}"
bazel build --define=relay_ucx=off //embed/torch:relay_link_bundle >&2
manifest=bazel-bin/embed/torch/relay_link_bundle.manifest
rm -rf "$out"
mkdir -p "$out/obj" "$out/lib" "$out/include" "$out/src/embed/torch" "$out/relay_torch"
# Objects under unique flat names, in link order.
: >"$out/link.txt"
while read -r kind value; do
  case "$kind" in
    obj)
      name="$(tr '/' '_' <<<"$value")"
      cp -f "bazel-bin/$value" "$out/obj/$name"
      echo "obj obj/$name" >>"$out/link.txt" ;;
    flag)
      case "$value" in
        -labsl_*)  # Debian's shared Abseil, carried (the host has none).
          lib="$(readlink -f "/usr/lib/x86_64-linux-gnu/lib${value#-l}.so")"
          soname="$(objdump -p "$lib" | awk '/SONAME/ {print $2}')"
          cp -f "$lib" "$out/lib/$soname"
          echo "lib lib/$soname" >>"$out/link.txt" ;;
        *) echo "flag $value" >>"$out/link.txt" ;;
      esac ;;
    *) echo "pack_for_host.sh: cannot carry '$kind $value'" >&2; exit 1 ;;
  esac
done <"$manifest"
# Headers: relay's (paths kept) and Abseil's.
find relay.h runtime collectives transports embed/torch -name '*.h' \
  -exec cp --parents -f {} "$out/include/" \;
cp -rf /usr/include/absl "$out/include/"
cp -f embed/torch/module.cc embed/torch/process_group_relay.cc \
  embed/torch/c10d_store.cc "$out/src/embed/torch/"
cp -f embed/torch/relay_torch/__init__.py "$out/relay_torch/"
cp -f embed/torch/build_against_torch.py "$out/"
echo "packed into $out/: $(ls "$out/obj" | wc -l) objects, $(ls "$out/lib" | wc -l) libraries" >&2
