#include "supervisor/systemd_unit_backend.h"

#include <algorithm>

#include "nodelet_version.h"

namespace nodelet::supervisor {

Result<std::unique_ptr<SystemdUnitBackend>> SystemdUnitBackend::Create(
    EventLoop& loop, std::unique_ptr<SystemdBus> bus, SystemdUnitBackendOptions options) {
  std::unique_ptr<SystemdUnitBackend> backend(
      new SystemdUnitBackend(loop, std::move(bus), std::move(options)));
  if (Status s = backend->units_->Watch(); !s.ok()) {
    return Unavailable("systemd mode: " + s.message());
  }
  backend->Register();
  return backend;
}

SystemdUnitBackend::SystemdUnitBackend(EventLoop& loop, std::unique_ptr<SystemdBus> bus,
                                       SystemdUnitBackendOptions options)
    : loop_(loop), options_(std::move(options)), bus_(std::move(bus)) {
  units_ =
      std::make_unique<SystemdServiceControl>(loop_.clock(), *bus_, options_.units, options_.names);
}

void SystemdUnitBackend::Register() {
  const zmq::pollitem_t item = bus_->PollItem();
  sources_.push_back(loop_.AddFd(item.fd, [this] { ProcessBus(); }));
  after_ = AfterIterationWork(loop_, [this] { AfterIteration(); });
}

void SystemdUnitBackend::StartServices() {
  units_->StartAll();
  log_->info("nodelet {} monitoring {} systemd units ({}<service>.service, run dir {})",
             NODELET_VERSION, options_.names.size(), options_.units.unit_prefix, options_.run_dir);
  ArmWake();
}

void SystemdUnitBackend::ProcessBus() {
  bus_->Process();
  units_->RefreshChanged();
}

void SystemdUnitBackend::AfterIteration() {
  // Signals read while a method call waited are queued in sd-bus, not on the fd.
  ProcessBus();
  units_->Tick();
  ArmWake();
}

void SystemdUnitBackend::ArmWake() {
  MonoTime next = units_->NextDeadline();
  // sd-bus has output it could not write yet: the loop watches its fd for input only, so come
  // back at once to flush it (the socket is normally writable again right away).
  if (bus_->PollItem().events & ZMQ_POLLOUT) next = loop_.clock().Now();
  after_.WakeAt(next);
}

}  // namespace nodelet::supervisor
