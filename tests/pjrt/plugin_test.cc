// The PJRT runtime against XLA's CPU plugin: a hand-written module's results against closed forms,
// and every failure (a missing or foreign library, a module the compiler rejects, a wrong
// argument count) as an error naming what failed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string_view>

#include "backends/pjrt/client.h"
#include "backends/pjrt/compile_options.h"
#include "tfm/error.h"

namespace tfm {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

bool have_plugin() { return !std::string_view(TFM_TEST_PJRT_PLUGIN).empty(); }

// a * b + a, elementwise, over f32[4]: the second result is the sum of a.
constexpr const char* kModule = R"(module @test {
  func.func public @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> (tensor<4xf32>, tensor<f32>) {
    %0 = "stablehlo.multiply"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %1 = "stablehlo.add"(%0, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %2 = "stablehlo.constant"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
    %3 = "stablehlo.reduce"(%a, %2) ({
    ^bb0(%x: tensor<f32>, %y: tensor<f32>):
      %4 = "stablehlo.add"(%x, %y) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%4) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 0>} : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
    "func.return"(%1, %3) : (tensor<4xf32>, tensor<f32>) -> ()
  }
}
)";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(PjrtPlugin, RunsAModuleOnTheCpuPlugin) {
  if (!have_plugin()) GTEST_SKIP() << "XLA's CPU plugin is not installed (tools/test_env.sh)";
  const pjrt::Plugin& plugin = pjrt::Plugin::open(TFM_TEST_PJRT_PLUGIN);
  EXPECT_EQ(plugin.major_version(), PJRT_API_MAJOR);
  const pjrt::Client client(plugin, 2);
  ASSERT_EQ(client.device_count(), 2) << "cpu_device_count is the CPU client's device count";
  const pjrt::LoadedExecutable compiled = client.compile(kModule, pjrt::serialize({}));
  // The same executable through the plugin's serialization (what the compile cache keeps).
  const pjrt::LoadedExecutable loaded = client.deserialize(client.serialize(compiled.get()));
  const float a[4] = {1, 2, 3, 4}, b[4] = {0.5f, -1, 2, 10};
  for (PJRT_LoadedExecutable* exe : {compiled.get(), loaded.get()}) {
    ASSERT_EQ(client.output_count(exe), 2u);
    const pjrt::Buffer da = client.upload(a, DType::f32, {4}, 0);
    const pjrt::Buffer db = client.upload(b, DType::f32, {4}, 0);
    std::vector<pjrt::Buffer> out =
        std::move(client.execute(exe, {{da.get(), db.get()}}, {0, 1}, 2).front());
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(client.dimensions(out[0].get()), Shape({4}));
    float product[4], sum = 0;
    client.download(out[0].get(), product, sizeof product);
    client.download(out[1].get(), &sum, sizeof sum);
    for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(product[i], a[i] * b[i] + a[i]) << "at " << i;
    EXPECT_FLOAT_EQ(sum, 10.f);
  }
}

TEST(PjrtPlugin, ErrorsNameTheCallAndTheCompilersMessage) {
  if (!have_plugin()) GTEST_SKIP() << "XLA's CPU plugin is not installed (tools/test_env.sh)";
  const pjrt::Client client(pjrt::Plugin::open(TFM_TEST_PJRT_PLUGIN), 1);
  EXPECT_THAT(error_of([&] { client.compile("module { this is not mlir }", pjrt::serialize({})); }),
              HasSubstr("PJRT_Client_Compile"));
  const pjrt::LoadedExecutable exe = client.compile(kModule, pjrt::serialize({}));
  const float a[4] = {};
  const pjrt::Buffer da = client.upload(a, DType::f32, {4}, 0);
  EXPECT_THAT(error_of([&] { client.execute(exe.get(), {{da.get()}}, {0}, 2); }),
              AllOf(HasSubstr("PJRT_LoadedExecutable_Execute"), HasSubstr("buffers")));
  EXPECT_THAT(error_of([&] { client.device(5); }), HasSubstr("5"));
  EXPECT_THAT(error_of([&] { client.deserialize("not an executable"); }),
              HasSubstr("PJRT_Executable_DeserializeAndLoad"));
}

TEST(PjrtPlugin, MissingOrForeignLibrariesAreNamed) {
  EXPECT_THAT(error_of([] { pjrt::Plugin::open("/nonexistent/libplugin.so"); }),
              AllOf(HasSubstr("/nonexistent/libplugin.so"), HasSubstr("cannot open")));
  // A real shared library that is no PJRT plugin.
  EXPECT_THAT(error_of([] { pjrt::Plugin::open("libm.so.6"); }),
              AllOf(HasSubstr("libm.so.6"), HasSubstr("GetPjrtApi")));
}

}  // namespace
}  // namespace tfm
