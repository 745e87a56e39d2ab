// File: testing/fuzz/fingerprint_fuzzer.cc
//
// Fuzzes Fingerprint::Decode (runtime/fingerprint.h): at the mismatch
// checking level every rank reads the others' fingerprints from the store,
// so these bytes come from other processes. Properties: refusals are
// InvalidArgument; what decodes re-encodes to the same bytes, prints, and
// compares equal to itself.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "runtime/fingerprint.h"
#include "testing/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<relay::Fingerprint> f = relay::Fingerprint::Decode(bytes);
  if (!f.ok()) {
    RELAY_FUZZ_CHECK(absl::IsInvalidArgument(f.status()));
    return 0;
  }
  RELAY_FUZZ_CHECK(f->Encode() == bytes);
  RELAY_FUZZ_CHECK(!f->ToString().empty());
  RELAY_FUZZ_CHECK(relay::CompareFingerprints({*f, *f}).ok());
  return 0;
}
