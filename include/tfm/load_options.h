// How AutoModelForCausalLM loads a model: dtype, device, the split across processes.
#pragma once

#include <optional>
#include <string>

#include "tfm/dtype.h"
#include "tfm/kernel_options.h"

namespace tfm {

// How a model is split across the processes of a job started by tfmrun (or torchrun): WORLD_SIZE
// must equal tp_size x fsdp_size. On a device whose compiler partitions programs (pjrt, neuron)
// it is instead one process whose graphs are each partitioned over tp_size x fsdp_size devices.
// Ranks r*tp_size .. r*tp_size + tp_size - 1 form one tensor-parallel group; the fsdp_size groups
// are data-parallel replicas of it, each holding a block of rows of every weight, gradient and
// optimizer moment (gathered where used).
struct DistributedConfig {
  int tp_size = 1;    // each layer's heads, MLP columns and vocabulary split across this many
  int fsdp_size = 1;  // data-parallel ranks sharding the weights and training state
  // Expert parallelism (transformers' ep_size): a mixture-of-experts model's experts split over
  // this many ranks, each holding and running only its own: 1; tp_size (over the tensor-parallel
  // ranks, which share a batch, their shares summed: transformers' "all_reduce"); or, with
  // tp_size 1, fsdp_size (over the data-parallel ranks, which send their rows to the experts and
  // back by all-to-all: transformers' "all_to_all").
  int ep_size = 1;
};

struct LoadOptions {
  std::optional<DType> dtype = std::nullopt;  // compute/weight dtype; unset: the checkpoint's
  // "cpu", "cuda", "cuda:N", "pjrt[:N]", "neuron[:N]", "auto" (best accelerator present)
  std::string device_map = "auto";
  DistributedConfig distributed = {};
  // Compiled graphs run the backend's fused kernels. Off, they run the basic ops the model builds
  // (still compiled: one plan per shape): the reference every fusion is tested against, and a way
  // to tell a fusion's fault from the model's (`--disable-fusion`).
  bool fuse = true;
  KernelOptions kernels = {};
};

}  // namespace tfm
