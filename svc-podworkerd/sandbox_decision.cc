#include "svc-podworkerd/sandbox_decision.h"

#include <algorithm>
#include <cctype>

namespace nodelet::podworkerd {

std::vector<SandboxView> SandboxViews(const ipc::pleg::PodRecordT* record) {
  std::vector<SandboxView> out;
  if (record == nullptr) return out;
  for (const auto& s : record->sandboxes) {
    SandboxView v;
    v.id = s->id;
    v.ready = s->state == ipc::pleg::SandboxState::Ready;
    v.attempt = s->attempt;
    v.created_at_ns = s->created_at_ns;
    v.ip = s->ip;
    v.host_network = s->host_network;
    out.push_back(std::move(v));
  }
  return out;
}

std::optional<uint32_t> HighestAttempt(const std::vector<SandboxView>& sandboxes) {
  std::optional<uint32_t> best;
  for (const auto& s : sandboxes) best = std::max(best.value_or(0), s.attempt);
  return best;
}

SandboxDecision DecideSandbox(const pod::Pod& pod, const std::vector<SandboxView>& sandboxes) {
  SandboxDecision d;
  if (sandboxes.empty()) {
    d.create = true;
    return d;
  }
  const SandboxView* newest = &sandboxes.front();
  int ready = 0;
  for (const auto& s : sandboxes) {
    if (s.ready) ++ready;
    if (s.created_at_ns > newest->created_at_ns ||
        (s.created_at_ns == newest->created_at_ns && s.attempt > newest->attempt)) {
      newest = &s;
    }
  }
  if (ready > 1) {
    d.reason = std::to_string(ready) + " sandboxes are ready";
  } else if (!newest->ready) {
    d.reason = "sandbox " + newest->id.substr(0, 12) + " is not ready";
  } else if (newest->host_network != pod.spec.host_network) {
    d.reason = "the pod's network namespace changed";
  } else if (!pod.spec.host_network && newest->ip.empty()) {
    d.reason = "sandbox " + newest->id.substr(0, 12) + " has no IP (its network namespace is gone)";
  } else {
    d.keep_id = newest->id;
    d.attempt = newest->attempt;
    return d;
  }
  d.create = true;
  d.attempt = *HighestAttempt(sandboxes) + 1;
  for (const auto& s : sandboxes) {
    if (s.ready) d.stop.push_back(s.id);
  }
  return d;
}

std::string SandboxNameHolder(const std::string& message) {
  if (message.find("failed to reserve sandbox name") == std::string::npos) return "";
  static constexpr char kMarker[] = "is reserved for \"";
  auto at = message.find(kMarker);
  if (at == std::string::npos) return "";
  at += sizeof(kMarker) - 1;
  auto end = message.find('"', at);
  if (end == std::string::npos || end == at) return "";
  std::string id = message.substr(at, end - at);
  // A CRI id is hex; anything else is not an id we would act on.
  if (!std::all_of(id.begin(), id.end(),
                   [](char c) { return std::isalnum(static_cast<unsigned char>(c)); })) {
    return "";
  }
  return id;
}

}  // namespace nodelet::podworkerd
