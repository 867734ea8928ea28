#include "support/devices.h"

#include <string_view>

#include "tfm/device.h"

namespace tfm::testing {

bool device_present(const std::string& kind) {
  if (kind == "pjrt") {
    static const bool opened = [] {
      if (std::string_view(TFM_TEST_PJRT_PLUGIN).empty()) return false;
      use_device_plugin("pjrt", TFM_TEST_PJRT_PLUGIN);
      return true;
    }();
    if (!opened) return false;
  }
  return is_available(kind);
}

}  // namespace tfm::testing
