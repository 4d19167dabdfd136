// The private containerd's pod network (docs/runtime.md, "The pod network"): a CNI bridge of its
// own per ContainerdInstance, in a slot N that is unique among the processes of this machine.
// Slot N means bridge `nlbrN`, CNI network `nodelet-N` and subnet number N of 198.18.0.0/15
// (198.18.0.0/24 ... 198.19.255.0/24). A slot is held by flock() on /run/nodelet-cni/slot-N.lock;
// the lock's open file is handed to containerd too, so the slot stays held while the instance's
// containerd runs (also after `nodelet-containerd up` exited).
#pragma once

#include <string>
#include <vector>

#include "lib/common/status.h"

namespace nodelet::testing {

inline constexpr char kCniSlotDir[] = "/run/nodelet-cni";
inline constexpr char kCniBinDir[] = "/usr/lib/cni";
inline constexpr char kCniBridgePrefix[] = "nlbr";
inline constexpr char kCniNetworkPrefix[] = "nodelet-";
// libcni's cache of ADD results (containerd 1.6 keeps libcni's default cache dir).
inline constexpr char kCniResultsDir[] = "/var/lib/cni/results";
inline constexpr int kCniSlots = 512;  // /24s in 198.18.0.0/15

// What slot N is called on the host.
struct PodNetwork {
  int slot = -1;
  std::string bridge;     // nlbrN
  std::string network;    // nodelet-N
  std::string subnet;     // 198.18.x.0/24
  std::string gateway;    // 198.18.x.1, the bridge's address
  std::string ip_prefix;  // "198.18.x.": every pod IP starts with it
};

PodNetwork PodNetworkForSlot(int slot);

// The CNI network configuration list for `net`: bridge (isGateway, no ipMasq, hairpin,
// host-local IPAM over the subnet with `ipam_data_dir`, no routes) and portmap (hostPorts).
// Exposed for tests.
std::string MakeCniConfList(const PodNetwork& net, const std::string& ipam_data_dir);

// A held slot: the flock'ed lock file stays open until Release() or destruction.
class CniSlot {
 public:
  CniSlot() = default;
  ~CniSlot() { Release(); }
  CniSlot(CniSlot&& other) noexcept;
  CniSlot& operator=(CniSlot&& other) noexcept;
  CniSlot(const CniSlot&) = delete;
  CniSlot& operator=(const CniSlot&) = delete;

  // Takes a free slot, trying from a random start. The owner's directory is written into the lock
  // file (for people reading /run/nodelet-cni). A slot whose previous owner died without cleaning
  // up (bridge, iptables rules, libcni results) is cleaned before it is returned.
  static Result<CniSlot> Acquire(const std::string& owner_dir);
  // Takes slot `slot` if nobody holds it (e.g. to clean up after an instance whose containerd is
  // gone); FAILED_PRECONDITION when it is held.
  static Result<CniSlot> AcquireSlot(int slot, const std::string& owner_dir);

  bool held() const { return fd_ >= 0; }
  int slot() const { return slot_; }
  int fd() const { return fd_; }
  // Removes the lock file (while still holding it, so no one can lock a file about to vanish),
  // then closes it.
  void Release();
  // Closes this process's descriptor and leaves the file: for when another process (the
  // instance's containerd) keeps holding the lock.
  void Close();

 private:
  int slot_ = -1;
  int fd_ = -1;
};

std::string CniSlotLockPath(int slot);

// Removes what the network of `net` left on the host: the bridge, every iptables rule (nat and
// filter) that names its network, bridge or subnet, the per-container chains those rules jump to
// (portmap's CNI-DN-*), and libcni's cached results for the network. Every step runs; returns the
// first failure.
Status CleanPodNetworkLeftovers(const PodNetwork& net);

// The instance's FORWARD rule: accept traffic between the bridge's ports (pod to pod), whatever
// the chain's policy (br_netfilter sends bridged frames through FORWARD). Removed by
// CleanPodNetworkLeftovers (its comment names the network).
Status AddForwardAcceptRule(const PodNetwork& net);

// iptables rules (iptables-save lines of the nat and filter tables, "-A CHAIN ...") that name
// `net`'s network, bridge or subnet.
std::vector<std::string> IptablesRulesOf(const PodNetwork& net);

// Whether a network interface with this name exists.
bool LinkExists(const std::string& name);

}  // namespace nodelet::testing
