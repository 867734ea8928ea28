// The parsed form of a template: expressions and statements.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace tfm::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum Kind {
    kLiteral,      // value
    kName,         // name
    kList,         // args
    kDict,         // kwargs (keys are literal strings)
    kAttribute,    // args[0].name
    kIndex,        // args[0][args[1]]
    kSlice,        // args[0][args[1]:args[2]:args[3]], null parts omitted
    kCall,         // args[0](args[1:], kwargs)
    kFilter,       // args[0] | name(args[1:], kwargs)
    kTest,         // args[0] is [not] name(args[1:])
    kNot,          // not args[0]
    kNegate,       // -args[0]
    kBinary,       // args[0] name args[1]: + - * / // % ~ == != < > <= >= in "not in" and or
    kConditional,  // args[0] if args[1] else args[2]
  };
  Kind kind;
  std::string name;
  Value value;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;  // kTest: "is not"
  int height = 1;        // levels of the tree from here down (bounded by the parser)
};

struct Node {
  enum Kind { kText, kOutput, kIf, kFor, kSet, kBreak, kContinue };
  explicit Node(Kind k, std::string t = "") : kind(k), text(std::move(t)) {}
  Kind kind;
  std::string text;                  // kText
  ExprPtr expr;                      // kOutput value, kSet value, kFor iterable
  std::vector<std::string> targets;  // kFor loop variables; kSet: {name} or {namespace, attr}
  ExprPtr condition;                 // kFor: the optional "if" filter
  std::vector<std::pair<ExprPtr, std::vector<Node>>> branches;  // kIf; else has a null condition
  std::vector<Node> body, else_body;                            // kFor
};

std::vector<Node> parse(const std::string& source);

}  // namespace tfm::jinja
