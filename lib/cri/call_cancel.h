// CallCancel: lets one thread give up another thread's call in flight (podworkerd cancels the
// image pull of a pod that is being stopped). Cancelling is final: a call bound afterwards is
// cancelled as it binds. Thread-safe; cancelled() takes no lock, so it may be read under the
// binder's own lock.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <utility>

namespace nodelet::cri {

class CallCancel {
 public:
  // Marks the call cancelled and runs the bound action (under this object's lock, so an Unbind
  // returns only once it has run).
  void Cancel() {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    if (bound_) bound_();
  }
  bool cancelled() const { return cancelled_; }

  // The caller's side: `action` (e.g. grpc::ClientContext::TryCancel) runs when Cancel() is
  // called while bound, or now when it was called before. Unbind before what `action` touches
  // goes away. The action must not call back into this object.
  void Bind(std::function<void()> action) {
    std::lock_guard<std::mutex> lock(mu_);
    bound_ = std::move(action);
    if (cancelled_) bound_();
  }
  void Unbind() {
    std::lock_guard<std::mutex> lock(mu_);
    bound_ = nullptr;
  }

 private:
  std::mutex mu_;
  std::atomic<bool> cancelled_{false};
  std::function<void()> bound_;
};

// Binds for one scope; a null CallCancel binds nothing.
class CallCancelScope {
 public:
  CallCancelScope(CallCancel* cancel, std::function<void()> action) : cancel_(cancel) {
    if (cancel_ != nullptr) cancel_->Bind(std::move(action));
  }
  ~CallCancelScope() {
    if (cancel_ != nullptr) cancel_->Unbind();
  }
  CallCancelScope(const CallCancelScope&) = delete;
  CallCancelScope& operator=(const CallCancelScope&) = delete;

 private:
  CallCancel* cancel_;
};

}  // namespace nodelet::cri
