// configuration_doc: prints docs/configuration.md, generated from relay's
// configuration table (runtime/config.h).
//
//   bazel run //tools:configuration_doc > docs/configuration.md
#include <cstdio>
#include <string>

#include "runtime/config.h"

int main() {
  const std::string page = relay::ConfigurationMarkdown();
  std::fwrite(page.data(), 1, page.size(), stdout);
  return 0;
}
