// UniqueFd: it closes what it owns exactly once (on destruction, reset or move-assignment),
// never -1, and release() hands the fd over unclosed.
#include "lib/common/unique_fd.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <type_traits>
#include <utility>

namespace nodelet {
namespace {

bool IsOpen(int fd) { return fcntl(fd, F_GETFD) != -1 || errno != EBADF; }

int OpenDevNull() {
  int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  return fd;
}

static_assert(!std::is_copy_constructible_v<UniqueFd> && !std::is_copy_assignable_v<UniqueFd>);
static_assert(std::is_nothrow_move_constructible_v<UniqueFd> &&
              std::is_nothrow_move_assignable_v<UniqueFd>);

TEST(UniqueFdTest, EmptyHoldsNothing) {
  UniqueFd none;
  EXPECT_EQ(none.get(), -1);
  EXPECT_FALSE(none.valid());
  EXPECT_FALSE(none);
  EXPECT_EQ(none.release(), -1);
  UniqueFd failed(-1);  // what a failed open() gives
  EXPECT_FALSE(failed);
  failed.reset();
  EXPECT_EQ(failed.get(), -1);
}

TEST(UniqueFdTest, ClosesOnDestruction) {
  int raw = OpenDevNull();
  {
    UniqueFd fd(raw);
    EXPECT_TRUE(fd);
    EXPECT_TRUE(fd.valid());
    EXPECT_EQ(fd.get(), raw);
    EXPECT_TRUE(IsOpen(raw));
  }
  EXPECT_FALSE(IsOpen(raw));
}

TEST(UniqueFdTest, ReleaseHandsItOverUnclosed) {
  int raw = OpenDevNull();
  {
    UniqueFd fd(raw);
    EXPECT_EQ(fd.release(), raw);
    EXPECT_FALSE(fd);
  }
  EXPECT_TRUE(IsOpen(raw));
  close(raw);
}

TEST(UniqueFdTest, ResetClosesTheOldOneAndTakesTheNew) {
  int a = OpenDevNull();
  int b = OpenDevNull();
  UniqueFd fd(a);
  fd.reset(b);
  EXPECT_FALSE(IsOpen(a));
  EXPECT_TRUE(IsOpen(b));
  EXPECT_EQ(fd.get(), b);
  fd.reset(b);  // the same fd again: kept open
  EXPECT_TRUE(IsOpen(b));
  fd.reset();
  EXPECT_FALSE(IsOpen(b));
  EXPECT_FALSE(fd);
}

TEST(UniqueFdTest, MovesTransferOwnership) {
  int a = OpenDevNull();
  int b = OpenDevNull();
  UniqueFd first(a);
  UniqueFd second(std::move(first));
  EXPECT_FALSE(first);  // NOLINT(bugprone-use-after-move): a moved-from UniqueFd is empty
  EXPECT_EQ(second.get(), a);
  UniqueFd third(b);
  third = std::move(second);  // b is closed, a moves on
  EXPECT_FALSE(IsOpen(b));
  EXPECT_TRUE(IsOpen(a));
  EXPECT_EQ(third.get(), a);
  auto& alias = third;
  third = std::move(alias);  // self-move keeps it
  EXPECT_TRUE(IsOpen(a));
  EXPECT_EQ(third.get(), a);
}

}  // namespace
}  // namespace nodelet
