// File: runtime/tsan_suppressions.cc
//
// ThreadSanitizer suppressions, compiled into every binary that links
// relay's requests (and so every test) when built with --config=tsan.
//
// Why: Debian's Abseil is not instrumented. absl::Status shares its message
// through a reference count whose decrement runs inside libabsl_status.so
// (Status::UnrefNonInlined), so TSan sees the increment of a thread that
// copied a status (Request::status()) but not its release, and reports the
// last owner's `delete` on another thread as a race. The count is a correct
// acquire/release pair; nothing of relay's is suppressed.
//
// A definition in the executable is what TSan consults (one in a shared
// library loses to libtsan's own weak default), hence linkstatic and
// alwayslink in BUILD.bazel.
#if defined(__SANITIZE_THREAD__)
extern "C" const char* __tsan_default_suppressions() {
  return "race:absl::*Status::Unref\n"
         "race:absl::*Status::Ref\n";
}
#endif
