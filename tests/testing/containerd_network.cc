// The pod network of a private instance (pod_network.h does the bridge, the slots and the
// iptables rules): set up at its start, its conf list, cleaned when it stops.
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "lib/common/fs.h"
#include "tests/testing/containerd.h"
#include "tests/testing/containerd_internal.h"
#include "tests/testing/harness.h"

namespace nodelet::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kCniConfFile[] = "10-nodelet.conflist";

}  // namespace

namespace containerd_internal {

Status SetUpPodNetwork(const std::string& dir, bool pod_network, PodNetwork& network,
                       CniSlot& slot) {
  std::string cni_dir = dir + "/cni";
  for (const std::string& sub : {cni_dir, cni_dir + "/net.d"}) {
    if (Status s = EnsureDirectory(sub, 0700); !s.ok()) return s;
  }
  std::error_code ec;
  for (const auto& old : fs::directory_iterator(cni_dir + "/net.d", ec)) fs::remove(old.path(), ec);
  if (!pod_network) return Status::Ok();
  auto acquired = CniSlot::Acquire(dir);
  if (!acquired.ok()) return acquired.status();
  slot = std::move(acquired).value();
  network = PodNetworkForSlot(slot.slot());
  std::string ipam = cni_dir + "/ipam";
  fs::remove_all(ipam, ec);
  if (Status s = EnsureDirectory(ipam, 0700); !s.ok()) return s;
  {
    std::ofstream out(cni_dir + "/slot", std::ios::trunc);
    out << network.slot << "\n";
    if (!out.flush()) return ErrnoStatus("write '" + cni_dir + "/slot'", errno);
  }
  if (Status s = AddForwardAcceptRule(network); !s.ok()) return s;
  // Written last, through a rename: containerd watches the directory.
  std::string conf = cni_dir + "/net.d/" + kCniConfFile;
  {
    std::ofstream out(conf + ".tmp", std::ios::trunc);
    out << MakeCniConfList(network, ipam);
    if (!out.flush()) return ErrnoStatus("write '" + conf + ".tmp'", errno);
  }
  if (rename((conf + ".tmp").c_str(), conf.c_str()) != 0) {
    return ErrnoStatus("rename to '" + conf + "'", errno);
  }
  return Status::Ok();
}

void UndoPodNetwork(const std::string& dir, const PodNetwork& network, CniSlot& slot) {
  std::string cni_dir = dir + "/cni";
  if (network.slot >= 0) {
    (void)CleanPodNetworkLeftovers(network);
    std::error_code ec;
    fs::remove_all(cni_dir + "/ipam", ec);
    unlink((cni_dir + "/slot").c_str());
  }
  slot.Release();
}

}  // namespace containerd_internal

using containerd_internal::Trim;

std::string ContainerdInstance::cni_conf_list() const {
  return has_pod_network() ? ReadTextFile(cni_conf_dir() + "/" + kCniConfFile) : "";
}

Status ContainerdInstance::CleanPodNetwork() {
  if (!has_pod_network()) return Status::Ok();
  // An attached instance does not hold the slot (its containerd did, and is gone now): take it,
  // unless another instance took it over after ours died (the lock file names its owner).
  if (!slot_.held()) {
    std::string owner = Trim(ReadTextFile(CniSlotLockPath(network_.slot)));
    while (!owner.empty() && owner.back() == '\n') owner.pop_back();
    if (!owner.empty() && owner != dir_) {
      return FailedPrecondition("CNI slot " + std::to_string(network_.slot) + " belongs to '" +
                                owner + "' now; left alone");
    }
    auto taken = CniSlot::AcquireSlot(network_.slot, dir_);  // cleans leftovers too
    if (taken.ok()) slot_ = std::move(taken).value();
  }
  Status first = CleanPodNetworkLeftovers(network_);
  std::error_code ec;
  fs::remove_all(ipam_data_dir(), ec);
  if (ec && first.ok()) first = Internal("remove '" + ipam_data_dir() + "': " + ec.message());
  unlink((dir_ + "/cni/slot").c_str());
  slot_.Release();
  return first;
}

}  // namespace nodelet::testing
