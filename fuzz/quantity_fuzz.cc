// libFuzzer target: Kubernetes quantity parsing (resource requests and limits, emptyDir size
// limits, downward API divisors), with the invariants the rest of nodelet relies on.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "lib/pod/quantity.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nodelet::pod::Quantity;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto q = Quantity::Parse(text);
  if (!q.ok()) {
    if (q.status().message().empty()) std::abort();  // every rejection has a reason
    return 0;
  }
  // Accessors agree on sign and order; parsing is deterministic.
  const int64_t milli = q->MilliValue();
  const int64_t value = q->Value();
  if ((milli < 0) != q->IsNegative() || (value < 0) != q->IsNegative()) std::abort();
  if (q->IsZero() != (milli == 0)) std::abort();
  if (q->text() != text) std::abort();
  auto again = Quantity::Parse(q->NanosString() + "n");
  if (!again.ok() || again->Compare(*q) != 0) std::abort();
  return 0;
}
