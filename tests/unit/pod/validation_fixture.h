// Helpers of the pod validation unit tests (validation_test.cc and validation_rules_test.cc): the
// full manifest as a valid pod to break, and the first error ValidatePod finds.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "lib/pod/defaults.h"
#include "lib/pod/manifest_parser.h"
#include "lib/pod/validation.h"
#include "tests/unit/pod/test_manifests.h"

namespace nodelet::pod {

// The full manifest, decoded and defaulted: valid.
inline Pod ValidPod() {
  auto r = DecodeManifest(testing::kFullPodYaml, "full.yaml");
  EXPECT_TRUE(r.errors.empty());
  Pod pod = r.pods.at(0).pod;
  ApplyPodDefaults(pod);
  return pod;
}

inline std::string FirstError(const Pod& pod) {
  FieldErrors errs = ValidatePod(pod);
  return errs.empty() ? std::string("<valid>") : errs.front().ToString();
}

}  // namespace nodelet::pod
