"""cuda_library: CUDA sources compiled by nvcc into a cc_library.

Each .cu file becomes one object through nvcc (sm_90 machine code for Hopper,
plus compute_90 PTX that newer GPUs' drivers compile at load), which the
cc_library links with the static CUDA runtime. Where CUDA was not found at
configure time (@local_cuda//:defs.bzl HAVE_CUDA), `fallback_srcs` (plain C++)
are compiled instead, so dependents build either way; the library's header
tells its users how to ask whether the device code is there.

Example:
    cuda_library(
        name = "device_reduce",
        srcs = ["device_reduce.cu"],
        fallback_srcs = ["device_reduce_stub.cc"],
        hdrs = ["device_reduce.h"],
        deps = ["//runtime:data_type"],
    )

`device_hdrs` are headers of other packages that the .cu files include
(device code shared between libraries, e.g. //runtime:device_arithmetic.cuh):
nvcc sees them; the fallback build does not need them.
"""

load("@local_cuda//:defs.bzl", "HAVE_CUDA")

NVCC_FLAGS = [
    "-std=c++17",
    "-O3",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
    "-Xcompiler=-fPIC",
    "--expt-relaxed-constexpr",
]

def cuda_library(name, srcs, hdrs = [], deps = [], fallback_srcs = [], device_hdrs = [], includes = [], visibility = None, **kwargs):
    if not HAVE_CUDA:
        native.cc_library(
            name = name,
            srcs = fallback_srcs,
            hdrs = hdrs,
            deps = deps,
            visibility = visibility,
            **kwargs
        )
        return
    objects = []
    for src in srcs:
        obj = name + "_" + src.replace("/", "_").replace(".cu", ".o")
        native.genrule(
            name = obj + "_nvcc",
            srcs = [src] + hdrs + device_hdrs + ["@local_cuda//:cuda_headers"],
            outs = [obj],
            tools = ["@local_cuda//:nvcc.sh"],
            # Its own temporary folder: nvcc names its files by process id,
            # which sandboxes running side by side share (seen: a second
            # nvcc lost the first's file, "cudafe1.cpp: No such file").
            cmd = " ".join([
                "export TMPDIR=$$(mktemp -d) &&",
                "$(location @local_cuda//:nvcc.sh)",
                " ".join(NVCC_FLAGS),
                "-I.",
                "-I$(GENDIR)",
                "-I/usr/include",
                "-c $(location %s)" % src,
                "-o $@",
                "&& rm -rf $$TMPDIR",
            ]),
        )
        objects.append(obj)
    native.cc_library(
        name = name,
        srcs = objects,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart"],
        # Dependents link it as an archive, where the static CUDA runtime
        # resolves its references (a shared object's would stay undefined).
        linkstatic = True,
        visibility = visibility,
        **kwargs
    )
