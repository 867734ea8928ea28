// --device neuron: where tfm looks for AWS Neuron's PJRT plugin, what it sets in the environment
// for it, and the Python it starts for the plugin's libneuronxla callbacks. No Neuron device is
// here, so the CLI tests install a stand-in: a libneuronxla package whose libneuronpjrt.so is
// XLA's CPU plugin and whose __init__.py records what it saw, in a virtual environment's layout.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <glob.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "backends/pjrt/neuron_install.h"
#include "pjrt_c_api.h"
#include "support/fixtures.h"
#include "support/run_binary.h"
#include "tfm/error.h"

namespace tfm::pjrt {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// A fresh folder for one test, removed after it.
class TempDir {
 public:
  TempDir()
      : path_(fs::temp_directory_path() /
              ("tfm_neuron_" + std::to_string(::getpid()) + "_" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

GetEnv env_of(const std::map<std::string, std::string>& values) {
  return [values](const char* name) -> const char* {
    auto it = values.find(name);
    return it == values.end() ? nullptr : it->second.c_str();
  };
}

// venv/lib/python`version`/site-packages/libneuronxla with a libneuronpjrt.so (a link to
// `plugin`, or an empty file) and an __init__.py of `init` text.
fs::path make_package(const fs::path& venv, const std::string& version, const std::string& plugin,
                      const std::string& init) {
  const fs::path package = venv / "lib" / ("python" + version) / "site-packages" / "libneuronxla";
  fs::create_directories(package);
  if (plugin.empty()) {
    std::ofstream(package / "libneuronpjrt.so") << "";
  } else {
    fs::create_symlink(plugin, package / "libneuronpjrt.so");
  }
  std::ofstream(package / "__init__.py") << init;
  return package;
}

TEST(NeuronInstall, FoundInTheVirtualEnvironmentWithItsPython) {
  TempDir dir;
  const fs::path package = make_package(dir.path() / "venv", "3.10", "", "");
  const NeuronInstall install = find_neuron_install(
      "", env_of({{"VIRTUAL_ENV", (dir.path() / "venv").string()},
                  {"HOME", (dir.path() / "home").string()}}));
  EXPECT_EQ(install.plugin, (package / "libneuronpjrt.so").string());
  EXPECT_EQ(install.site_packages, package.parent_path().string());
  EXPECT_EQ(install.python_version, "3.10");
}

TEST(NeuronInstall, FoundUnderHomeWhenNoVirtualEnvironmentHasIt) {
  TempDir dir;
  make_package(dir.path() / "venv-without", "3.11", "", "");
  fs::remove(dir.path() /
             "venv-without/lib/python3.11/site-packages/libneuronxla/libneuronpjrt.so");
  const fs::path package = make_package(dir.path() / "home/.local", "3.12", "", "");
  const NeuronInstall install =
      find_neuron_install("", env_of({{"VIRTUAL_ENV", (dir.path() / "venv-without").string()},
                                      {"HOME", dir.path().string() + "/home"}}));
  EXPECT_EQ(install.plugin, (package / "libneuronpjrt.so").string());
  EXPECT_EQ(install.python_version, "3.12");
}

TEST(NeuronInstall, NeuronLibraryPathNamesTheFileOrItsFolder) {
  TempDir dir;
  const fs::path package = make_package(dir.path() / "venv", "3.10", "", "");
  const fs::path elsewhere = dir.path() / "lib";
  fs::create_directories(elsewhere);
  std::ofstream(elsewhere / "libneuronpjrt.so") << "";
  const std::map<std::string, std::string> base{{"VIRTUAL_ENV", (dir.path() / "venv").string()}};
  auto with = base;
  with["NEURON_LIBRARY_PATH"] = elsewhere.string();
  NeuronInstall install = find_neuron_install("", env_of(with));
  EXPECT_EQ(install.plugin, (elsewhere / "libneuronpjrt.so").string());
  // Outside a package: the Python part is the libneuronxla the search finds.
  EXPECT_EQ(install.site_packages, package.parent_path().string());

  with["NEURON_LIBRARY_PATH"] = (elsewhere / "libneuronpjrt.so").string();
  install = find_neuron_install("", env_of(with));
  EXPECT_EQ(install.plugin, (elsewhere / "libneuronpjrt.so").string());

  with["NEURON_LIBRARY_PATH"] = (dir.path() / "missing.so").string();
  EXPECT_THAT([&] { find_neuron_install("", env_of(with)); },
              ::testing::ThrowsMessage<Error>(
                  AllOf(HasSubstr("NEURON_LIBRARY_PATH"), HasSubstr("missing.so"),
                        HasSubstr("does not exist"))));
  with["NEURON_LIBRARY_PATH"] = dir.path().string();
  EXPECT_THAT([&] { find_neuron_install("", env_of(with)); },
              ::testing::ThrowsMessage<Error>(
                  AllOf(HasSubstr("NEURON_LIBRARY_PATH"), HasSubstr("holds no libneuronpjrt.so"))));
}

TEST(NeuronInstall, AGivenPluginIsTakenAndAMissingOneNamed) {
  TempDir dir;
  std::ofstream(dir.path() / "plugin.so") << "";
  const NeuronInstall install = find_neuron_install(
      (dir.path() / "plugin.so").string(),
      env_of({{"NEURON_LIBRARY_PATH", "/not/looked/at"}, {"HOME", dir.path().string()}}));
  EXPECT_EQ(install.plugin, (dir.path() / "plugin.so").string());
  EXPECT_THAT([&] { find_neuron_install((dir.path() / "nope.so").string(), env_of({})); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("--pjrt-plugin"),
                                                    HasSubstr("nope.so"))));
}

TEST(NeuronInstall, NotFoundNamesEveryPlaceLookedAt) {
  TempDir dir;
  EXPECT_THAT(
      [&] {
        find_neuron_install("", env_of({{"VIRTUAL_ENV", (dir.path() / "venv").string()},
                                        {"HOME", (dir.path() / "home").string()}}));
      },
      ::testing::ThrowsMessage<Error>(AllOf(
          HasSubstr("libneuronpjrt.so) was not found"), HasSubstr("NEURON_LIBRARY_PATH is unset"),
          HasSubstr(dir.path().string() + "/venv/lib/python3*/site-packages/libneuronxla"),
          HasSubstr(dir.path().string() + "/home/.local/lib/python3*/site-packages"),
          HasSubstr("/opt/aws_neuronx_venv_*/lib/python3*/site-packages"),
          HasSubstr("/usr/lib/python3/dist-packages/libneuronxla/libneuronpjrt.so"))));
}

using Settings = std::vector<std::pair<std::string, std::string>>;

TEST(NeuronEnvironment, TheCApiVersionAlwaysAndTheLaunchersRankAndRendezvous) {
  const std::string api = std::to_string(PJRT_API_MAJOR) + "." + std::to_string(PJRT_API_MINOR);
  EXPECT_EQ(neuron_environment(env_of({})),
            (Settings{{"NEURON_INTERNAL_PJRT_C_API_VERSION", api}}));
  EXPECT_EQ(neuron_environment(env_of(
                {{"LOCAL_RANK", "3"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}})),
            (Settings{{"NEURON_INTERNAL_PJRT_C_API_VERSION", api},
                      {"NEURON_RT_VISIBLE_CORES", "3"},
                      {"NEURON_RT_ROOT_COMM_ID", "10.0.0.1:29501"}}));
  // What the user set stays.
  EXPECT_EQ(neuron_environment(env_of({{"LOCAL_RANK", "3"},
                                       {"MASTER_ADDR", "10.0.0.1"},
                                       {"MASTER_PORT", "29500"},
                                       {"NEURON_INTERNAL_PJRT_C_API_VERSION", "0.54"},
                                       {"NEURON_RT_VISIBLE_CORES", "0-1"},
                                       {"NEURON_RT_ROOT_COMM_ID", "host:1"}})),
            Settings{});
  EXPECT_THAT(
      [] {
        neuron_environment(env_of({{"MASTER_ADDR", "a"}, {"MASTER_PORT", "x1"}}));
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("MASTER_PORT 'x1'")));
}

// The CLI with the stand-in package.

// The version of a shared libpython present (the stand-in's Python must be one tfm can load),
// "" when none is.
std::string loadable_python_version() {
  for (const char* dir :
       {"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib"}) {
    glob_t found{};
    const std::string pattern = std::string(dir) + "/libpython3.*.so.1.0";
    std::string version;
    if (::glob(pattern.c_str(), 0, nullptr, &found) == 0 && found.gl_pathc > 0) {
      const std::string name = fs::path(found.gl_pathv[0]).filename().string();
      version = name.substr(
          std::string("libpython").size(),
          name.size() - std::string("libpython").size() - std::string(".so.1.0").size());
    }
    ::globfree(&found);
    if (!version.empty()) return version;
  }
  return "";
}

// The stand-in's __init__.py: the NEURON_* variables it saw, into `marker`.
std::string recording_init(const fs::path& marker) {
  return "import json, os\nwith open(" + nlohmann::json(marker.string()).dump() +
         ", 'w') as f:\n    json.dump({k: v for k, v in os.environ.items() "
         "if k.startswith('NEURON')}, f)\n";
}

class NeuronCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string_view(TFM_TEST_PJRT_PLUGIN).empty()) {
      GTEST_SKIP() << "XLA's CPU plugin is not installed (tools/test_env.sh)";
    }
    version_ = loadable_python_version();
    if (version_.empty()) {
      GTEST_SKIP() << "no shared libpython3.N is installed (tools/test_env.sh installs it)";
    }
    if (testing::binary_path("tfm").empty()) GTEST_SKIP() << "TFM_BIN is not set (run via ctest)";
  }

  // `tfm generate` on the qwen3 fixture's first row, on --device neuron, with `env` changes over
  // an environment that holds no launcher and no other Python environment.
  std::optional<testing::Run> generate(const std::vector<std::string>& extra,
                                       testing::EnvChanges env) {
    const nlohmann::json& ref = testing::reference("qwen3");
    std::string ids;
    for (const auto& id : ref["padded_input_ids"][0]) {
      ids += (ids.empty() ? "" : ",") + std::to_string(id.get<int64_t>());
    }
    std::vector<std::string> args{"generate", testing::fixture_dir("qwen3"), "--ids", ids,
                                  "--print-ids", "--max-new-tokens", "16", "--device", "neuron",
                                  "--no-pjrt-cache"};
    args.insert(args.end(), extra.begin(), extra.end());
    for (const char* name : {"LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "NEURON_LIBRARY_PATH",
                             "NEURON_RT_VISIBLE_CORES", "NEURON_RT_ROOT_COMM_ID",
                             "NEURON_INTERNAL_PJRT_C_API_VERSION", "VIRTUAL_ENV"}) {
      env.emplace(name, std::nullopt);
    }
    env.emplace("HOME", (dir_.path() / "home").string());
    return testing::run_binary("tfm", args, env);
  }

  nlohmann::json marker() const {
    std::ifstream in(dir_.path() / "marker.json");
    return in ? nlohmann::json::parse(in) : nlohmann::json();
  }

  TempDir dir_;
  std::string version_;
};

TEST_F(NeuronCli, FoundInAVirtualEnvironmentItRunsWithPythonStartedAndTheEnvironmentSet) {
  make_package(dir_.path() / "venv", version_, TFM_TEST_PJRT_PLUGIN,
               recording_init(dir_.path() / "marker.json"));
  const auto run = generate({}, {{"VIRTUAL_ENV", (dir_.path() / "venv").string()}});
  ASSERT_EQ(run->status, 0) << run->err;
  EXPECT_EQ(nlohmann::json::parse(run->out), testing::reference("qwen3")["greedy_16"][0]);
  EXPECT_THAT(run->err, AllOf(HasSubstr("on pjrt:0"), HasSubstr("libneuronxla/libneuronpjrt.so")))
      << "the plugin found is the one that ran";
  // libneuronxla was imported by the Python tfm started, after the plugin's variables were set.
  const std::string api = std::to_string(PJRT_API_MAJOR) + "." + std::to_string(PJRT_API_MINOR);
  EXPECT_EQ(marker(), (nlohmann::json{{"NEURON_INTERNAL_PJRT_C_API_VERSION", api}}));
}

TEST_F(NeuronCli, UnderALauncherEachProcessTakesItsCoreAndTheRendezvous) {
  make_package(dir_.path() / "venv", version_, TFM_TEST_PJRT_PLUGIN,
               recording_init(dir_.path() / "marker.json"));
  const auto run = generate({}, {{"VIRTUAL_ENV", (dir_.path() / "venv").string()},
                                 {"LOCAL_RANK", "0"},
                                 {"MASTER_ADDR", "127.0.0.1"},
                                 {"MASTER_PORT", "29611"}});
  ASSERT_EQ(run->status, 0) << run->err;
  EXPECT_EQ(marker()["NEURON_RT_VISIBLE_CORES"], "0");
  EXPECT_EQ(marker()["NEURON_RT_ROOT_COMM_ID"], "127.0.0.1:29612");
}

TEST_F(NeuronCli, AGivenPluginRunsWithTheLibneuronxlaTheSearchFinds) {
  make_package(dir_.path() / "venv", version_, "", recording_init(dir_.path() / "marker.json"));
  const auto run = generate({"--pjrt-plugin", TFM_TEST_PJRT_PLUGIN},
                            {{"VIRTUAL_ENV", (dir_.path() / "venv").string()}});
  ASSERT_EQ(run->status, 0) << run->err;
  EXPECT_EQ(nlohmann::json::parse(run->out), testing::reference("qwen3")["greedy_16"][0]);
  EXPECT_TRUE(marker().contains("NEURON_INTERNAL_PJRT_C_API_VERSION")) << marker();
}

TEST_F(NeuronCli, AFailingLibneuronxlaImportIsAnErrorWithPythonsTraceback) {
  make_package(dir_.path() / "venv", version_, TFM_TEST_PJRT_PLUGIN,
               "raise RuntimeError('neuronx-cc is not installed')\n");
  const auto run = generate({}, {{"VIRTUAL_ENV", (dir_.path() / "venv").string()}});
  EXPECT_EQ(run->status, 1) << run->err;
  EXPECT_THAT(run->err, AllOf(HasSubstr("RuntimeError: neuronx-cc is not installed"),
                              HasSubstr("importing the Python package 'libneuronxla'"),
                              Not(HasSubstr("on pjrt:0"))));
}

TEST_F(NeuronCli, NoPluginAnywhereIsAnErrorNamingWhereItLooked) {
  const auto run = generate({}, {{"VIRTUAL_ENV", (dir_.path() / "venv").string()}});
  EXPECT_EQ(run->status, 1) << run->err;
  EXPECT_THAT(run->err,
              AllOf(HasSubstr("AWS Neuron's PJRT plugin (libneuronpjrt.so) was not found"),
                    HasSubstr(dir_.path().string() + "/venv/lib/python3*"),
                    HasSubstr("NEURON_LIBRARY_PATH")));
  EXPECT_THAT(run->err, Not(HasSubstr("cpu"))) << "never a silent CPU fallback";
}

}  // namespace
}  // namespace tfm::pjrt
