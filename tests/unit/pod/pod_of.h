// A pod for the lib/pod unit tests, from the spec part of a manifest.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "lib/pod/defaults.h"
#include "lib/pod/manifest_parser.h"
#include "lib/pod/validation.h"

namespace nodelet::pod {

// A pod whose spec is `spec` (indented two spaces), decoded, defaulted and validated; a decode
// or validation error fails the calling test.
inline Pod PodOf(const std::string& spec) {
  auto r = DecodeManifest(
      "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\nspec:\n" + spec,
      "p.yaml");
  EXPECT_TRUE(r.errors.empty()) << r.errors[0].message;
  if (r.pods.empty()) return Pod{};
  Pod pod = r.pods[0].pod;
  ApplyPodDefaults(pod);
  for (const auto& e : ValidatePod(pod)) ADD_FAILURE() << e.ToString();
  return pod;
}

}  // namespace nodelet::pod
