// PlegRuntimeView: the supervisor's RuntimeView (for `nodeletctl runtime`) over its replica of
// plegd's cache. The supervisor polls the mirror in its loop; the view only reads it.
#pragma once

#include "lib/pleg/pleg_mirror.h"
#include "supervisor/service_control.h"

namespace nodelet::supervisor {

class PlegRuntimeView : public RuntimeView {
 public:
  explicit PlegRuntimeView(const pleg::PlegMirror& mirror) : mirror_(mirror) {}
  RuntimeSnapshot Runtime() const override {
    RuntimeSnapshot snap;
    for (const auto& [_, pod] : mirror_.pods()) snap.pods.push_back(pod);
    snap.relist = mirror_.relist();
    if (!mirror_.in_sync()) {
      snap.error = "no current view from plegd (not running, or resynchronising)";
    } else if (!mirror_.relist_error().empty()) {
      snap.error = "plegd's last relist failed: " + mirror_.relist_error();
    }
    return snap;
  }

 private:
  const pleg::PlegMirror& mirror_;
};

}  // namespace nodelet::supervisor
