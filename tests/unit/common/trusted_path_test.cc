// CheckTrustedPath (lib/common/trusted_path.h) and EnsureDirectory's refusal of links, on real
// directories under a mkdtemp dir, with files given to uid 65534 by chown (the tests run as root).
#include "lib/common/trusted_path.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "lib/common/fs.h"
#include "tests/testing/harness.h"

namespace nodelet {
namespace {

constexpr uid_t kOther = 65534;

class TrustedPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (chown to another uid)";
  }
  std::string Dir(const std::string& name, mode_t mode, uid_t uid = 0, gid_t gid = 0) {
    const std::string p = tmp_.Sub(name);
    EXPECT_EQ(mkdir(p.c_str(), 0700), 0) << p;
    EXPECT_EQ(chown(p.c_str(), uid, gid), 0) << p;
    EXPECT_EQ(chmod(p.c_str(), mode), 0) << p;
    return p;
  }
  static Status Check(const std::string& path) {
    return CheckTrustedPath(path, TrustPolicy::ForThisProcess(), "--run-dir");
  }
  testing::TempDir tmp_;
};

TEST_F(TrustedPathTest, AcceptsRootOwnedDirUnderStickyTmp) {
  // mkdtemp's 0700 root dir under /tmp (1777 root): the usual case of every test.
  EXPECT_TRUE(Check(tmp_.path()).ok()) << Check(tmp_.path()).message();
  const std::string d = Dir("run", 0755);
  EXPECT_TRUE(Check(d).ok()) << Check(d).message();
  // Not made yet: its parent is trusted, so nodelet makes it there.
  EXPECT_TRUE(Check(d + "/later/deeper").ok());
}

TEST_F(TrustedPathTest, RefusesDirOwnedByAnotherUser) {
  const std::string d = Dir("run", 0700, kOther, kOther);
  Status s = Check(d);
  ASSERT_EQ(s.code(), StatusCode::kPermissionDenied) << s.message();
  EXPECT_NE(s.message().find("--run-dir '" + d + "'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("owned by uid 65534"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("mode 0700"), std::string::npos) << s.message();
}

TEST_F(TrustedPathTest, RefusesWorldWritableDirEvenSticky) {
  for (mode_t mode : {0777, 01777}) {
    const std::string d = Dir("run" + std::to_string(mode), mode);
    Status s = Check(d);
    EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << d;
    EXPECT_NE(s.message().find("writable by every user"), std::string::npos) << s.message();
  }
}

TEST_F(TrustedPathTest, RefusesGroupWritableDirOfAnUntrustedGroup) {
  const std::string d = Dir("run", 0770, 0, kOther);
  Status s = Check(d);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.message();
  EXPECT_NE(s.message().find("group 65534"), std::string::npos) << s.message();
  // Root's group, or the admin group, may write it.
  const std::string r = Dir("rootgroup", 0770, 0, 0);
  EXPECT_TRUE(Check(r).ok()) << Check(r).message();
  EXPECT_TRUE(CheckTrustedPath(d, TrustPolicy::ForThisProcess(kOther)).ok());
}

TEST_F(TrustedPathTest, RefusesAnAncestorOthersCanWrite) {
  const std::string open = Dir("open", 0777);
  const std::string run = open + "/run";
  ASSERT_EQ(mkdir(run.c_str(), 0700), 0);
  Status s = Check(run);
  ASSERT_EQ(s.code(), StatusCode::kPermissionDenied) << s.message();
  EXPECT_NE(s.message().find("at '" + open + "'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("no sticky bit"), std::string::npos) << s.message();

  const std::string theirs = Dir("theirs", 0755, kOther, kOther);
  const std::string run2 = theirs + "/run";
  ASSERT_EQ(mkdir(run2.c_str(), 0700), 0);
  s = Check(run2);
  ASSERT_EQ(s.code(), StatusCode::kPermissionDenied) << s.message();
  EXPECT_NE(s.message().find("at '" + theirs + "'"), std::string::npos) << s.message();

  // A sticky world-writable ancestor, like /tmp, is fine.
  const std::string sticky = Dir("sticky", 01777);
  const std::string run3 = sticky + "/run";
  ASSERT_EQ(mkdir(run3.c_str(), 0700), 0);
  EXPECT_TRUE(Check(run3).ok()) << Check(run3).message();
}

TEST_F(TrustedPathTest, RefusesALinkAnotherUserOwns) {
  const std::string target = Dir("target", 0700);
  const std::string link = tmp_.Sub("link");
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  // Root's link to a trusted dir: the resolved path is checked and passes.
  EXPECT_TRUE(Check(link).ok()) << Check(link).message();
  ASSERT_EQ(lchown(link.c_str(), kOther, kOther), 0);
  Status s = Check(link);
  ASSERT_EQ(s.code(), StatusCode::kPermissionDenied) << s.message();
  EXPECT_NE(s.message().find("a link is owned by uid 65534"), std::string::npos) << s.message();
}

TEST_F(TrustedPathTest, ChecksWhereARootLinkLeads) {
  const std::string theirs = Dir("theirs", 0700, kOther, kOther);
  const std::string link = tmp_.Sub("link");
  ASSERT_EQ(symlink(theirs.c_str(), link.c_str()), 0);
  Status s = Check(link + "/run");
  ASSERT_EQ(s.code(), StatusCode::kPermissionDenied) << s.message();
  EXPECT_NE(s.message().find("at '" + theirs + "'"), std::string::npos) << s.message();
}

TEST_F(TrustedPathTest, EnsureDirectoryRefusesALinkAndLeavesItsTarget) {
  const std::string target = Dir("target", 0755);
  const std::string link = tmp_.Sub("link");
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  Status s = EnsureDirectory(link, 0700);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'" + link + "' is a symbolic link"), std::string::npos)
      << s.message();
  struct stat st {};
  ASSERT_EQ(stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);  // not chmodded through the link

  // A real directory still gets its mode, made or existing.
  const std::string made = tmp_.Sub("made/sub");
  ASSERT_TRUE(EnsureDirectory(made, 0750).ok());
  ASSERT_EQ(stat(made.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  ASSERT_TRUE(EnsureDirectory(made, 0700).ok());
  ASSERT_EQ(stat(made.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
}

}  // namespace
}  // namespace nodelet
