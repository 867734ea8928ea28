// Parameters of the tests that run one graph on each backend with f32 operands and with bf16 ones
// (as under autocast): cpu and cuda, each with both. CUDA cases skip, and say so, where no GPU is.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "tfm/device.h"
#include "tfm/dtype.h"

namespace tfm::testing {

struct DeviceOperands {
  std::string device;
  DType operands;
};

inline auto every_device_and_operands() {
  return ::testing::Values(DeviceOperands{"cpu", DType::f32}, DeviceOperands{"cpu", DType::bf16},
                           DeviceOperands{"cuda", DType::f32}, DeviceOperands{"cuda", DType::bf16});
}

inline std::string device_and_operands_name(const ::testing::TestParamInfo<DeviceOperands>& info) {
  return info.param.device + "_" + std::string(dtype_name(info.param.operands));
}

inline Device device_of(const DeviceOperands& c) {
  return c.device == "cuda" ? Device{"cuda", 0} : kCpu;
}

}  // namespace tfm::testing
