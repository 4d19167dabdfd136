#include "lib/pod/eviction.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "lib/pod/pod.h"
#include "lib/pod/qos.h"
#include "lib/pod/quantity.h"

namespace nodelet::pod {

namespace {

struct SignalInfo {
  EvictionSignal signal;
  std::string_view name;
  std::string_view resource;
  std::string_view condition;
};

constexpr SignalInfo kSignals[] = {
    {EvictionSignal::kMemoryAvailable, "memory.available", "memory", "MemoryPressure"},
    {EvictionSignal::kNodeFsAvailable, "nodefs.available", "ephemeral-storage", "DiskPressure"},
    {EvictionSignal::kNodeFsInodesFree, "nodefs.inodesFree", "inodes", "DiskPressure"},
    {EvictionSignal::kImageFsAvailable, "imagefs.available", "ephemeral-storage", "DiskPressure"},
    {EvictionSignal::kImageFsInodesFree, "imagefs.inodesFree", "inodes", "DiskPressure"},
    {EvictionSignal::kPidAvailable, "pid.available", "pids", "PIDPressure"},
};

const SignalInfo& Info(EvictionSignal s) {
  for (const auto& i : kSignals) {
    if (i.signal == s) return i;
  }
  return kSignals[0];  // not reached: every enumerator is listed
}

std::vector<std::string> SplitComma(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string part = text.substr(start, end - start);
    while (!part.empty() && part.front() == ' ') part.erase(part.begin());
    while (!part.empty() && part.back() == ' ') part.pop_back();
    if (!part.empty()) out.push_back(part);
    start = end + 1;
  }
  return out;
}

std::optional<EvictionSignal> SignalByName(std::string_view name) {
  for (const auto& i : kSignals) {
    if (i.name == name) return i.signal;
  }
  return std::nullopt;
}

std::string KnownSignals() {
  std::string out;
  for (const auto& i : kSignals) out += (out.empty() ? "" : ", ") + std::string(i.name);
  return out;
}

// The signal NAME of ENTRY, which must be known and not in `seen` yet (it is added).
Result<EvictionSignal> NewSignal(const std::string& entry, const std::string& name,
                                 std::set<EvictionSignal>* seen) {
  auto signal = SignalByName(name);
  if (!signal) {
    return InvalidArgument("\"" + entry + "\": unknown eviction signal \"" + name +
                           "\" (known: " + KnownSignals() + ")");
  }
  if (!seen->insert(*signal).second) {
    return InvalidArgument("\"" + entry + "\": " + name + " is given twice");
  }
  return *signal;
}

// VALUE of ENTRY: a quantity (bytes or a count) or a percentage; zero leaves both unset.
Status ParseAmount(const std::string& entry, const std::string& value,
                   std::optional<int64_t>* quantity, double* percentage) {
  if (!value.empty() && value.back() == '%') {
    char* end = nullptr;
    const std::string number = value.substr(0, value.size() - 1);
    const double p = std::strtod(number.c_str(), &end);
    if (number.empty() || end != number.c_str() + number.size() || !std::isfinite(p) || p < 0 ||
        p > 100) {
      return InvalidArgument("\"" + entry + "\": a percentage must be within 0% and 100%");
    }
    *percentage = p;
    return Status::Ok();
  }
  auto q = Quantity::Parse(value);
  if (!q.ok()) return InvalidArgument("\"" + entry + "\": " + q.status().message());
  if (q->IsNegative()) {
    return InvalidArgument("\"" + entry + "\": the quantity must not be negative");
  }
  if (!q->IsZero()) *quantity = q->Value();
  return Status::Ok();
}

int64_t Percent(int64_t capacity, double percentage) {
  return static_cast<int64_t>(std::ceil(static_cast<double>(capacity) * percentage / 100.0));
}

}  // namespace

std::string_view SignalName(EvictionSignal signal) { return Info(signal).name; }
std::string_view SignalResource(EvictionSignal signal) { return Info(signal).resource; }
std::string_view SignalCondition(EvictionSignal signal) { return Info(signal).condition; }

int64_t EvictionThreshold::MinAvailable(int64_t capacity) const {
  return quantity ? *quantity : Percent(capacity, percentage);
}

int64_t EvictionThreshold::ReclaimTarget(int64_t capacity) const {
  return MinAvailable(capacity) +
         (min_reclaim ? *min_reclaim : Percent(capacity, min_reclaim_percentage));
}

Result<std::vector<EvictionThreshold>> ParseEvictionThresholds(const std::string& flag, bool hard) {
  std::vector<EvictionThreshold> out;
  std::set<EvictionSignal> seen;
  for (const std::string& entry : SplitComma(flag)) {
    const size_t op = entry.find_first_of("<>=!");
    if (op == std::string::npos || entry[op] != '<' || op + 1 >= entry.size() ||
        std::string("<>=!").find(entry[op + 1]) != std::string::npos) {
      return InvalidArgument("\"" + entry +
                             "\": expected SIGNAL<QUANTITY or SIGNAL<PERCENT% (only \"<\")");
    }
    const std::string value = entry.substr(op + 1);
    auto signal = NewSignal(entry, entry.substr(0, op), &seen);
    if (!signal.ok()) return signal.status();
    EvictionThreshold t;
    t.signal = *signal;
    t.hard = hard;
    t.text = value;
    if (Status s = ParseAmount(entry, value, &t.quantity, &t.percentage); !s.ok()) return s;
    if (!t.quantity && t.percentage == 0) continue;  // disabled
    out.push_back(std::move(t));
  }
  return out;
}

Status ApplySoftGracePeriods(const std::string& flag, DurationParser parse_duration,
                             std::vector<EvictionThreshold>* soft) {
  std::map<EvictionSignal, std::chrono::seconds> periods;
  for (const std::string& entry : SplitComma(flag)) {
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) {
      return InvalidArgument("\"" + entry + "\": expected SIGNAL=DURATION");
    }
    auto signal = SignalByName(entry.substr(0, eq));
    if (!signal) {
      return InvalidArgument("\"" + entry +
                             "\": unknown eviction signal (known: " + KnownSignals() + ")");
    }
    auto d = parse_duration(entry.substr(eq + 1));
    if (!d.ok() || d->count() < 0) {
      return InvalidArgument("\"" + entry + "\": " +
                             (d.ok() ? std::string("must not be negative") : d.status().message()));
    }
    periods[*signal] = std::chrono::duration_cast<std::chrono::seconds>(*d);
  }
  for (auto& t : *soft) {
    auto it = periods.find(t.signal);
    if (it == periods.end()) {
      return InvalidArgument("--eviction-soft " + std::string(SignalName(t.signal)) +
                             " has no grace period in --eviction-soft-grace-period");
    }
    t.grace_period = it->second;
    periods.erase(it);
  }
  if (!periods.empty()) {
    return InvalidArgument("--eviction-soft-grace-period " +
                           std::string(SignalName(periods.begin()->first)) +
                           " has no threshold in --eviction-soft");
  }
  return Status::Ok();
}

Status ApplyMinimumReclaims(const std::string& flag, std::vector<EvictionThreshold>* thresholds) {
  std::set<EvictionSignal> seen;
  for (const std::string& entry : SplitComma(flag)) {
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) {
      return InvalidArgument("\"" + entry + "\": expected SIGNAL=QUANTITY or SIGNAL=PERCENT%");
    }
    const std::string name = entry.substr(0, eq);
    auto signal = NewSignal(entry, name, &seen);
    if (!signal.ok()) return signal.status();
    std::optional<int64_t> quantity;
    double percentage = 0;
    if (Status s = ParseAmount(entry, entry.substr(eq + 1), &quantity, &percentage); !s.ok()) {
      return s;
    }
    bool applied = false;
    for (auto& t : *thresholds) {
      if (t.signal != *signal) continue;
      t.min_reclaim = quantity;
      t.min_reclaim_percentage = percentage;
      applied = true;
    }
    if (!applied) {
      return InvalidArgument("\"" + entry + "\": " + name +
                             " has no threshold in --eviction-hard or --eviction-soft");
    }
  }
  return Status::Ok();
}

std::vector<EvictionThreshold> DefaultHardThresholds() {
  return *ParseEvictionThresholds(kDefaultEvictionHard, true);
}

bool ThresholdMet(const EvictionThreshold& t, const EvictionObservations& observations) {
  auto it = observations.find(t.signal);
  if (it == observations.end() || it->second.capacity <= 0) return false;
  return it->second.available < t.MinAvailable(it->second.capacity);
}

std::vector<EvictionThreshold> EvictionState::Observe(const EvictionObservations& observations,
                                                      int64_t now_ms) {
  std::vector<EvictionThreshold> act;
  acting_.resize(thresholds_.size(), false);
  for (size_t i = 0; i < thresholds_.size(); ++i) {
    const auto& t = thresholds_[i];
    bool met = ThresholdMet(t, observations);
    if (!met && acting_[i]) {
      // Acted on and not yet won back its minimum reclaim: still met (the kubelet's
      // thresholdsNotYetResolved).
      auto it = observations.find(t.signal);
      met = it != observations.end() && it->second.capacity > 0 &&
            it->second.available < t.ReclaimTarget(it->second.capacity);
    }
    acting_[i] = false;
    if (!met) {
      first_met_ms_.erase(i);
      continue;
    }
    condition_seen_ms_[std::string(SignalCondition(t.signal))] = now_ms;
    const int64_t first = first_met_ms_.emplace(i, now_ms).first->second;
    const int64_t grace_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(t.grace_period).count();
    if (t.hard || now_ms - first >= grace_ms) {
      act.push_back(t);
      acting_[i] = true;
    }
  }
  return act;
}

bool EvictionState::Pressure(std::string_view condition, int64_t now_ms) const {
  auto it = condition_seen_ms_.find(condition);
  if (it == condition_seen_ms_.end()) return false;
  return now_ms - it->second < transition_.count() || now_ms == it->second;
}

bool IsEvictionExempt(int32_t priority) { return priority >= 2000000000; }

std::vector<size_t> RankForEviction(EvictionSignal signal,
                                    const std::vector<EvictionCandidate>& pods) {
  std::vector<size_t> order;
  for (size_t i = 0; i < pods.size(); ++i) {
    if (!IsEvictionExempt(pods[i].priority)) order.push_back(i);
  }
  auto usage = [signal](const EvictionCandidate& p) -> std::pair<int64_t, int64_t> {
    switch (signal) {
      case EvictionSignal::kMemoryAvailable:
        return {p.memory_usage, p.memory_request};
      case EvictionSignal::kNodeFsAvailable:
      case EvictionSignal::kImageFsAvailable:
        return {p.storage_usage, p.storage_request};
      case EvictionSignal::kNodeFsInodesFree:
      case EvictionSignal::kImageFsInodesFree:
        return {p.inodes_usage, 0};
      case EvictionSignal::kPidAvailable:
        return {p.processes, 0};
    }
    return {0, 0};
  };
  // PIDs rank by priority, then by processes: not by usage above a request first.
  const bool by_priority_first = signal == EvictionSignal::kPidAvailable;
  // Sort key, smallest first: (no stats, not above its request, priority, -(usage - request)).
  auto key = [&](size_t i) {
    const auto& p = pods[i];
    const auto [used, request] = usage(p);
    const bool above = p.has_stats && (by_priority_first || used > request);
    const int64_t over = p.has_stats ? used - request : 0;
    return std::make_tuple(!p.has_stats, !above, p.priority, -over, p.uid);
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  return order;
}

std::string FormatBytes(int64_t bytes) {
  if (bytes == 0) return "0";
  static constexpr std::pair<int, const char*> kSuffixes[] = {{60, "Ei"}, {50, "Pi"}, {40, "Ti"},
                                                              {30, "Gi"}, {20, "Mi"}, {10, "Ki"}};
  for (const auto& [shift, suffix] : kSuffixes) {
    const int64_t unit = int64_t{1} << shift;
    if (bytes % unit == 0) return std::to_string(bytes / unit) + suffix;
  }
  return std::to_string(bytes);
}

std::string EvictionMessage(const EvictionThreshold& t, const SignalObservation& observed,
                            const EvictionCandidate& pod) {
  const std::string resource(SignalResource(t.signal));
  const bool bytes = resource != "inodes" && resource != "pids";
  auto amount = [bytes](int64_t v) { return bytes ? FormatBytes(v) : std::to_string(v); };
  std::string message = "The node was low on resource: " + resource + ". ";
  message += "Threshold quantity: " + (t.quantity ? amount(*t.quantity) : t.text) +
             ", available: " + amount(observed.available) + ". ";
  for (const auto& c : pod.containers) {
    int64_t used = 0, request = 0;
    switch (t.signal) {
      case EvictionSignal::kMemoryAvailable:
        used = c.memory_usage;
        request = c.memory_request;
        break;
      case EvictionSignal::kNodeFsAvailable:
      case EvictionSignal::kImageFsAvailable:
        used = c.storage_usage;
        request = c.storage_request;
        break;
      default:
        continue;  // the kubelet names no container for inodes or pids
    }
    if (used > request) {
      message += "Container " + c.name + " was using " + amount(used) + ", request is " +
                 amount(request) + ", has larger consumption of " + resource + ". ";
    }
  }
  return message;
}

namespace {

bool AnyEphemeralStorageLimit(const Pod& pod) {
  auto has_limit = [](const Container& c) {
    return c.resources.limits.count("ephemeral-storage") > 0;
  };
  return std::any_of(pod.spec.containers.begin(), pod.spec.containers.end(), has_limit) ||
         std::any_of(pod.spec.init_containers.begin(), pod.spec.init_containers.end(), has_limit);
}

}  // namespace

bool HasLocalStorageLimits(const Pod& pod) {
  for (const auto& v : pod.spec.volumes) {
    if (v.empty_dir && v.empty_dir->size_limit) return true;
  }
  return AnyEphemeralStorageLimit(pod);
}

std::optional<std::string> LocalStorageViolation(const Pod& pod, const PodStorageUsage& usage) {
  for (const auto& v : pod.spec.volumes) {
    if (!v.empty_dir || !v.empty_dir->size_limit) continue;
    const int64_t limit = v.empty_dir->size_limit->Value();
    auto used = usage.volumes.find(v.name);
    if (limit > 0 && used != usage.volumes.end() && used->second > limit) {
      return "Usage of EmptyDir volume \"" + v.name + "\" exceeds the limit \"" +
             v.empty_dir->size_limit->text() + "\". ";
    }
  }
  if (AnyEphemeralStorageLimit(pod)) {
    const int64_t limit = PodResourceTotal(pod, "ephemeral-storage", false, false);
    if (usage.total > limit) {
      return "Pod ephemeral local storage usage exceeds the total limit of containers " +
             FormatBytes(limit) + ". ";
    }
  }
  for (const auto& c : pod.spec.containers) {
    auto limit = c.resources.limits.find("ephemeral-storage");
    if (limit == c.resources.limits.end() || limit->second.Value() == 0) continue;
    auto used = usage.containers.find(c.name);
    if (used != usage.containers.end() && used->second > limit->second.Value()) {
      return "Container " + c.name + " exceeded its local ephemeral storage limit \"" +
             limit->second.text() + "\". ";
    }
  }
  return std::nullopt;
}

}  // namespace nodelet::pod
