// NODELET_CHECK(condition) << "message": for invariants of nodelet's own code that no input, peer
// or runtime can break (a broken one is a bug, and going on would act on corrupt state). When the
// condition is false it writes "FILE:LINE: check failed: CONDITION: MESSAGE" to stderr and
// aborts, so the service's supervisor restarts it and the core dump shows where. Anything that
// input can cause is a Status instead (lib/common/status.h), never a CHECK.
#pragma once

#include <cstdlib>
#include <iostream>
#include <sstream>

namespace nodelet::internal {

// Collects the message of a failed check; its destructor reports and aborts.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition) {
    stream_ << file << ":" << line << ": check failed: " << condition;
  }
  [[noreturn]] ~CheckFailure() {
    std::cerr << stream_.str() << std::endl;
    std::abort();
  }
  CheckFailure(const CheckFailure&) = delete;
  CheckFailure& operator=(const CheckFailure&) = delete;
  template <class T>
  CheckFailure& operator<<(const T& part) {
    if (!has_message_) stream_ << ": ";
    has_message_ = true;
    stream_ << part;
    return *this;
  }

 private:
  std::ostringstream stream_;
  bool has_message_ = false;
};

// Lets `NODELET_CHECK(x) << ...` be one expression whose message parts are evaluated only when
// the check fails.
struct CheckVoidify {
  void operator&(const CheckFailure&) {}
};

}  // namespace nodelet::internal

#define NODELET_CHECK(condition)                      \
  (condition) ? (void)0                               \
              : ::nodelet::internal::CheckVoidify() & \
                    ::nodelet::internal::CheckFailure(__FILE__, __LINE__, #condition)
