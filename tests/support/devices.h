// The devices a test may run on: the cpu, cuda where a GPU is present, and pjrt where the test
// command installed XLA's CPU plugin (tools/test_env.sh) and tfm was built with the PJRT backend.
#pragma once

#include <string>

namespace tfm::testing {

// Is a device of this kind present? For "pjrt", opens the test plugin on first use.
bool device_present(const std::string& kind);

}  // namespace tfm::testing
