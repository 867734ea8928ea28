#include "backends/pjrt/compile_options.h"

namespace tfm::pjrt {
namespace {

// Protocol buffers' wire format: a key (field number, wire type), then a varint or a length and
// bytes.
void varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}
void int_field(std::string& out, int field, int64_t value) {
  varint(out, static_cast<uint64_t>(field) << 3);
  varint(out, static_cast<uint64_t>(value));
}
void message_field(std::string& out, int field, const std::string& bytes) {
  varint(out, (static_cast<uint64_t>(field) << 3) | 2);
  varint(out, bytes.size());
  out += bytes;
}

// xla.DeviceAssignmentProto: replica_count 1, computation_count 2, computation_devices 3 (each a
// ComputationDevice: replica_device_ids 1); one replica, a computation per partition.
std::string device_assignment(const std::vector<int64_t>& partition_devices) {
  std::string out;
  int_field(out, 1, 1);
  int_field(out, 2, static_cast<int64_t>(partition_devices.size()));
  for (int64_t id : partition_devices) {
    std::string computation;
    int_field(computation, 1, id);
    message_field(out, 3, computation);
  }
  return out;
}

}  // namespace

std::string serialize(const CompileOptions& options) {
  // xla.ExecutableBuildOptionsProto: num_replicas 4, num_partitions 5, use_spmd_partitioning 6,
  // device_assignment 9.
  std::string build;
  int_field(build, 4, options.num_replicas);
  int_field(build, 5, options.num_partitions);
  if (options.use_spmd_partitioning) int_field(build, 6, 1);
  if (!options.partition_devices.empty()) {
    message_field(build, 9, device_assignment(options.partition_devices));
  }
  // xla.CompileOptionsProto: executable_build_options 3.
  std::string out;
  message_field(out, 3, build);
  return out;
}

}  // namespace tfm::pjrt
