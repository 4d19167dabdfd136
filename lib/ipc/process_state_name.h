// The operator's name of a service state ("RUNNING", "BACKOFF", ...), as `nodeletctl status`
// prints it and as the supervisor reports it in errors: supervisord's upper-case spelling, one
// definition for both sides of the control socket.
#pragma once

#include "ctl_generated.h"

namespace nodelet::ipc {

inline const char* ProcessStateName(ctl::ProcessState state) {
  switch (state) {
    case ctl::ProcessState::Stopped:
      return "STOPPED";
    case ctl::ProcessState::Starting:
      return "STARTING";
    case ctl::ProcessState::Running:
      return "RUNNING";
    case ctl::ProcessState::Backoff:
      return "BACKOFF";
    case ctl::ProcessState::Stopping:
      return "STOPPING";
    case ctl::ProcessState::Exited:
      return "EXITED";
    case ctl::ProcessState::Fatal:
      return "FATAL";
  }
  return "UNKNOWN";
}

}  // namespace nodelet::ipc
