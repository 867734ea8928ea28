// PJRT_Client_Compile's options: a serialized xla.CompileOptionsProto, written field by field (the
// few fields tfm sets), so tfm needs no protobuf.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tfm::pjrt {

struct CompileOptions {
  int64_t num_replicas = 1;
  int64_t num_partitions = 1;
  bool use_spmd_partitioning = false;
  // The device (an id of the client's devices) each partition runs on, one replica; empty: the
  // plugin's default.
  std::vector<int64_t> partition_devices;
};

// The proto's bytes: the key of the persistent compile cache includes them.
std::string serialize(const CompileOptions& options);

}  // namespace tfm::pjrt
