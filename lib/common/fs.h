// Small filesystem helpers with Status results.
#pragma once

#include <sys/types.h>

#include <string>

#include "lib/common/status.h"

namespace nodelet {

// Creates `path` and missing parents; sets `mode` on the last component (also when it existed).
Status EnsureDirectory(const std::string& path, mode_t mode);

// Reads a whole file, refusing files larger than `max_bytes`.
Result<std::string> ReadFileBounded(const std::string& path, size_t max_bytes);

}  // namespace nodelet
