#include "svc-podworkerd/termination_message.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <deque>

#include "lib/common/fs.h"
#include "lib/common/safe_path.h"
#include "lib/common/unique_fd.h"
#include "lib/common/utf8.h"

namespace nodelet::podworkerd {
namespace {

// The last `max` bytes of a regular file opened without following a link.
std::string ReadTail(const std::string& path, size_t max) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd) return "";
  struct stat st {};
  if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return "";
  off_t start = st.st_size > static_cast<off_t>(max) ? st.st_size - static_cast<off_t>(max) : 0;
  std::string out(max, '\0');
  size_t got = 0;
  while (got < max) {
    ssize_t n = pread(fd.get(), out.data() + got, max - got, start + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

// A container's bytes as status text: the end of `raw`, at most `max` bytes, starting on a
// character boundary, every invalid sequence replaced by U+FFFD, and still at most `max` bytes
// after the replacement (a replacement is three bytes where the invalid byte was one).
std::string AsMessageText(std::string_view raw, size_t max) {
  std::string text = ValidUtf8(CutUtf8Tail(raw, max));
  if (text.size() > max) text = std::string(CutUtf8Tail(text, max));
  return text;
}

}  // namespace

Result<std::string> TerminationMessagePath(const std::string& root_dir, const std::string& uid,
                                           const std::string& container, uint32_t attempt) {
  auto dir = JoinComponent(root_dir + "/pods", uid);
  if (dir.ok()) dir = JoinComponent(*dir + "/containers", container);
  if (!dir.ok()) return dir.status();
  return *dir + "/" + std::to_string(attempt);
}

Status CreateTerminationMessageFile(const std::string& path) {
  const std::string dir = path.substr(0, path.rfind('/'));
  if (Status s = EnsureDirectory(dir, 0750); !s.ok()) return s;
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666));
  if (!fd) return ErrnoStatus("create the termination message file " + path, errno);
  // The umask must not take the others' write bit: the container may run as any user.
  if (fchmod(fd.get(), 0666) != 0) {
    return ErrnoStatus("chmod the termination message file " + path, errno);
  }
  return Status::Ok();
}

std::string ReadTerminationMessage(const std::string& path) {
  // One byte more than the cap: when the file is longer, the start of the window is a cut.
  const std::string raw = ReadTail(path, kMaxTerminationMessageBytes + 1);
  return AsMessageText(raw, kMaxTerminationMessageBytes);
}

size_t TerminationMessageCap(size_t containers) {
  return kMaxPodTerminationMessageBytes / std::max<size_t>(containers, 1);
}

std::string ReadLastLogLines(const std::string& log_path) {
  // Enough of the end for 80 lines of typical length; the line cap and byte cap apply after.
  const std::string tail = ReadTail(log_path, 256 * 1024);
  std::deque<std::string> lines;
  std::string current;
  size_t pos = 0;
  // The first line may be cut by the tail read: it is dropped unless the file was read whole.
  bool first = tail.size() == 256 * 1024;
  while (pos < tail.size()) {
    size_t end = tail.find('\n', pos);
    if (end == std::string::npos) end = tail.size();
    std::string_view line(tail.data() + pos, end - pos);
    pos = end + 1;
    if (first) {
      first = false;
      continue;
    }
    // TIME STREAM TAG TEXT
    size_t a = line.find(' ');
    size_t b = a == std::string_view::npos ? a : line.find(' ', a + 1);
    size_t c = b == std::string_view::npos ? b : line.find(' ', b + 1);
    if (b == std::string_view::npos) continue;
    std::string_view tag = line.substr(b + 1, c == std::string_view::npos ? c : c - b - 1);
    std::string_view text = c == std::string_view::npos ? "" : line.substr(c + 1);
    current.append(text);
    if (tag == "P") continue;  // a partial line goes on in the next entry
    lines.push_back(std::move(current) + "\n");
    current.clear();
    if (lines.size() > kMaxTerminationLogLines) lines.pop_front();
  }
  std::string out;
  for (const auto& l : lines) out += l;
  return AsMessageText(out, kMaxTerminationLogBytes);
}

}  // namespace nodelet::podworkerd
