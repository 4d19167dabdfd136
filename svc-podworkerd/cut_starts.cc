#include "svc-podworkerd/cut_starts.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "lib/common/fs.h"

namespace nodelet::podworkerd {

namespace {

// Room for kMaxEntries lines and as many again appended before a rewrite trims them.
constexpr size_t kMaxLedgerBytes = 2 * CutStartLedger::kMaxEntries * 65 + 4096;

Status WriteAll(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Internal("write '" + path + "': " + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace

bool IsContainerId(const std::string& id) {
  if (id.size() != 64) return false;
  for (char c : id) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Status CutStartLedger::Open(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  path_ = path;
  // ROOT/podworkerd: under nodelet's root directory, which no container can write.
  if (Status s = EnsureDirectory(std::filesystem::path(path).parent_path(), 0700); !s.ok()) {
    path_.clear();
    return s;
  }
  auto content = ReadFileBounded(path, kMaxLedgerBytes);
  if (!content.ok()) {
    if (content.status().code() == StatusCode::kNotFound) return Status::Ok();
    path_.clear();
    return content.status();
  }
  std::istringstream lines(*content);
  std::string line;
  size_t read = 0;
  while (std::getline(lines, line)) {
    ++read;
    if (IsContainerId(line)) AddLocked(line);
  }
  // Trimmed, or lines that were not ids: write back what is kept.
  if (read != order_.size()) return RewriteLocked();
  return Status::Ok();
}

Status CutStartLedger::Note(const std::string& container_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ids_.count(container_id) > 0) return Status::Ok();
  AddLocked(container_id);
  // Ids of another form (a fake runtime's) are kept in memory only.
  if (path_.empty() || !IsContainerId(container_id)) return Status::Ok();
  int fd = open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Internal("open '" + path_ + "': " + std::strerror(errno));
  Status s = WriteAll(fd, container_id + "\n", path_);
  close(fd);
  if (!s.ok()) return s;
  struct stat st {};
  if (stat(path_.c_str(), &st) == 0 &&
      static_cast<size_t>(st.st_size) > (kMaxEntries + kMaxEntries / 2) * 65) {
    return RewriteLocked();
  }
  return Status::Ok();
}

std::set<std::string> CutStartLedger::Ids() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ids_;
}

void CutStartLedger::AddLocked(const std::string& id) {
  if (!ids_.insert(id).second) return;
  order_.push_back(id);
  while (order_.size() > kMaxEntries) {
    ids_.erase(order_.front());
    order_.pop_front();
  }
}

Status CutStartLedger::RewriteLocked() {
  if (path_.empty()) return Status::Ok();
  std::string content;
  for (const auto& id : order_) content += id + "\n";
  return WriteFileAtomically(path_, content, 0600);
}

}  // namespace nodelet::podworkerd
