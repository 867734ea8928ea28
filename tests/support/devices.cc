#include "support/devices.h"

#include <string_view>

#include "tfm/device.h"

namespace tfm::testing {

bool device_present(const std::string& kind) {
  if (kind == "pjrt") {
    static const bool opened = [] {
      if (std::string_view(TFM_TEST_PJRT_PLUGIN).empty()) return false;
      // No compile cache: a test process leaves nothing in the user's home.
      use_device_plugin("pjrt", TFM_TEST_PJRT_PLUGIN, {.compile_cache = ""});
      return true;
    }();
    if (!opened) return false;
  }
  return is_available(kind);
}

}  // namespace tfm::testing
