// The ledger of cut starts: what one podworkerd notes, the next one reads.
#include "svc-podworkerd/cut_starts.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace nodelet::podworkerd {
namespace {

std::string IdOf(int n) {
  std::ostringstream out;
  out << std::hex;
  out.width(64);
  out.fill('0');
  out << n;
  return out.str();
}

class CutStartLedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/nodelet-cut-starts.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/podworkerd/cut-starts";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  size_t LinesInFile() const {
    std::ifstream in(path_);
    size_t n = 0;
    for (std::string line; std::getline(in, line);) ++n;
    return n;
  }

  std::string dir_;
  std::string path_;
};

TEST_F(CutStartLedgerTest, WhatOneNotesTheNextReads) {
  {
    CutStartLedger first;
    ASSERT_TRUE(first.Open(path_).ok());  // missing file and directory: an empty ledger
    EXPECT_TRUE(first.Ids().empty());
    ASSERT_TRUE(first.Note(IdOf(1)).ok());
    ASSERT_TRUE(first.Note(IdOf(2)).ok());
    ASSERT_TRUE(first.Note(IdOf(1)).ok());  // once only
  }
  EXPECT_EQ(LinesInFile(), 2u);
  CutStartLedger second;
  ASSERT_TRUE(second.Open(path_).ok());
  EXPECT_EQ(second.Ids(), (std::set<std::string>{IdOf(1), IdOf(2)}));
}

TEST_F(CutStartLedgerTest, LinesThatAreNotIdsAreDroppedAndTheFileMended) {
  std::filesystem::create_directories(dir_ + "/podworkerd");
  {
    std::ofstream out(path_);
    out << IdOf(7) << "\n../../etc/passwd\n" << IdOf(8).substr(0, 20);  // a torn last line
  }
  CutStartLedger ledger;
  ASSERT_TRUE(ledger.Open(path_).ok());
  EXPECT_EQ(ledger.Ids(), (std::set<std::string>{IdOf(7)}));
  EXPECT_EQ(LinesInFile(), 1u);
}

TEST_F(CutStartLedgerTest, OnlyTheNewestEntriesAreKept) {
  CutStartLedger ledger;
  ASSERT_TRUE(ledger.Open(path_).ok());
  const int total = static_cast<int>(CutStartLedger::kMaxEntries) * 2;
  for (int i = 0; i < total; ++i) ASSERT_TRUE(ledger.Note(IdOf(i)).ok());
  auto ids = ledger.Ids();
  EXPECT_EQ(ids.size(), CutStartLedger::kMaxEntries);
  EXPECT_EQ(ids.count(IdOf(0)), 0u);
  EXPECT_EQ(ids.count(IdOf(total - 1)), 1u);
  EXPECT_LE(LinesInFile(), CutStartLedger::kMaxEntries * 3 / 2);
  CutStartLedger reread;
  ASSERT_TRUE(reread.Open(path_).ok());
  EXPECT_EQ(reread.Ids(), ids);
}

TEST_F(CutStartLedgerTest, WithoutAFileTheLedgerIsInMemory) {
  CutStartLedger ledger;
  ASSERT_TRUE(ledger.Note("c0").ok());
  EXPECT_EQ(ledger.Ids().count("c0"), 1u);
  EXPECT_FALSE(std::filesystem::exists(path_));
}

TEST_F(CutStartLedgerTest, AnUnwritableLedgerIsReported) {
  std::filesystem::create_directories(path_);  // a directory where the file should be
  CutStartLedger ledger;
  EXPECT_FALSE(ledger.Open(path_).ok());
  EXPECT_TRUE(ledger.Note(IdOf(3)).ok());  // then in memory
  EXPECT_EQ(ledger.Ids().count(IdOf(3)), 1u);
}

}  // namespace
}  // namespace nodelet::podworkerd
