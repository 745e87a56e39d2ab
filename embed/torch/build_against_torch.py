"""Builds relay's torch extension against the torch of this host.

Runs in the folder embed/torch/pack_for_host.sh made (on a host with no
Bazel, e.g. a GPU host with PyTorch 2.x): compiles the extension's sources
with torch.utils.cpp_extension (which supplies torch's include paths and its
pybind11 ABI flags) and links relay's prebuilt objects, the carried Abseil
libraries, NCCL and the CUDA runtime. With a CUDA torch the extension is
built with RELAY_TORCH_CUDA (stream-ordered CUDA tensors). The result is
relay_torch/_relay_torch.so beside this file:

    python3 build_against_torch.py [--verbose]
    PYTHONPATH=THIS_FOLDER python3 -c 'import relay_torch'
"""
import argparse
import glob
import os
import shutil
import sys

import torch
import torch.distributed  # noqa: F401  (the extension's base classes)
import torch.utils.cpp_extension as cpp_extension

HERE = os.path.dirname(os.path.abspath(__file__))


def find_shared(soname, hints):
    """The folder holding `soname`: torch's bundled packages, then the hints."""
    dirs = []
    try:
        import nvidia.nccl  # pip's NCCL, what a pip torch loads
        dirs += [os.path.join(p, "lib") for p in nvidia.nccl.__path__]
    except ImportError:
        pass
    dirs += hints
    for d in dirs:
        if os.path.exists(os.path.join(d, soname)):
            return d
    sys.exit(f"build_against_torch.py: {soname} not found in {dirs}")


def link_flags(with_cuda):
    flags = []
    for line in open(os.path.join(HERE, "link.txt")):
        kind, value = line.split(maxsplit=1)
        value = value.strip()
        if kind in ("obj", "lib"):
            flags.append(os.path.join(HERE, value))
        elif value == "-lnccl":
            d = find_shared("libnccl.so.2", ["/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu"])
            flags += [f"-L{d}", "-l:libnccl.so.2", f"-Wl,-rpath,{d}"]
        elif value == "-lcrypto":
            flags.append("-l:libcrypto.so.3")
        elif with_cuda and (value.endswith("libcudart_static.a") or value.startswith(
                ("-L/usr/local/cuda", "-Wl,-rpath,/usr/local/cuda"))):
            pass  # The extension uses torch's CUDA runtime (with_cuda links it).
        else:
            flags.append(value)
    # DT_RPATH, not RUNPATH: the carried Abseil libraries find each other
    # through it too (a RUNPATH applies to this object's own needs only).
    flags += ["-Wl,--disable-new-dtags", "-Wl,-rpath," + os.path.join(HERE, "lib")]
    return flags


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args()
    with_cuda = torch.version.cuda is not None
    build = os.path.join(HERE, "build")
    os.makedirs(build, exist_ok=True)
    sources = [os.path.join(HERE, "src/embed/torch", f)
               for f in ("module.cc", "process_group_relay.cc", "c10d_store.cc")]
    cflags = ["-O2"]
    if int(torch.__version__.split(".")[0]) < 2:
        cflags.append("-std=c++17")  # torch 1.x's default is C++14; 2.x's suffices
    if with_cuda:
        cflags.append("-DRELAY_TORCH_CUDA=1")
    cpp_extension.load(
        name="_relay_torch", sources=sources,
        extra_include_paths=[os.path.join(HERE, "include")],
        extra_cflags=cflags, extra_ldflags=link_flags(with_cuda),
        with_cuda=with_cuda, build_directory=build, verbose=args.verbose,
        is_python_module=True)
    built = glob.glob(os.path.join(build, "_relay_torch*.so"))
    if len(built) != 1:
        sys.exit(f"build_against_torch.py: expected one _relay_torch*.so in {build}, found {built}")
    shutil.copy(built[0], os.path.join(HERE, "relay_torch", "_relay_torch.so"))
    print(f"built relay_torch/_relay_torch.so against torch {torch.__version__}"
          f" ({'CUDA ' + torch.version.cuda if with_cuda else 'CPU'})")


if __name__ == "__main__":
    main()
