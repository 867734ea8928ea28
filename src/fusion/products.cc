// Fusion of matrix products: q, k and v's into one, the gated MLP's two and its gating into one,
// the input norm into the products that read it, a residual add into the product before it
// (passes.h).
#include <algorithm>
#include <array>
#include <vector>

#include "fusion/passes.h"
#include "fusion/rewrite.h"
#include "graph/effects.h"
#include "graph/op_args.h"
#include "graph/rewrite.h"

namespace tfm::fusion {

using namespace graph;  // the IR this layer rewrites

namespace {

const Node& node_at(const Graph& graph, ValueId v) { return graph.nodes[static_cast<size_t>(v)]; }

// A product the fused kernels can take: f32 rows in and out, no residual of its own.
bool plain_f32_product(const Graph& graph, const Node& n) {
  return n.op == Op::kLinear && !n.residual && n.dtype == DType::f32 &&
         node_at(graph, linear_args(n).x).dtype == DType::f32;
}

// The linears a value is read by, when every node that reads it is one.
std::vector<ValueId> linear_readers(const Graph& graph, const std::vector<ValueId>& readers) {
  for (ValueId r : readers) {
    if (!plain_f32_product(graph, node_at(graph, r))) return {};
  }
  return readers;
}

// Are the products' weights of one dtype, and their biases all given or all absent?
bool products_match(const Graph& graph, const std::vector<LinearArgs>& products) {
  for (const LinearArgs& p : products) {
    if (node_at(graph, p.w).dtype != node_at(graph, products[0].w).dtype ||
        (p.bias >= 0) != (products[0].bias >= 0)) {
      return false;
    }
  }
  return true;
}

}  // namespace

void fuse_residuals_into_products(Graph& graph, const Target&) {
  fold_adds_into_steps(
      graph, [](const Node& n) { return n.op == Op::kLinear && !n.residual; },
      [](Node& product, ValueId other) {
        LinearArgs args = linear_args(product);
        args.residual = other;
        set_args(product, args);
      });
}

void fuse_qkv_products(Graph& graph, const Target&) {
  if (computes_gradients(graph)) return;
  const std::vector<bool> none(graph.nodes.size(), false);
  const std::vector<std::vector<ValueId>> readers = readers_of(graph, none);
  const std::vector<int> uses = count_uses(graph, none);
  struct Found {
    ValueId x;
    std::vector<ValueId> products;
  };
  std::vector<Found> found;
  for (size_t x = 0; x < graph.nodes.size(); ++x) {
    const std::vector<ValueId> products = linear_readers(graph, readers[x]);
    if (products.size() != 3 || uses[x] != 3) continue;
    std::vector<LinearArgs> args;
    for (ValueId p : products) args.push_back(linear_args(node_at(graph, p)));
    // The fused product goes right after the last of the three, so it reads every weight; each
    // product's readers then read its block, so they must all come after it too.
    bool read_later = true;
    for (ValueId p : products) {
      for (ValueId r : readers[static_cast<size_t>(p)]) read_later = read_later && r > products[2];
    }
    if (products_match(graph, args) && read_later)
      found.push_back({static_cast<ValueId>(x), products});
  }
  // The last first: inserting nodes moves only the ids after them, which the fusions before it
  // do not hold.
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    const std::vector<ValueId>& products = it->products;
    std::vector<LinearArgs> args;
    for (ValueId p : products) args.push_back(linear_args(node_at(graph, p)));
    const ValueId at = products.back() + 1;
    Node qkv = node_at(graph, products[0]);
    qkv.op = Op::kQkvLinear;
    set_args(qkv, QkvLinearArgs{it->x,
                                {args[0].w, args[1].w, args[2].w},
                                {args[0].bias, args[1].bias, args[2].bias}});
    std::vector<Node> made{qkv};
    int64_t elements = 0;
    for (ValueId p : products) {
      Node view;
      view.op = Op::kView;
      view.shape = node_at(graph, p).shape;
      view.name = node_at(graph, p).name;
      view.start = elements;
      set_args(view, ViewArgs{at});
      made.push_back(std::move(view));
      elements += shape_numel(node_at(graph, p).shape);
    }
    made[0].shape = {elements};
    const std::vector<ValueId> ids = insert_nodes(graph, at, std::move(made));
    for (size_t i = 0; i < 3; ++i) {
      replace_uses(graph, products[i], ids[1 + i]);
      leave_for_dead(graph.nodes[static_cast<size_t>(products[i])]);
    }
  }
}

void fuse_gated_products(Graph& graph, const Target&) {
  if (computes_gradients(graph)) return;
  const std::vector<int> uses = count_uses(graph, std::vector<bool>(graph.nodes.size(), false));
  const auto read_once = [&](ValueId v) { return uses[static_cast<size_t>(v)] == 1; };
  for (Node& mul : graph.nodes) {
    if (!is_single(mul, EwCode::kMul) || mul.dtype != DType::f32) continue;
    const ValueId silu = mul.inputs[0], up = mul.inputs[1];
    if (!is_single(node_at(graph, silu), EwCode::kSilu) || !read_once(silu) || !read_once(up)) {
      continue;
    }
    const ValueId gate = node_at(graph, silu).inputs[0];
    const Node& g = node_at(graph, gate);
    const Node& u = node_at(graph, up);
    if (!read_once(gate) || !plain_f32_product(graph, g) || !plain_f32_product(graph, u)) continue;
    const LinearArgs ga = linear_args(g), ua = linear_args(u);
    if (ga.x != ua.x || !products_match(graph, {ga, ua}) ||
        node_at(graph, ga.w).shape != node_at(graph, ua.w).shape) {
      continue;
    }
    // The gated product runs where the gating did, after both products' inputs exist.
    Node fused = g;
    fused.op = Op::kGatedLinear;
    set_args(fused, GatedLinearArgs{ga.x, ga.w, ua.w, ga.bias, ua.bias});
    for (ValueId dead : {silu, gate, up}) leave_for_dead(graph.nodes[static_cast<size_t>(dead)]);
    mul = std::move(fused);
  }
}

void fuse_input_norms_into_products(Graph& graph, const Target&) {
  if (computes_gradients(graph)) return;
  const std::vector<bool> none(graph.nodes.size(), false);
  const std::vector<std::vector<ValueId>> readers = readers_of(graph, none);
  const std::vector<int> uses = count_uses(graph, none);
  for (size_t r = 0; r < graph.nodes.size(); ++r) {
    const Node& norm = graph.nodes[r];
    if (norm.op != Op::kRmsNorm || norm.dtype != DType::f32) continue;
    const RmsNormArgs rows = rms_norm_args(norm);
    if (node_at(graph, rows.x).dtype != DType::f32) continue;
    // The products read the norm directly, or through a copy into a tensor-parallel group
    // (an alias, which may as well copy x: the products norm what it gives them).
    ValueId read = static_cast<ValueId>(r);
    if (readers[r].size() == 1 && node_at(graph, readers[r][0]).op == Op::kCopyToGroup &&
        uses[r] == 1) {
      read = readers[r][0];
    }
    const std::vector<ValueId>& products = readers[static_cast<size_t>(read)];
    const bool fused_readers =
        !products.empty() && uses[static_cast<size_t>(read)] == static_cast<int>(products.size()) &&
        std::all_of(products.begin(), products.end(), [&](ValueId p) {
          const Node& n = node_at(graph, p);
          return (n.op == Op::kQkvLinear || n.op == Op::kGatedLinear) && !n.normed &&
                 !written_between(graph, r, static_cast<size_t>(p), norm.inputs);
        });
    if (!fused_readers) continue;
    for (ValueId p : products) {
      Node& product = graph.nodes[static_cast<size_t>(p)];
      product.eps = norm.eps;
      if (product.op == Op::kQkvLinear) {
        QkvLinearArgs args = qkv_linear_args(product);
        args.x = read == static_cast<ValueId>(r) ? rows.x : read;
        args.norm = rows.w;
        set_args(product, args);
      } else {
        GatedLinearArgs args = gated_linear_args(product);
        args.x = read == static_cast<ValueId>(r) ? rows.x : read;
        args.norm = rows.w;
        set_args(product, args);
      }
    }
    if (read != static_cast<ValueId>(r)) graph.nodes[static_cast<size_t>(read)].inputs = {rows.x};
    leave_for_dead(graph.nodes[r]);
  }
}

}  // namespace tfm::fusion
