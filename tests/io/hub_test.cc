#include "io/hub.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>

#include "io/io_test_util.h"
#include "tfm/error.h"

namespace tfm {
namespace {

using testing::AllOf;
using testing::HasSubstr;
using testing::ThrowsMessage;
using testing_io::TempDir;
using testing_io::write_file;

// Sets the cache variables for one test and restores them after.
class HubTest : public testing::Test {
 protected:
  static constexpr const char* kVariables[] = {"HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"};
  void SetUp() override {
    for (const char* name : kVariables) {
      const char* value = std::getenv(name);
      saved_.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
      ::unsetenv(name);
    }
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      if (value)
        ::setenv(name.c_str(), value->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
  }
  // Lays out models--Org--Name/{refs/main, snapshots/<hash>/config.json} as huggingface_hub does.
  std::filesystem::path add_snapshot(const std::filesystem::path& cache, const std::string& hash,
                                     bool write_ref) {
    const std::filesystem::path repo = cache / "models--Org--Name";
    write_file(repo / "snapshots" / hash / "config.json", "{}");
    if (write_ref) write_file(repo / "refs" / "main", hash + "\n");
    return repo / "snapshots" / hash;
  }

  TempDir dir_;
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST_F(HubTest, LocalPathsAreReturnedAsIs) {
  EXPECT_EQ(resolve_pretrained(dir_.path().string()), dir_.path());
  write_file(dir_ / "model.safetensors", "");
  EXPECT_EQ(resolve_pretrained((dir_ / "model.safetensors").string()), dir_ / "model.safetensors");
}

TEST_F(HubTest, FindsTheSnapshotNamedByRefsMain) {
  ::setenv("HF_HUB_CACHE", dir_.path().c_str(), 1);
  add_snapshot(dir_.path(), "aaaa", false);
  const auto main = add_snapshot(dir_.path(), "bbbb", true);
  EXPECT_EQ(resolve_pretrained("Org/Name"), main);
}

TEST_F(HubTest, FallsBackToTheOnlySnapshot) {
  ::setenv("HF_HUB_CACHE", dir_.path().c_str(), 1);
  const auto only = add_snapshot(dir_.path(), "cccc", false);
  EXPECT_EQ(resolve_pretrained("Org/Name"), only);
}

TEST_F(HubTest, UsesHfHomeThenXdgCacheHome) {
  ::setenv("XDG_CACHE_HOME", (dir_ / "xdg").c_str(), 1);
  const auto xdg = add_snapshot(dir_ / "xdg" / "huggingface" / "hub", "dddd", true);
  EXPECT_EQ(resolve_pretrained("Org/Name"), xdg);
  ::setenv("HF_HOME", (dir_ / "home").c_str(), 1);
  const auto home = add_snapshot(dir_ / "home" / "hub", "eeee", true);
  EXPECT_EQ(resolve_pretrained("Org/Name"), home);
}

TEST_F(HubTest, NotFoundListsWhereItLookedAndHowToDownload) {
  ::setenv("HF_HUB_CACHE", dir_.path().c_str(), 1);
  EXPECT_THAT([] { resolve_pretrained("Org/Missing"); },
              ThrowsMessage<Error>(AllOf(
                  HasSubstr("model 'Org/Missing' not found"),
                  HasSubstr((dir_ / "models--Org--Missing" / "snapshots").string()),
                  HasSubstr("$HF_HUB_CACHE"), HasSubstr("hf download Org/Missing"),
                  HasSubstr("huggingface-cli download Org/Missing"), HasSubstr("local folder"))));
}

TEST_F(HubTest, NeitherPathNorId) {
  EXPECT_THAT([] { resolve_pretrained("no_such_folder_here"); },
              ThrowsMessage<Error>(
                  AllOf(HasSubstr("'no_such_folder_here' is neither"), HasSubstr("Org/Name"))));
}

}  // namespace
}  // namespace tfm
