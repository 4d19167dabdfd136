#include "tests/testing/pod_network.h"

#include <fcntl.h>
#include <net/if.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "tests/testing/harness.h"

namespace nodelet::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

// iptables and ip live in /usr/sbin or /sbin, which a test's PATH may lack.
std::string Tool(const std::string& name) {
  for (const char* dir : {"/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"}) {
    std::string path = dir + name;
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  return name;
}

// RunCommand, which throws when it cannot start the program; Stop() runs in destructors.
CommandResult Run(const std::vector<std::string>& argv) {
  try {
    return RunCommand(argv, seconds(20));
  } catch (const std::exception& e) {
    CommandResult failed;
    failed.output = e.what();
    return failed;
  }
}

bool NameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
}

// Whether `text` contains `token` as a whole name (not as part of a longer one: "nlbr3" is not in
// "nlbr31", "nodelet-3" not in "nodelet-31").
bool HasName(const std::string& text, const std::string& token) {
  for (size_t at = text.find(token); at != std::string::npos; at = text.find(token, at + 1)) {
    bool start_ok = at == 0 || !NameChar(text[at - 1]);
    size_t end = at + token.size();
    bool end_ok = end >= text.size() || !NameChar(text[end]);
    if (start_ok && end_ok) return true;
  }
  return false;
}

// Whether `text` contains an address that starts with `prefix` ("198.18.3."), not as the tail of
// a longer number.
bool HasAddressPrefix(const std::string& text, const std::string& prefix) {
  for (size_t at = text.find(prefix); at != std::string::npos; at = text.find(prefix, at + 1)) {
    if (at == 0 || !(std::isdigit(static_cast<unsigned char>(text[at - 1])) || text[at - 1] == '.'))
      return true;
  }
  return false;
}

bool RuleNames(const std::string& rule, const PodNetwork& net) {
  return HasName(rule, net.network) || HasName(rule, net.bridge) ||
         HasAddressPrefix(rule, net.ip_prefix);
}

// The jump target of an iptables-save rule ("-j TARGET"), or "".
std::string JumpTarget(const std::string& rule) {
  std::istringstream in(rule);
  std::string word;
  while (in >> word) {
    if (word == "-j" || word == "-g") {
      std::string target;
      in >> target;
      return target;
    }
  }
  return "";
}

// Per-container chains that portmap (CNI-DN-*) and bridge's ipMasq (CNI-*, not the shared
// CNI-HOSTPORT-* ones) create; they belong to the container whose rules jump to them.
bool PerContainerChain(const std::string& chain) {
  return chain.rfind("CNI-", 0) == 0 && chain.rfind("CNI-HOSTPORT-", 0) != 0;
}

struct TableDump {
  std::set<std::string> chains;
  std::vector<std::string> rules;  // "-A CHAIN ..."
};

Result<TableDump> SaveTable(const std::string& table) {
  auto saved = Run({Tool("iptables-save"), "-t", table});
  if (saved.exit_code != 0) {
    return Internal("iptables-save -t " + table + " failed: " + saved.output);
  }
  TableDump dump;
  std::istringstream in(saved.output);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(":", 0) == 0) {
      dump.chains.insert(line.substr(1, line.find(' ') - 1));
    } else if (line.rfind("-A ", 0) == 0) {
      dump.rules.push_back(line);
    }
  }
  return dump;
}

std::string ChainOf(const std::string& rule) {
  std::istringstream in(rule.substr(3));
  std::string chain;
  in >> chain;
  return chain;
}

Status CleanTable(const std::string& table, const PodNetwork& net) {
  auto dump = SaveTable(table);
  if (!dump.ok()) return dump.status();
  std::set<std::string> owned;
  std::vector<std::string> ours;
  for (const auto& rule : dump->rules) {
    if (!RuleNames(rule, net)) continue;
    ours.push_back(rule);
    std::string target = JumpTarget(rule);
    if (PerContainerChain(target) && dump->chains.count(target) > 0) owned.insert(target);
  }
  if (ours.empty() && owned.empty()) return Status::Ok();
  std::string script = "*" + table + "\n";
  for (const auto& rule : ours) {
    if (owned.count(ChainOf(rule)) > 0) continue;  // flushed below
    script += "-D " + rule.substr(3) + "\n";
  }
  for (const auto& chain : owned) script += "-F " + chain + "\n";
  for (const auto& chain : owned) script += "-X " + chain + "\n";
  script += "COMMIT\n";
  char path[] = "/tmp/nodelet-iptables-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return ErrnoStatus("create a temporary iptables-restore file", errno);
  bool written = write(fd, script.data(), script.size()) == static_cast<ssize_t>(script.size());
  close(fd);
  Status result;
  if (!written) {
    result = Internal("cannot write '" + std::string(path) + "'");
  } else {
    auto restored = Run({Tool("iptables-restore"), "--noflush", path});
    if (restored.exit_code != 0) {
      result = Internal("iptables-restore (table " + table + ") failed: " + restored.output +
                        "\ninput:\n" + script);
    }
  }
  unlink(path);
  return result;
}

}  // namespace

PodNetwork PodNetworkForSlot(int slot) {
  PodNetwork net;
  net.slot = slot;
  net.bridge = kCniBridgePrefix + std::to_string(slot);
  net.network = kCniNetworkPrefix + std::to_string(slot);
  std::string base = "198." + std::to_string(18 + slot / 256) + "." + std::to_string(slot % 256);
  net.ip_prefix = base + ".";
  net.subnet = base + ".0/24";
  net.gateway = base + ".1";
  return net;
}

std::string MakeCniConfList(const PodNetwork& net, const std::string& ipam_data_dir) {
  nlohmann::json bridge = {
      {"type", "bridge"},
      {"bridge", net.bridge},
      {"isGateway", true},
      {"isDefaultGateway", false},
      {"ipMasq", false},
      {"hairpinMode", true},
      {"ipam",
       {{"type", "host-local"},
        {"dataDir", ipam_data_dir},
        {"ranges", nlohmann::json::array({nlohmann::json::array(
                       {{{"subnet", net.subnet}, {"gateway", net.gateway}}})})}}},
  };
  nlohmann::json portmap = {
      {"type", "portmap"},
      {"capabilities", {{"portMappings", true}}},
  };
  nlohmann::json list = {
      {"cniVersion", "0.4.0"},
      {"name", net.network},
      {"plugins", nlohmann::json::array({bridge, portmap})},
  };
  return list.dump(2) + "\n";
}

std::string CniSlotLockPath(int slot) {
  return std::string(kCniSlotDir) + "/slot-" + std::to_string(slot) + ".lock";
}

CniSlot::CniSlot(CniSlot&& other) noexcept : slot_(other.slot_), fd_(other.fd_) {
  other.fd_ = -1;
  other.slot_ = -1;
}

CniSlot& CniSlot::operator=(CniSlot&& other) noexcept {
  if (this != &other) {
    Release();
    slot_ = other.slot_;
    fd_ = other.fd_;
    other.fd_ = -1;
    other.slot_ = -1;
  }
  return *this;
}

void CniSlot::Release() {
  if (fd_ < 0) return;
  // Unlinked while locked: whoever opened this file meanwhile finds, after its flock, that the
  // path no longer names it, and opens the path again.
  unlink(CniSlotLockPath(slot_).c_str());
  close(fd_);
  fd_ = -1;
}

void CniSlot::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

Result<CniSlot> CniSlot::AcquireSlot(int slot, const std::string& owner_dir) {
  if (slot < 0 || slot >= kCniSlots) return InvalidArgument("no CNI slot " + std::to_string(slot));
  if (mkdir(kCniSlotDir, 0755) != 0 && errno != EEXIST) {
    return ErrnoStatus(std::string("create '") + kCniSlotDir + "'", errno);
  }
  std::string path = CniSlotLockPath(slot);
  for (int attempt = 0; attempt < 5; ++attempt) {
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return ErrnoStatus("open '" + path + "'", errno);
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      int err = errno;
      close(fd);
      if (err == EWOULDBLOCK)
        return FailedPrecondition("CNI slot " + std::to_string(slot) + " is held");
      return ErrnoStatus("flock '" + path + "'", err);
    }
    struct stat held {
    }, named{};
    if (fstat(fd, &held) != 0 || stat(path.c_str(), &named) != 0 || held.st_dev != named.st_dev ||
        held.st_ino != named.st_ino) {
      close(fd);  // released and unlinked by its owner meanwhile: open the path again
      continue;
    }
    CniSlot result;
    result.slot_ = slot;
    result.fd_ = fd;
    std::string owner = owner_dir + "\n";
    if (ftruncate(fd, 0) != 0 || pwrite(fd, owner.data(), owner.size(), 0) < 0) {
      return ErrnoStatus("write '" + path + "'", errno);
    }
    // A previous owner that died may have left its bridge, rules or cached results behind.
    if (Status s = CleanPodNetworkLeftovers(PodNetworkForSlot(slot)); !s.ok()) return s;
    return result;
  }
  return Unavailable("CNI slot " + std::to_string(slot) + ": lock file keeps changing");
}

Result<CniSlot> CniSlot::Acquire(const std::string& owner_dir) {
  std::random_device random;
  int start = static_cast<int>(random() % kCniSlots);
  for (int i = 0; i < kCniSlots; ++i) {
    auto slot = AcquireSlot((start + i) % kCniSlots, owner_dir);
    if (slot.ok() || slot.status().code() != StatusCode::kFailedPrecondition) return slot;
  }
  return Status(StatusCode::kResourceExhausted,
                "all " + std::to_string(kCniSlots) + " CNI slots in " + kCniSlotDir + " are held");
}

bool LinkExists(const std::string& name) { return if_nametoindex(name.c_str()) != 0; }

Status CleanPodNetworkLeftovers(const PodNetwork& net) {
  Status first;
  auto keep = [&](Status s) {
    if (first.ok() && !s.ok()) first = std::move(s);
  };
  if (LinkExists(net.bridge)) {
    auto deleted = Run({Tool("ip"), "link", "del", net.bridge});
    if (deleted.exit_code != 0 && LinkExists(net.bridge)) {
      keep(Internal("ip link del " + net.bridge + " failed: " + deleted.output));
    }
  }
  for (const char* table : {"nat", "filter"}) keep(CleanTable(table, net));
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(kCniResultsDir, ec)) {
    if (entry.path().filename().string().rfind(net.network + "-", 0) == 0) {
      std::error_code ec2;
      fs::remove(entry.path(), ec2);
      if (ec2) keep(Internal("remove '" + entry.path().string() + "': " + ec2.message()));
    }
  }
  return first;
}

Status AddForwardAcceptRule(const PodNetwork& net) {
  auto added =
      Run({Tool("iptables"), "-w", "5", "-t", "filter", "-I", "FORWARD", "-i", net.bridge, "-o",
           net.bridge, "-m", "comment", "--comment", net.network + " pod to pod", "-j", "ACCEPT"});
  if (added.exit_code != 0) {
    return Internal("iptables -I FORWARD for " + net.bridge + " failed: " + added.output);
  }
  return Status::Ok();
}

std::vector<std::string> IptablesRulesOf(const PodNetwork& net) {
  std::vector<std::string> out;
  for (const char* table : {"nat", "filter"}) {
    auto dump = SaveTable(table);
    if (!dump.ok()) {
      out.push_back(dump.status().message());
      continue;
    }
    for (const auto& rule : dump->rules) {
      if (RuleNames(rule, net)) out.push_back(std::string(table) + ": " + rule);
    }
  }
  return out;
}

}  // namespace nodelet::testing
