#include "tfm/device.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tfm/error.h"

namespace tfm {
namespace {

using testing::AllOf;
using testing::HasSubstr;
using testing::ThrowsMessage;

TEST(DeviceTest, CpuIsAlwaysPresentAndFirst) {
  const std::vector<DeviceInfo> all = devices();
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all[0].device, kCpu);
  EXPECT_FALSE(all[0].description.empty());
  EXPECT_TRUE(is_available("cpu"));
  EXPECT_EQ(device_count("cpu"), 1);
  EXPECT_EQ(resolve_device("cpu"), kCpu);
}

TEST(DeviceTest, Names) {
  EXPECT_EQ(kCpu.str(), "cpu");
  EXPECT_EQ((Device{"cuda", 3}.str()), "cuda:3");
}

TEST(DeviceTest, UnknownTypeIsAnError) {
  EXPECT_THAT([] { device_count("tpu"); },
              ThrowsMessage<Error>(HasSubstr("unknown device type 'tpu'")));
  EXPECT_THAT([] { resolve_device("tpu"); },
              ThrowsMessage<Error>(HasSubstr("known: cpu, cuda, pjrt, auto")));
}

TEST(DeviceTest, AbsentCudaNamesWhatIsPresent) {
  if (is_available("cuda")) GTEST_SKIP() << "a CUDA device is present on this machine";
  EXPECT_EQ(device_count("cuda"), 0);
  EXPECT_THAT([] { resolve_device("cuda"); },
              ThrowsMessage<Error>(AllOf(HasSubstr("'cuda'"), HasSubstr("no CUDA device"),
                                         HasSubstr("present: cpu"))));
  EXPECT_THAT([] { resolve_device("cuda:1"); }, ThrowsMessage<Error>(HasSubstr("present: cpu")));
}

TEST(DeviceTest, AutoFallsBackToCpuAndSaysSo) {
  if (is_available("cuda")) GTEST_SKIP() << "a CUDA device is present on this machine";
  std::string reason;
  EXPECT_EQ(resolve_device("auto", &reason), kCpu);
  EXPECT_THAT(reason, AllOf(HasSubstr("chose cpu"), HasSubstr("no accelerator")));
  EXPECT_EQ(resolve_device("auto"), kCpu);  // the reason is optional
}

TEST(DeviceTest, AutoPicksCudaWhenPresent) {
  if (!is_available("cuda")) GTEST_SKIP() << "no CUDA device on this machine";
  std::string reason;
  EXPECT_EQ(resolve_device("auto", &reason), (Device{"cuda", 0}));
  EXPECT_THAT(reason, HasSubstr("chose cuda:0"));
}

TEST(DeviceTest, MalformedSpecsAreErrors) {
  for (const char* spec : {"cuda:x", "cuda:", "cuda:-1", "cuda:1x", "cuda:0:0", "neuron:x"}) {
    EXPECT_THAT([&] { resolve_device(spec); },
                ThrowsMessage<Error>(HasSubstr(
                    "expected cpu, cuda, cuda:N, pjrt, pjrt:N, neuron, neuron:N or auto")))
        << spec;
  }
  EXPECT_THAT([] { resolve_device(""); }, ThrowsMessage<Error>(HasSubstr("unknown device ''")));
}

}  // namespace
}  // namespace tfm
