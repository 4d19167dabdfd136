// The RFC 3339 functions under lib/pod's names, for the callers that still spell them pod::
// (pod::UnixTime is the type of StaticPodOrigin::seen). They live in lib/common/rfc3339.h.
#pragma once

#include "lib/common/rfc3339.h"

namespace nodelet::pod {

using ::nodelet::FormatRfc3339;
using ::nodelet::FormatRfc3339Nano;
using ::nodelet::ParseRfc3339;
using ::nodelet::UnixTime;

}  // namespace nodelet::pod
