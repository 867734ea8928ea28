#include "tokenizer/jinja/interpreter.h"

#include <cmath>

#include "tfm/error.h"
#include "tokenizer/jinja/builtins.h"

namespace tfm::jinja {
namespace {

[[noreturn]] void fail(const std::string& what) { throw Error("chat template: " + what); }

// A chat template renders a prompt: past these it is a template that would run until killed
// (loops nested over long ranges), said as such.
constexpr size_t kMaxOutputBytes = size_t{64} << 20;
constexpr int64_t kMaxLoopIterations = 1'000'000;

class Interpreter {
 public:
  explicit Interpreter(Object context) { scopes_.push_back(std::move(context)); }

  enum class Flow { kNormal, kBreak, kContinue };

  Flow run(const std::vector<Node>& nodes, std::string& out) {
    for (const Node& node : nodes) {
      const Flow flow = run(node, out);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

 private:
  Flow run(const Node& node, std::string& out) {
    switch (node.kind) {
      case Node::kText:
        write(out, node.text);
        break;
      case Node::kOutput:
        write(out, eval(*node.expr).str());
        break;
      case Node::kIf:
        for (const auto& [condition, body] : node.branches) {
          if (!condition || eval(*condition).truthy()) return run(body, out);
        }
        break;
      case Node::kFor:
        return run_for(node, out);
      case Node::kSet: {
        Value value = eval(*node.expr);
        if (node.targets.size() == 1) {
          assign(scopes_.back(), node.targets[0], std::move(value));
        } else {
          const Value target = lookup(node.targets[0]);
          if (!target.is_object()) fail("cannot set an attribute of " + node.targets[0]);
          target.set(node.targets[1], std::move(value));
        }
        break;
      }
      case Node::kBreak:
        return Flow::kBreak;
      case Node::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  static void write(std::string& out, const std::string& text) {
    if (out.size() + text.size() > kMaxOutputBytes) {
      fail("output past " + std::to_string(kMaxOutputBytes >> 20) + " MiB");
    }
    out += text;
  }

  Flow run_for(const Node& node, std::string& out) {
    const Value iterable = eval(*node.expr);
    Array items;
    if (iterable.is_array()) {
      items = iterable.array();
    } else if (iterable.is_object()) {
      for (const auto& [key, value] : iterable.object()) items.emplace_back(key);
    } else if (iterable.is_string()) {
      for (size_t i = 0; i < length(iterable); ++i) {
        items.push_back(index_value(iterable, Value(static_cast<int64_t>(i))));
      }
    } else if (!iterable.is_undefined() && !iterable.is_none()) {
      fail("cannot iterate over " + iterable.type_name());
    }
    // Variables set in a loop body do not outlive the iteration, as in Jinja.
    Array kept;
    for (Value& item : items) {
      scopes_.emplace_back();
      bind(node.targets, item);
      const bool keep = !node.condition || eval(*node.condition).truthy();
      scopes_.pop_back();
      if (keep) kept.push_back(std::move(item));
    }
    if (kept.empty()) return run(node.else_body, out);
    for (size_t i = 0; i < kept.size(); ++i) {
      if (++iterations_ > kMaxLoopIterations) {
        fail("loops ran past " + std::to_string(kMaxLoopIterations) + " iterations");
      }
      const auto n = static_cast<int64_t>(kept.size()), index = static_cast<int64_t>(i);
      scopes_.emplace_back();
      scopes_.back().emplace_back(
          "loop", Value(Object{{"index0", Value(index)},
                               {"index", Value(index + 1)},
                               {"revindex0", Value(n - index - 1)},
                               {"revindex", Value(n - index)},
                               {"first", Value(i == 0)},
                               {"last", Value(i + 1 == kept.size())},
                               {"length", Value(n)},
                               {"previtem", i > 0 ? kept[i - 1] : Value()},
                               {"nextitem", i + 1 < kept.size() ? kept[i + 1] : Value()}}));
      bind(node.targets, kept[i]);
      const Flow flow = run(node.body, out);
      scopes_.pop_back();
      if (flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  void bind(const std::vector<std::string>& targets, const Value& item) {
    if (targets.size() == 1) {
      assign(scopes_.back(), targets[0], item);
      return;
    }
    if (!item.is_array() || item.array().size() != targets.size()) {
      fail("cannot unpack " + item.type_name() + " into " + std::to_string(targets.size()));
    }
    for (size_t i = 0; i < targets.size(); ++i) assign(scopes_.back(), targets[i], item.array()[i]);
  }

  static void assign(Object& scope, const std::string& name, Value value) {
    for (auto& [key, existing] : scope) {
      if (key == name) {
        existing = std::move(value);
        return;
      }
    }
    scope.emplace_back(name, std::move(value));
  }

  Value lookup(const std::string& name) const {
    for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope) {
      for (const auto& [key, value] : *scope) {
        if (key == name) return value;
      }
    }
    return Value();
  }

  std::vector<Value> eval_args(const Expr& e, size_t from) {
    std::vector<Value> args;
    for (size_t i = from; i < e.args.size(); ++i) args.push_back(eval(*e.args[i]));
    return args;
  }

  Kwargs eval_kwargs(const Expr& e) {
    Kwargs kwargs;
    for (const auto& [key, value] : e.kwargs) kwargs.emplace_back(key, eval(*value));
    return kwargs;
  }

  Value eval(const Expr& e) {
    switch (e.kind) {
      case Expr::kLiteral:
        return e.value;
      case Expr::kName:
        return lookup(e.name);
      case Expr::kList:
        return Value(eval_args(e, 0));
      case Expr::kDict: {
        Object object;
        for (auto& [key, value] : eval_kwargs(e)) object.emplace_back(key, std::move(value));
        return Value(std::move(object));
      }
      case Expr::kAttribute: {
        const Value target = eval(*e.args[0]);
        if (target.is_undefined()) fail("'" + e.name + "' of an undefined value");
        const Value* found = target.find(e.name);
        return found ? *found : Value();
      }
      case Expr::kIndex:
        return index_value(eval(*e.args[0]), eval(*e.args[1]));
      case Expr::kSlice: {
        Value parts[3];
        for (int i = 0; i < 3; ++i) {
          if (e.args[i + 1]) parts[i] = eval(*e.args[i + 1]);
        }
        const auto part = [&](int i) { return e.args[i + 1] ? &parts[i] : nullptr; };
        return slice_value(eval(*e.args[0]), part(0), part(1), part(2));
      }
      case Expr::kCall: {
        const Expr& callee = *e.args[0];
        if (callee.kind == Expr::kAttribute) {
          return call_method(eval(*callee.args[0]), callee.name, eval_args(e, 1));
        }
        if (callee.kind != Expr::kName) fail("only functions and methods can be called");
        return call_global(callee.name, eval_args(e, 1), eval_kwargs(e));
      }
      case Expr::kFilter:
        return apply_filter(e.name, eval(*e.args[0]), eval_args(e, 1), eval_kwargs(e));
      case Expr::kTest:
        return Value(apply_test(e.name, eval(*e.args[0]), eval_args(e, 1)) != e.negated);
      case Expr::kNot:
        return Value(!eval(*e.args[0]).truthy());
      case Expr::kNegate: {
        const Value v = eval(*e.args[0]);
        return v.is_int() ? Value(-v.as_int()) : Value(-v.as_double());
      }
      case Expr::kConditional:
        return eval(*e.args[1]).truthy() ? eval(*e.args[0]) : eval(*e.args[2]);
      case Expr::kBinary:
        return binary(e);
    }
    fail("unknown expression");
  }

  Value binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and" || op == "or") {
      Value left = eval(*e.args[0]);
      if (left.truthy() == (op == "or")) return left;
      return eval(*e.args[1]);
    }
    const Value a = eval(*e.args[0]), b = eval(*e.args[1]);
    if (op == "~") return Value(a.str() + b.str());
    if (op == "==") return Value(a == b);
    if (op == "!=") return Value(!(a == b));
    if (op == "in") return Value(contains(b, a));
    if (op == "not in") return Value(!contains(b, a));
    if (op == "+" && a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (op == "+" && a.is_array() && b.is_array()) {
      Array joined = a.array();
      joined.insert(joined.end(), b.array().begin(), b.array().end());
      return Value(std::move(joined));
    }
    if (a.is_string() && b.is_string()) {
      const int c = a.as_string().compare(b.as_string());
      if (op == "<") return Value(c < 0);
      if (op == ">") return Value(c > 0);
      if (op == "<=") return Value(c <= 0);
      if (op == ">=") return Value(c >= 0);
    }
    if (!(a.is_number() || a.is_bool()) || !(b.is_number() || b.is_bool())) {
      fail("unsupported operands for '" + op + "': " + a.type_name() + " and " + b.type_name());
    }
    const double x = a.as_double(), y = b.as_double();
    if (op == "<") return Value(x < y);
    if (op == ">") return Value(x > y);
    if (op == "<=") return Value(x <= y);
    if (op == ">=") return Value(x >= y);
    if (op == "/") return Value(x / y);
    const bool ints = !a.is_number() || a.is_int() ? (!b.is_number() || b.is_int()) : false;
    if (ints) {
      const int64_t i = a.as_int(), j = b.as_int();
      if ((op == "//" || op == "%") && j == 0) fail("integer division by zero");
      if (op == "+") return Value(i + j);
      if (op == "-") return Value(i - j);
      if (op == "*") return Value(i * j);
      if (op == "//") return Value(static_cast<int64_t>(std::floor(double(i) / double(j))));
      if (op == "%") return Value(((i % j) + j) % j);
    }
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (op == "//") return Value(std::floor(x / y));
    if (op == "%") return Value(x - y * std::floor(x / y));
    fail("unsupported operator '" + op + "'");
  }

  std::vector<Object> scopes_;
  int64_t iterations_ = 0;  // of every loop so far
};

}  // namespace

std::string render(const std::vector<Node>& nodes, Object context) {
  Interpreter interpreter(std::move(context));
  std::string out;
  interpreter.run(nodes, out);
  return out;
}

}  // namespace tfm::jinja
