#include "distributed/process_group.h"

#include <arpa/inet.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "distributed/tcp_store.h"
#include "tfm/error.h"

namespace tfm::distributed {
namespace {

int env_int(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) {
    throw Error(std::string("[distributed] ") + name +
                " is not set: start the program with tfmrun (or torchrun)");
  }
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || value < 0) {
    throw Error(std::string("[distributed] ") + name + "='" + text + "' is not a number");
  }
  return static_cast<int>(value);
}

float* host_f32(Tensor& t, const char* op) {
  if (t.dtype() != DType::f32 || t.device() != kCpu || !t.is_contiguous()) {
    throw Error(std::string("[") + op + "] needs a contiguous f32 host tensor, got " +
                std::string(dtype_name(t.dtype())) + " on " + t.device().str());
  }
  return t.data_as<float>();
}

// gloo reports a dead or late peer as an exception of its own; ours names the collective.
template <typename F>
void run_collective(const char* op, int rank, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    throw Error(std::string("[") + op + "] rank " + std::to_string(rank) +
                ": the collective failed (a peer died or timed out): " + e.what());
  }
}

// The address of this host on the route to the master: what peers on other nodes can reach
// (a host name may resolve to an address of another interface, or of no namespace we are in).
std::string local_address_towards(const std::string& master, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(master.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) {
    throw Error("[distributed] MASTER_ADDR '" + master + "' does not resolve");
  }
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in local{};
  socklen_t length = sizeof local;
  // A UDP connect sends nothing: it only picks the route and so the local address.
  const bool ok = fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
  freeaddrinfo(found);
  if (fd >= 0) ::close(fd);
  if (!ok) throw Error("[distributed] no route to MASTER_ADDR '" + master + "'");
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &local.sin_addr, text, sizeof text);
  return text;
}

}  // namespace

ProcessGroupOptions ProcessGroup::options_from_environment() {
  ProcessGroupOptions o;
  o.rank = env_int("RANK");
  o.world_size = env_int("WORLD_SIZE");
  o.master_port = env_int("MASTER_PORT");
  const char* addr = std::getenv("MASTER_ADDR");
  if (addr == nullptr) throw Error("[distributed] MASTER_ADDR is not set: start with tfmrun");
  o.master_addr = addr;
  if (o.rank >= o.world_size) {
    throw Error("[distributed] RANK " + std::to_string(o.rank) + " is not below WORLD_SIZE " +
                std::to_string(o.world_size));
  }
  return o;
}

ProcessGroup::ProcessGroup(const ProcessGroupOptions& o)
    : ProcessGroup(o.rank, o.world_size, o.timeout,
                   std::make_shared<TcpStore>(o.master_addr, o.master_port, o.rank == 0, o.timeout),
                   local_address_towards(o.master_addr, o.master_port)) {
  connect(*store_);
}

ProcessGroup::ProcessGroup(int rank, int size, std::chrono::milliseconds timeout,
                           std::shared_ptr<TcpStore> store, std::string host)
    : rank_(rank),
      size_(size),
      timeout_(timeout),
      store_(std::move(store)),
      host_(std::move(host)) {}

void ProcessGroup::connect(gloo::rendezvous::Store& store) {
  gloo::transport::tcp::attr attr;
  attr.hostname = host_;
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
  context->setTimeout(timeout_);
  run_collective("rendezvous", rank_, [&] { context->connectFullMesh(store, device); });
  context_ = context;
}

std::unique_ptr<ProcessGroup> ProcessGroup::subgroup(const std::vector<int>& ranks,
                                                     const std::string& name) {
  const auto at = std::find(ranks.begin(), ranks.end(), rank_);
  if (at == ranks.end()) {
    throw Error("[distributed] rank " + std::to_string(rank_) + " is not a member of group '" +
                name + "'");
  }
  std::unique_ptr<ProcessGroup> group(new ProcessGroup(static_cast<int>(at - ranks.begin()),
                                                       static_cast<int>(ranks.size()), timeout_,
                                                       store_, host_));
  gloo::rendezvous::PrefixStore prefixed(name, *store_);
  group->connect(prefixed);
  return group;
}

ProcessGroup::~ProcessGroup() = default;

void ProcessGroup::all_reduce(Tensor& tensor) {
  all_reduce_sum(host_f32(tensor, "all_reduce"), static_cast<size_t>(tensor.numel()));
}

void ProcessGroup::all_reduce_sum(float* data, size_t count) {
  run_collective("all_reduce", rank_, [&] {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(data, count);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    opts.setTimeout(timeout_);
    gloo::allreduce(opts);
  });
}

void ProcessGroup::all_gather(const Tensor& in, Tensor& out) {
  if (out.numel() != in.numel() * size_) {
    throw Error("[all_gather] out " + shape_str(out.shape()) + " must hold " +
                std::to_string(size_) + " x " + shape_str(in.shape()));
  }
  Tensor input = in;
  all_gather(host_f32(input, "all_gather"), static_cast<size_t>(in.numel()),
             host_f32(out, "all_gather"));
}

void ProcessGroup::all_gather(const float* in, size_t count, float* out) {
  run_collective("all_gather", rank_, [&] {
    gloo::AllgatherOptions opts(context_);
    opts.setInput(const_cast<float*>(in), count);
    opts.setOutput(out, count * static_cast<size_t>(size_));
    opts.setTimeout(timeout_);
    gloo::allgather(opts);
  });
}

void ProcessGroup::reduce_scatter(const Tensor& in, Tensor& out) {
  if (in.numel() != out.numel() * size_) {
    throw Error("[reduce_scatter] in " + shape_str(in.shape()) + " must hold " +
                std::to_string(size_) + " x out " + shape_str(out.shape()));
  }
  Tensor input = in;
  reduce_scatter_sum(host_f32(input, "reduce_scatter"), static_cast<size_t>(out.numel()),
                     host_f32(out, "reduce_scatter"));
}

void ProcessGroup::reduce_scatter_sum(const float* in, size_t count, float* out) {
  // A sum over everything, then this rank's slice: twice the traffic of a ring reduce-scatter,
  // one well-tested gloo algorithm.
  std::vector<float> sum(in, in + count * static_cast<size_t>(size_));
  all_reduce_sum(sum.data(), sum.size());
  std::memcpy(out, sum.data() + static_cast<size_t>(rank_) * count, count * sizeof(float));
}

void ProcessGroup::all_to_all(const float* in, size_t count, float* out) {
  run_collective("all_to_all", rank_, [&] {
    gloo::AlltoallOptions opts(context_);
    opts.setInput(const_cast<float*>(in), count * static_cast<size_t>(size_));
    opts.setOutput(out, count * static_cast<size_t>(size_));
    opts.setTimeout(timeout_);
    gloo::alltoall(opts);
  });
}

void ProcessGroup::broadcast(Tensor& tensor, int root) {
  broadcast_bytes(host_f32(tensor, "broadcast"), tensor.nbytes(), root);
}

void ProcessGroup::broadcast_bytes(void* data, size_t bytes, int root) {
  if (root < 0 || root >= size_)
    throw Error("[broadcast] root " + std::to_string(root) + " out of range");
  auto* raw = static_cast<uint8_t*>(data);
  run_collective("broadcast", rank_, [&] {
    gloo::BroadcastOptions opts(context_);
    if (rank_ == root) opts.setInput(raw, bytes);
    opts.setOutput(raw, bytes);
    opts.setRoot(root);
    opts.setTimeout(timeout_);
    gloo::broadcast(opts);
  });
}

void ProcessGroup::barrier() {
  run_collective("barrier", rank_, [&] {
    gloo::BarrierOptions opts(context_);
    opts.setTimeout(timeout_);
    gloo::barrier(opts);
  });
}

}  // namespace tfm::distributed
