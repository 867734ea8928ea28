// The compile cache's entries: what is stored is found again under its key only; a damaged entry
// (truncated, a flipped byte, foreign bytes) is a miss that removes it and says so; a cache that
// cannot be written is said, not an error.
#include "backends/pjrt/compile_cache.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "tfm/log.h"

namespace tfm {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class CompileCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tfm-compile-cache-" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string read(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  void write(const fs::path& file, const std::string& bytes) {
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  }
  // find(), with what it logged.
  std::optional<std::string> find_logged(const pjrt::CompileCache& cache, const std::string& key,
                                         std::string& log) {
    ::testing::internal::CaptureStderr();
    std::optional<std::string> found = cache.find(key);
    log = ::testing::internal::GetCapturedStderr();
    return found;
  }

  fs::path dir_;
  const std::string payload_{"\x00\x01 compiled bytes \xff", 19};
};

TEST_F(CompileCacheTest, FindsWhatWasStoredUnderItsKeyOnly) {
  const pjrt::CompileCache cache(dir_ / "nested");
  EXPECT_EQ(cache.find("module A"), std::nullopt) << "empty cache";
  cache.store("module A", payload_);
  EXPECT_EQ(cache.find("module A"), payload_);
  EXPECT_EQ(cache.find("module B"), std::nullopt);
  // An entry at A's name holding another key (as a hash collision would) is no hit for A.
  const pjrt::CompileCache other(dir_ / "other");
  other.store("module B", "B's bytes");
  fs::copy_file(other.entry_path("module B"), cache.entry_path("module A"),
                fs::copy_options::overwrite_existing);
  EXPECT_EQ(cache.find("module A"), std::nullopt);
  EXPECT_TRUE(fs::exists(cache.entry_path("module A"))) << "a whole entry is not damaged";
  // No temporary file is left beside the entries.
  for (const auto& entry : fs::directory_iterator(dir_ / "nested")) {
    EXPECT_EQ(entry.path().extension(), ".pjrt") << entry.path();
  }
}

TEST_F(CompileCacheTest, DamagedEntriesAreMissesThatAreRemovedAndSaid) {
  const pjrt::CompileCache cache(dir_);
  cache.store("key", payload_);
  const fs::path file = cache.entry_path("key");
  const std::string whole = read(file);
  const std::vector<std::pair<std::string, std::string>> damages = {
      {"truncated", whole.substr(0, whole.size() - 3)},
      {"flipped byte",
       [&] {
         std::string b = whole;
         b[b.size() - 12] ^= 0x20;  // inside the payload
         return b;
       }()},
      {"trailing bytes", whole + "x"},
      {"foreign file", "ELF\x7f not an entry"},
      {"empty", ""},
  };
  set_log_level(LogLevel::kWarn);
  for (const auto& [name, bytes] : damages) {
    SCOPED_TRACE(name);
    write(file, bytes);
    std::string log;
    EXPECT_EQ(find_logged(cache, "key", log), std::nullopt);
    EXPECT_THAT(log, HasSubstr(file.string()));
    EXPECT_THAT(log, HasSubstr("damaged"));
    EXPECT_FALSE(fs::exists(file)) << "the damaged entry stays";
  }
}

TEST_F(CompileCacheTest, AnUnwritableCacheIsSaidNotThrown) {
  fs::create_directories(dir_);
  write(dir_ / "file", "a file where the cache's folder should be");
  const pjrt::CompileCache cache(dir_ / "file" / "cache");
  set_log_level(LogLevel::kWarn);
  ::testing::internal::CaptureStderr();
  EXPECT_NO_THROW(cache.store("key", payload_));
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("cannot be written"));
  EXPECT_EQ(cache.find("key"), std::nullopt);
}

}  // namespace
}  // namespace tfm
