#include "backends/cpu/moe_kernels.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/kernels.h"

namespace tfm::cpu {
namespace {

float sigmoid(float v) { return 1.f / (1.f + std::exp(-v)); }

// The rows routed to one expert and their products, reused from expert to expert.
struct ExpertRows {
  std::vector<int64_t> rows;
  std::vector<float> x, gate, up, act, down;

  // Gathers the rows routed to expert `e` (a routing column) and runs its products; false when none
  // is.
  bool run(const float* x_all, const float* routing, const ExpertWeights& w, const MoeShape& s,
           int64_t e) {
    rows.clear();
    for (int64_t r = 0; r < s.rows; ++r) {
      if (routing[r * s.experts + e] != 0.f) rows.push_back(r);
    }
    if (rows.empty()) return false;
    const auto n = static_cast<int64_t>(rows.size());
    x.resize(static_cast<size_t>(n * s.hidden));
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(x_all + rows[static_cast<size_t>(i)] * s.hidden, s.hidden, &x[i * s.hidden]);
    }
    gate.resize(static_cast<size_t>(n * s.inter));
    up.resize(gate.size());
    act.resize(gate.size());
    down.resize(x.size());
    linear(x.data(), w.gate, w.dtype, nullptr, n, s.inter, s.hidden, gate.data());
    linear(x.data(), w.up, w.dtype, nullptr, n, s.inter, s.hidden, up.data());
    for (size_t i = 0; i < gate.size(); ++i) act[i] = gate[i] * sigmoid(gate[i]) * up[i];
    linear(act.data(), w.down, w.dtype, nullptr, n, s.hidden, s.inter, down.data());
    return true;
  }
};

}  // namespace

void moe_experts(const float* x, const float* routing, const std::vector<ExpertWeights>& w,
                 const MoeShape& s, float* out) {
  std::fill_n(out, s.rows * s.hidden, 0.f);
  ExpertRows e;
  for (int64_t held = 0; held < s.held; ++held) {
    const int64_t expert = s.first + held;
    if (!e.run(x, routing, w[static_cast<size_t>(held)], s, expert)) continue;
    for (size_t i = 0; i < e.rows.size(); ++i) {
      const int64_t r = e.rows[i];
      const float weight = routing[r * s.experts + expert];
      float* dst = out + r * s.hidden;
      const float* src = &e.down[i * static_cast<size_t>(s.hidden)];
      for (int64_t h = 0; h < s.hidden; ++h) dst[h] += weight * src[h];
    }
  }
}

void moe_experts_grad(const float* x, const float* routing, const std::vector<ExpertWeights>& w,
                      const float* dy, const MoeShape& s, float* out) {
  const int64_t projection = s.inter * s.hidden;
  float* dx = out;
  float* d_routing = dx + s.rows * s.hidden;
  float* d_weights = d_routing + s.rows * s.experts;
  std::fill_n(out, s.rows * (s.hidden + s.experts) + 3 * s.held * projection, 0.f);
  ExpertRows e;
  std::vector<float> d_out, d_act, d_gate, d_up, d_x;
  for (int64_t held = 0; held < s.held; ++held) {
    const int64_t expert = s.first + held;
    const ExpertWeights& ew = w[static_cast<size_t>(held)];
    if (!e.run(x, routing, ew, s, expert)) continue;
    const auto n = static_cast<int64_t>(e.rows.size());
    d_out.resize(static_cast<size_t>(n * s.hidden));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = e.rows[static_cast<size_t>(i)];
      const float weight = routing[r * s.experts + expert];
      double dot = 0;
      for (int64_t h = 0; h < s.hidden; ++h) {
        const float g = dy[r * s.hidden + h];
        dot += static_cast<double>(g) * e.down[static_cast<size_t>(i * s.hidden + h)];
        d_out[static_cast<size_t>(i * s.hidden + h)] = weight * g;
      }
      d_routing[r * s.experts + expert] = static_cast<float>(dot);
    }
    float* d_w_gate = d_weights + 3 * held * projection;
    float* d_w_up = d_w_gate + projection;
    float* d_w_down = d_w_up + projection;
    linear_grad_weight(d_out.data(), e.act.data(), n, s.hidden, s.inter, d_w_down);
    d_act.resize(e.act.size());
    linear_grad_input(d_out.data(), ew.down, ew.dtype, n, s.hidden, s.inter, d_act.data());
    d_gate.resize(e.act.size());
    d_up.resize(e.act.size());
    for (size_t i = 0; i < e.act.size(); ++i) {
      const float g = e.gate[i], sg = sigmoid(g);
      d_up[i] = d_act[i] * g * sg;
      d_gate[i] = d_act[i] * e.up[i] * sg * (1.f + g * (1.f - sg));
    }
    linear_grad_weight(d_gate.data(), e.x.data(), n, s.inter, s.hidden, d_w_gate);
    linear_grad_weight(d_up.data(), e.x.data(), n, s.inter, s.hidden, d_w_up);
    d_x.resize(e.x.size());
    linear_grad_input(d_gate.data(), ew.gate, ew.dtype, n, s.inter, s.hidden, d_x.data());
    linear_grad_input(d_up.data(), ew.up, ew.dtype, n, s.inter, s.hidden, d_x.data(), true);
    for (int64_t i = 0; i < n; ++i) {
      float* dst = dx + e.rows[static_cast<size_t>(i)] * s.hidden;
      for (int64_t h = 0; h < s.hidden; ++h) dst[h] += d_x[static_cast<size_t>(i * s.hidden + h)];
    }
  }
}

void moe_dispatch(const float* x, const Exchange& e, int64_t hidden, int64_t slot_count,
                  float* out) {
  std::fill_n(out, slot_count * hidden, 0.f);
  for (int64_t r = 0; r < e.rows; ++r) {
    for (int64_t x_e = 0; x_e < e.experts; ++x_e) {
      const int64_t slot = e.slots[static_cast<size_t>(r * e.experts + x_e)];
      if (slot >= 0) std::copy_n(x + r * hidden, hidden, out + slot * hidden);
    }
  }
}

void moe_slots(const Exchange& e, int64_t slot_count, float* out) {
  std::fill_n(out, slot_count * e.held, 0.f);
  for (int64_t r = 0; r < e.rows; ++r) {
    for (int64_t x_e = 0; x_e < e.experts; ++x_e) {
      const int64_t slot = e.slots[static_cast<size_t>(r * e.experts + x_e)];
      if (slot >= 0) out[slot * e.held + x_e % e.held] = 1.f;
    }
  }
}

void moe_combine(const float* y, const float* routing, const Exchange& e, int64_t hidden,
                 float* out) {
  std::fill_n(out, e.rows * hidden, 0.f);
  for (int64_t r = 0; r < e.rows; ++r) {
    for (int64_t x_e = 0; x_e < e.experts; ++x_e) {
      const int64_t slot = e.slots[static_cast<size_t>(r * e.experts + x_e)];
      if (slot < 0) continue;
      const float weight = routing[r * e.experts + x_e];
      for (int64_t h = 0; h < hidden; ++h) out[r * hidden + h] += weight * y[slot * hidden + h];
    }
  }
}

void moe_dispatch_grad(const float* dy, const Exchange& e, int64_t hidden, float* dx) {
  std::fill_n(dx, e.rows * hidden, 0.f);
  for (int64_t r = 0; r < e.rows; ++r) {
    for (int64_t x_e = 0; x_e < e.experts; ++x_e) {
      const int64_t slot = e.slots[static_cast<size_t>(r * e.experts + x_e)];
      if (slot < 0) continue;
      for (int64_t h = 0; h < hidden; ++h) dx[r * hidden + h] += dy[slot * hidden + h];
    }
  }
}

void moe_combine_grad(const float* y, const float* routing, const float* dy, const Exchange& e,
                      int64_t hidden, int64_t slot_count, float* out) {
  float* d_y = out;
  float* d_routing = out + slot_count * hidden;
  std::fill_n(out, slot_count * hidden + e.rows * e.experts, 0.f);
  for (int64_t r = 0; r < e.rows; ++r) {
    for (int64_t x_e = 0; x_e < e.experts; ++x_e) {
      const int64_t slot = e.slots[static_cast<size_t>(r * e.experts + x_e)];
      if (slot < 0) continue;
      const float weight = routing[r * e.experts + x_e];
      double dot = 0;
      for (int64_t h = 0; h < hidden; ++h) {
        const float g = dy[r * hidden + h];
        d_y[slot * hidden + h] = weight * g;
        dot += static_cast<double>(g) * y[slot * hidden + h];
      }
      d_routing[r * e.experts + x_e] = static_cast<float>(dot);
    }
  }
}

}  // namespace tfm::cpu
