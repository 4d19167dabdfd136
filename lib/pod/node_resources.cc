#include "lib/pod/node_resources.h"

#include <algorithm>
#include <sstream>

#include "lib/pod/quantity.h"

namespace nodelet::pod {

Result<NodeResourceList> ParseReservation(const std::string& text) {
  NodeResourceList out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty()) continue;
    auto eq = item.find('=');
    if (eq == std::string::npos)
      return InvalidArgument("reservation \"" + item + "\": want NAME=QUANTITY");
    std::string name = item.substr(0, eq);
    auto q = Quantity::Parse(item.substr(eq + 1));
    if (!q.ok()) return InvalidArgument("reservation " + name + ": " + q.status().message());
    if (q->IsNegative()) return InvalidArgument("reservation " + name + ": must not be negative");
    if (name == "cpu")
      out.cpu_milli = q->MilliValue();
    else if (name == "memory")
      out.memory_bytes = q->Value();
    else if (name == "ephemeral-storage")
      out.ephemeral_storage_bytes = q->Value();
    else
      return InvalidArgument("reservation: unknown resource " + name);
  }
  return out;
}

NodeResourceList AllocatableFrom(const NodeResourceList& capacity, const NodeResourceList& system,
                                 const NodeResourceList& kube, const NodeResourceList& eviction) {
  auto left = [](int64_t cap, int64_t a, int64_t b, int64_t c) {
    return std::max<int64_t>(0, cap - a - b - c);
  };
  NodeResourceList out;
  out.cpu_milli = left(capacity.cpu_milli, system.cpu_milli, kube.cpu_milli, eviction.cpu_milli);
  out.memory_bytes =
      left(capacity.memory_bytes, system.memory_bytes, kube.memory_bytes, eviction.memory_bytes);
  out.ephemeral_storage_bytes =
      left(capacity.ephemeral_storage_bytes, system.ephemeral_storage_bytes,
           kube.ephemeral_storage_bytes, eviction.ephemeral_storage_bytes);
  return out;
}

}  // namespace nodelet::pod
