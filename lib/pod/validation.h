// ValidatePod: the API server's checks for the Pod fields nodelet models (ValidatePodCreate in
// pkg/apis/core/validation), run on a defaulted Pod. docs/pods.md lists every rule.
#pragma once

#include "lib/pod/field_error.h"
#include "lib/pod/pod.h"

namespace nodelet::pod {

// Every problem found, in field order (metadata, then spec); empty when the pod is valid.
FieldErrors ValidatePod(const Pod& pod);

}  // namespace nodelet::pod
