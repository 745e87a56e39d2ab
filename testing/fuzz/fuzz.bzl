"""relay_fuzz_target: one fuzz target, built two ways.

  NAME                a libFuzzer binary (tags manual, fuzz): built only with
                      --config=fuzz (clang, ASan + UBSan), run by
                      testing/fuzz/run.sh.
  NAME_replay_test    the same LLVMFuzzerTestOneInput linked with
                      replay_main.cc and run on the checked-in corpus by
                      `bazel test //...` under any compiler and sanitizer.
"""

def relay_fuzz_target(name, srcs, deps, corpus):
    native.cc_test(
        name = name + "_replay_test",
        size = "small",
        srcs = srcs,
        deps = deps + [":fuzz_check", ":replay_main"],
        data = native.glob(["corpus/" + corpus + "/**"]),
        args = ["testing/fuzz/corpus/" + corpus],
    )
    native.cc_binary(
        name = name,
        testonly = True,
        srcs = srcs,
        deps = deps + [":fuzz_check"],
        linkopts = ["-fsanitize=fuzzer"],
        tags = ["fuzz", "manual"],
    )
