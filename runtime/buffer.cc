#include "runtime/buffer.h"

#include "absl/strings/str_cat.h"

namespace relay {

std::string Device::ToString() const {
  return kind == Kind::kHost ? std::string("host") : absl::StrCat("cuda:", index);
}

}  // namespace relay
