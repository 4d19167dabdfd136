// TreeRemover: removes a directory tree that a container could write into, at any depth and
// file count, without following a link and in bounded steps.
//
// It works on directory fds only: each directory is opened beneath its parent with
// openat(O_DIRECTORY | O_NOFOLLOW), its entries are read with readdir and removed with unlinkat
// (AT_REMOVEDIR for the emptied directories). It never recurses (an explicit stack of levels
// holds the names on the way down) and never builds a path, so no depth is too deep. At most
// kOpenLevels + 2 fds are open whatever the depth: the deepest levels keep their directory
// stream; a level above them is opened again from its child by "..", checked to be the very
// directory (device and inode) seen on the way down, before the walk goes on in it. When it is
// not (the tree was moved around meanwhile), the walk starts again from the top, which is safe
// because removing is idempotent.
//
// A link, or anything that is not a directory, inside the tree is removed as itself: a
// directory swapped for a link meanwhile is removed as the link, and nothing outside the tree
// is touched. The top itself: by path, a top that is not a directory is refused (an error, and
// nothing removed); by (parent fd, name) it is removed as itself.
//
// Step(budget) does at most `budget` operations (entries read, opened, removed) and says
// whether the tree is gone, so a caller's event loop can run a tree of a million files as a
// repeated step with other work in between. Not thread-safe; one caller at a time.
#pragma once

#include <dirent.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <string>
#include <vector>

#include "lib/common/status.h"
#include "lib/common/unique_fd.h"

namespace nodelet {

class TreeRemover {
 public:
  // The deepest levels whose directory streams stay open.
  static constexpr size_t kOpenLevels = 16;

  // The tree `path`. The components above its last one are the caller's own and are followed
  // as they are; the last one is never followed (a link there is refused).
  explicit TreeRemover(const std::string& path);
  // The tree `name` (one component) in the directory `parent_fd` (duplicated; the caller keeps
  // its own). `display` names the tree in errors.
  TreeRemover(int parent_fd, std::string name, std::string display);
  ~TreeRemover();
  TreeRemover(const TreeRemover&) = delete;
  TreeRemover& operator=(const TreeRemover&) = delete;

  // Does at most `budget` (>= 1) operations. True when the tree is gone (missing from the
  // start counts as gone); false when there is more to do; an error naming the entry, its depth
  // and why when something cannot be removed (the next Step tries again from where it was).
  Result<bool> Step(size_t budget);

  // Steps until done (no bound): for callers with no loop to share.
  Status RemoveAll();

  // Entries removed so far (files, links and directories).
  size_t removed() const { return removed_; }
  // Operations done so far (what Step's budgets count).
  size_t operations() const { return operations_; }
  const std::string& display() const { return display_; }

 private:
  struct Level {
    std::string name;  // in the level above (the top's: name_ in parent_)
    dev_t dev = 0;
    ino_t ino = 0;
    DIR* dir = nullptr;  // null when closed (re-opened by ".." from below)
  };

  Status OpenTop(bool* gone);
  Status Descend(int parent_dir_fd, const std::string& name, bool* descended);
  // Reads the directory open at `fd` (taken: closed on failure) as the next level down.
  Status PushLevel(int fd, const std::string& name, const struct stat& st);
  // Leaves the deepest level (scanned to its end) and removes it from its parent.
  Status Ascend(bool* finished);
  void CloseAll();
  Status Fail(const std::string& what, const std::string& name, int err) const;

  UniqueFd parent_;
  std::string name_;
  std::string display_;
  Status open_error_;
  bool refuse_top_link_ = false;
  std::vector<Level> levels_;
  bool done_ = false;
  size_t removed_ = 0;
  size_t operations_ = 0;
};

// Removes the tree `path` in one go (TreeRemover::RemoveAll). Missing: OK.
Status RemoveTreeNoFollowAt(const std::string& path);

}  // namespace nodelet
