// NCCL, opened at run time (dlopen "libnccl.so.2") on the first collective, not linked: a process
// that loads tfm and then PyTorch (`import tfm; import torch`) must end up with one NCCL, and the
// one loaded first would serve both. Opened late, tfm takes whichever NCCL the process already
// holds (PyTorch's, newer), or the system's.
#pragma once

#include <nccl.h>

namespace tfm::cuda {

struct NcclLibrary {
  decltype(&ncclGetErrorString) GetErrorString;
  decltype(&ncclGetLastError) GetLastError;
  decltype(&ncclGetUniqueId) GetUniqueId;
  decltype(&ncclCommInitRank) CommInitRank;
  decltype(&ncclAllReduce) AllReduce;
  decltype(&ncclAllGather) AllGather;
  decltype(&ncclReduceScatter) ReduceScatter;
  decltype(&ncclSend) Send;
  decltype(&ncclRecv) Recv;
  decltype(&ncclGroupStart) GroupStart;
  decltype(&ncclGroupEnd) GroupEnd;
  decltype(&ncclCommGetAsyncError) CommGetAsyncError;
  decltype(&ncclCommAbort) CommAbort;
};

// Opens NCCL once; throws tfm::Error saying what is missing when it cannot.
const NcclLibrary& nccl();

}  // namespace tfm::cuda
