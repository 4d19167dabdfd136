#pragma once

#include <string>
#include <string_view>

#include "lib/common/status.h"

namespace nodelet {

// Joins one path component taken from pod data (a uid, a volume or container name) to
// base. The component must be a single name: empty, ".", "..", anything holding "/" or
// NUL is refused, so the result always names an entry directly inside base.
Result<std::string> JoinComponent(std::string_view base, std::string_view component);

}  // namespace nodelet
