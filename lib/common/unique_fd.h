// UniqueFd: the one owner of a file descriptor. Move-only; closes it when destroyed or reset,
// never closes -1. release() hands the fd to a caller that takes over closing it.
#pragma once

#include <utility>

namespace nodelet {

class UniqueFd {
 public:
  UniqueFd() = default;
  // Takes `fd` (-1, or any negative value, for none).
  explicit UniqueFd(int fd) : fd_(fd < 0 ? -1 : fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  explicit operator bool() const { return valid(); }
  // Gives up ownership: returns the fd (-1 when none) without closing it.
  int release() { return std::exchange(fd_, -1); }
  // Closes the fd held (if any) and takes `fd` instead.
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

}  // namespace nodelet
