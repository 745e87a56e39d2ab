// File: runtime/text_file.h
//
// WriteTextFile: writes a whole text file (flight records, metrics), with an
// Unavailable status naming the path and the OS error when it cannot.
//
// Example:
//   RELAY_RETURN_IF_ERROR(WriteTextFile("/tmp/metrics.prom", text));
#ifndef RELAY_RUNTIME_TEXT_FILE_H_
#define RELAY_RUNTIME_TEXT_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace relay {

absl::Status WriteTextFile(const std::string& path, absl::string_view text);

}  // namespace relay

#endif  // RELAY_RUNTIME_TEXT_FILE_H_
