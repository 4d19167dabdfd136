// What the fake CRI runtime's sources share (not an API: fake_cri_runtime.h is): the error a
// call returns, id generation, and the prefix and label matching of the List calls' filters.
// fake_cri_runtime.cc holds the fake's core (call names, failure and hang injection, call
// counts, the clock, Version and Status); fake_cri_sandboxes.cc, fake_cri_containers.cc and
// fake_cri_images.cc hold the calls on each kind of object.
#pragma once

#include <cstdint>
#include <string>

#include "lib/common/status.h"
#include "tests/fakes/fake_cri_runtime.h"

namespace nodelet::testing::fake_cri_internal {

// A call's failure as a real client returns it: "CRI <call> failed: <CODE>: <message>".
Status CallError(CriCall call, StatusCode code, const std::string& message);

bool HasPrefix(const std::string& s, const std::string& prefix);

template <typename Map>
bool LabelsMatch(const Map& labels,
                 const google::protobuf::Map<std::string, std::string>& selector) {
  for (const auto& [k, v] : selector) {
    auto it = labels.find(k);
    if (it == labels.end() || it->second != v) return false;
  }
  return true;
}

// 64 hex digits that look random (ids differ from the first digit on, like containerd's),
// deterministic for a given counter value.
std::string MakeId(uint64_t counter);

}  // namespace nodelet::testing::fake_cri_internal
