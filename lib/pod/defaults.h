// The API server's defaults for a Pod (SetDefaults_* in pkg/apis/core/v1), applied to a decoded
// manifest before validation. docs/pods.md lists them.
#pragma once

#include <string_view>

#include "lib/pod/pod.h"

namespace nodelet::pod {

// Fills every unset field that has a default. Idempotent.
void ApplyPodDefaults(Pod& pod);

// Always when the image has no tag or the tag is "latest" (and no digest), else IfNotPresent.
std::string_view DefaultImagePullPolicy(std::string_view image);

}  // namespace nodelet::pod
