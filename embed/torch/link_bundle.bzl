"""cc_link_bundle: everything needed to link a C++ library's dependents
elsewhere.

The torch extension has to be compiled against the torch of the host it
runs on (a GPU host's PyTorch 2.x with CUDA, not Debian's 1.13), and that
host has no Bazel. This rule hands over relay as Bazel built it here: every
position-independent object file of the transitive deps, plus a manifest
listing them (`obj PATH`, `archive PATH` where a library has only an
archive, `dylib PATH`) and the link flags they need (`flag FLAG`), in link
order. embed/torch/pack_for_host.sh turns that into a folder a host can
link against (embed/torch/build_against_torch.py).
"""

def _cc_link_bundle_impl(ctx):
    lines = []
    files = []
    for dep in ctx.attr.deps:
        for linker_input in dep[CcInfo].linking_context.linker_inputs.to_list():
            for flag in linker_input.user_link_flags:
                lines.append("flag " + flag)
            for lib in linker_input.libraries:
                objects = lib.pic_objects or lib.objects
                if objects:
                    for o in objects:
                        lines.append("obj " + o.short_path)
                        files.append(o)
                    continue
                archive = lib.pic_static_library or lib.static_library
                if archive:
                    lines.append("archive " + archive.short_path)
                    files.append(archive)
                elif lib.dynamic_library:
                    lines.append("dylib " + lib.dynamic_library.short_path)
                    files.append(lib.dynamic_library)
    manifest = ctx.actions.declare_file(ctx.label.name + ".manifest")
    ctx.actions.write(manifest, "\n".join(lines) + "\n")
    return [DefaultInfo(files = depset([manifest] + files))]

cc_link_bundle = rule(
    implementation = _cc_link_bundle_impl,
    attrs = {
        "deps": attr.label_list(providers = [CcInfo]),
    },
    doc = "Object files and link flags of `deps`, with a manifest.",
)
