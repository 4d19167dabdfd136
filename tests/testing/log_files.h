// Reading container log files in tests: rotated files may be gzip-compressed (zlib).
#pragma once

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace nodelet::testing {

// The file's bytes, decompressed when its name ends in ".gz"; "" when it cannot be read.
inline std::string ReadLogFile(const std::string& path) {
  if (path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0) {
    gzFile gz = gzopen(path.c_str(), "rb");
    if (gz == nullptr) return "";
    std::string out;
    char buf[1 << 16];
    int n = 0;
    while ((n = gzread(gz, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    gzclose(gz);
    return out;
  }
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The names in `dir`, sorted; none when it cannot be read.
inline std::vector<std::string> SortedNames(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    out.push_back(e.path().filename());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace nodelet::testing
