// Helpers of the manifest decoder's unit tests (manifest_parser_test.cc and
// manifest_fields_test.cc): a manifest decoded as if read from kSource, and the single error of a
// result that must hold one.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "lib/pod/manifest_parser.h"

namespace nodelet::pod {

using ::testing::HasSubstr;
using ::testing::StartsWith;

inline constexpr char kSource[] = "/etc/nodelet/manifests/web.yaml";

inline ManifestParseResult Decode(std::string_view content, const ParseOptions& options = {}) {
  return DecodeManifest(content, kSource, options);
}

// The single error of a one-error result.
inline std::string OnlyError(const ManifestParseResult& r) {
  EXPECT_TRUE(r.pods.empty());
  EXPECT_EQ(r.errors.size(), 1u);
  return r.errors.empty() ? std::string() : r.errors.front().message;
}

}  // namespace nodelet::pod
