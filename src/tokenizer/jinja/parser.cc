// Recursive descent over the tokens of each tag, with Jinja's operator precedence.
#include <algorithm>

#include "tfm/error.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace tfm::jinja {
namespace {

// How deeply expressions and blocks may nest: a template is a file from the network, and parsing,
// rendering and freeing it recurse as deep as it nests (Jinja itself stops at Python's recursion
// limit, about as deep).
constexpr int kMaxNesting = 128;

class ExprParser {
 public:
  explicit ExprParser(const std::vector<Token>& tokens) : tokens_(tokens) {}

  ExprPtr expression() {
    const Nesting nesting(*this);
    ExprPtr value = or_expr();
    if (accept_name("if")) {
      ExprPtr condition = or_expr();
      ExprPtr otherwise = accept_name("else") ? expression() : literal(Value());
      return make(Expr::kConditional, "", std::move(value), std::move(condition),
                  std::move(otherwise));
    }
    return value;
  }

  bool at_end() const { return peek().kind == Token::kEnd; }
  const Token& peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  bool accept_name(const char* name) {
    if (peek().kind != Token::kName || peek().text != name) return false;
    ++pos_;
    return true;
  }
  bool accept_op(const char* op) {
    if (peek().kind != Token::kOperator || peek().text != op) return false;
    ++pos_;
    return true;
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(std::string("expected '") + op + "'");
  }
  std::string expect_name() {
    if (peek().kind != Token::kName) fail("expected a name");
    return tokens_[pos_++].text;
  }
  void expect_end() {
    if (!at_end()) fail("unexpected '" + peek().text + "'");
  }
  [[noreturn]] void fail(const std::string& what) const {
    std::string tag;
    for (size_t i = 0; i < tokens_.size() && tag.size() < 200; ++i) tag += tokens_[i].text + " ";
    throw Error("chat template: " + what + " in tag {% " + tag.substr(0, 200) + "%}");
  }

 private:
  // The parser's own recursion, bounded ("((((x))))" recurses without growing the tree).
  struct Nesting {
    explicit Nesting(ExprParser& p) : parser(p) {
      if (++parser.nesting_ > kMaxNesting) parser.too_deep();
    }
    ~Nesting() { --parser.nesting_; }
    ExprParser& parser;
  };
  [[noreturn]] void too_deep() const {
    fail("expression nested deeper than " + std::to_string(kMaxNesting) + " levels");
  }
  // `child` below `parent`: the tree's height, bounded (a long chain "a + a + ..." is a deep tree).
  void adopt(Expr& parent, const ExprPtr& child) const {
    if (child == nullptr) return;
    parent.height = std::max(parent.height, child->height + 1);
    if (parent.height > kMaxNesting) too_deep();
  }
  static ExprPtr literal(Value value) {
    auto e = std::make_unique<Expr>();
    e->kind = Expr::kLiteral;
    e->value = std::move(value);
    return e;
  }
  template <typename... Args>
  ExprPtr make(Expr::Kind kind, std::string name, Args&&... args) const {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->name = std::move(name);
    (e->args.push_back(std::forward<Args>(args)), ...);
    for (const ExprPtr& arg : e->args) adopt(*e, arg);
    return e;
  }

  ExprPtr or_expr() {
    ExprPtr left = and_expr();
    while (accept_name("or")) left = make(Expr::kBinary, "or", std::move(left), and_expr());
    return left;
  }
  ExprPtr and_expr() {
    ExprPtr left = not_expr();
    while (accept_name("and")) left = make(Expr::kBinary, "and", std::move(left), not_expr());
    return left;
  }
  ExprPtr not_expr() {
    if (accept_name("not")) {
      const Nesting nesting(*this);
      return make(Expr::kNot, "", not_expr());
    }
    return comparison();
  }
  ExprPtr comparison() {
    ExprPtr left = concat();
    while (true) {
      std::string op;
      for (const char* candidate : {"==", "!=", "<=", ">=", "<", ">"}) {
        if (accept_op(candidate)) op = candidate;
        if (!op.empty()) break;
      }
      if (op.empty() && accept_name("in")) op = "in";
      if (op.empty() && peek().text == "not" && peek(1).text == "in") {
        pos_ += 2;
        op = "not in";
      }
      if (op.empty() && accept_name("is")) {
        auto test = make(Expr::kTest, "", std::move(left));
        test->negated = accept_name("not");
        test->name = expect_name();
        if (accept_op("(")) call_args(*test);
        left = std::move(test);
        continue;
      }
      if (op.empty()) return left;
      left = make(Expr::kBinary, op, std::move(left), concat());
    }
  }
  ExprPtr concat() {
    ExprPtr left = additive();
    while (accept_op("~")) left = make(Expr::kBinary, "~", std::move(left), additive());
    return left;
  }
  ExprPtr additive() {
    ExprPtr left = multiplicative();
    while (peek().text == "+" || peek().text == "-") {
      const std::string op = tokens_[pos_++].text;
      left = make(Expr::kBinary, op, std::move(left), multiplicative());
    }
    return left;
  }
  ExprPtr multiplicative() {
    ExprPtr left = unary();
    while (peek().kind == Token::kOperator && (peek().text == "*" || peek().text == "/" ||
                                               peek().text == "//" || peek().text == "%")) {
      const std::string op = tokens_[pos_++].text;
      left = make(Expr::kBinary, op, std::move(left), unary());
    }
    return left;
  }
  ExprPtr unary() {
    if (accept_op("-")) {
      const Nesting nesting(*this);
      return make(Expr::kNegate, "", unary());
    }
    return postfix();
  }
  ExprPtr postfix() {
    ExprPtr e = primary();
    while (true) {
      if (accept_op(".")) {
        e = make(Expr::kAttribute, expect_name(), std::move(e));
      } else if (accept_op("[")) {
        e = subscript(std::move(e));
      } else if (accept_op("(")) {
        auto call = make(Expr::kCall, "", std::move(e));
        call_args(*call);
        e = std::move(call);
      } else if (accept_op("|")) {
        auto filter = make(Expr::kFilter, expect_name(), std::move(e));
        if (accept_op("(")) call_args(*filter);
        e = std::move(filter);
      } else {
        return e;
      }
    }
  }
  ExprPtr subscript(ExprPtr target) {
    ExprPtr parts[3];
    int part = 0;
    bool slice = false;
    while (!accept_op("]")) {
      if (accept_op(":")) {
        slice = true;
        if (++part > 2) fail("too many ':' in a slice");
      } else {
        parts[part] = expression();
      }
    }
    if (!slice) return make(Expr::kIndex, "", std::move(target), std::move(parts[0]));
    return make(Expr::kSlice, "", std::move(target), std::move(parts[0]), std::move(parts[1]),
                std::move(parts[2]));
  }
  void call_args(Expr& call) {
    while (!accept_op(")")) {
      if (peek().kind == Token::kName && peek(1).text == "=") {
        std::string key = tokens_[pos_].text;
        pos_ += 2;
        call.kwargs.emplace_back(std::move(key), expression());
        adopt(call, call.kwargs.back().second);
      } else {
        call.args.push_back(expression());
        adopt(call, call.args.back());
      }
      if (!accept_op(",")) {
        expect_op(")");
        return;
      }
    }
  }
  ExprPtr primary() {
    const Token& token = peek();
    ++pos_;
    switch (token.kind) {
      case Token::kString: {
        std::string text = token.text;
        while (peek().kind == Token::kString) text += tokens_[pos_++].text;  // "a" "b"
        return literal(Value(std::move(text)));
      }
      case Token::kInt:
        return literal(Value(static_cast<int64_t>(std::stoll(token.text))));
      case Token::kFloat:
        return literal(Value(std::stod(token.text)));
      case Token::kName:
        if (token.text == "true" || token.text == "True") return literal(Value(true));
        if (token.text == "false" || token.text == "False") return literal(Value(false));
        if (token.text == "none" || token.text == "None") return literal(Value(None{}));
        return make(Expr::kName, token.text);
      case Token::kOperator:
        if (token.text == "(") {
          ExprPtr inner = expression();
          expect_op(")");
          return inner;
        }
        if (token.text == "[") {
          auto list = make(Expr::kList, "");
          while (!accept_op("]")) {
            list->args.push_back(expression());
            adopt(*list, list->args.back());
            if (!accept_op(",")) {
              expect_op("]");
              break;
            }
          }
          return list;
        }
        if (token.text == "{") {
          auto dict = make(Expr::kDict, "");
          while (!accept_op("}")) {
            if (peek().kind != Token::kString) fail("dict keys must be strings");
            std::string key = tokens_[pos_++].text;
            expect_op(":");
            dict->kwargs.emplace_back(std::move(key), expression());
            adopt(*dict, dict->kwargs.back().second);
            if (!accept_op(",")) {
              expect_op("}");
              break;
            }
          }
          return dict;
        }
        break;
      case Token::kEnd:
        --pos_;
        break;
    }
    fail("unexpected '" + token.text + "'");
  }

  const std::vector<Token>& tokens_;
  size_t pos_ = 0;
  int nesting_ = 0;
};

class TemplateParser {
 public:
  explicit TemplateParser(std::vector<Chunk> chunks) : chunks_(std::move(chunks)) {}

  // Parses nodes until a statement whose keyword is in `ends`; returns that keyword.
  std::string block(std::vector<Node>& out, std::initializer_list<const char*> ends) {
    if (++depth_ > kMaxNesting) {
      throw Error("chat template: blocks nested deeper than " + std::to_string(kMaxNesting) +
                  " levels");
    }
    const std::string end = block_body(out, ends);
    --depth_;
    return end;
  }

  ExprParser tag_parser() const {
    ExprParser p(current_->tokens);
    p.expect_name();
    return p;
  }

 private:
  std::string block_body(std::vector<Node>& out, std::initializer_list<const char*> ends) {
    while (pos_ < chunks_.size()) {
      Chunk& chunk = chunks_[pos_++];
      if (chunk.kind == Chunk::kText) {
        if (!chunk.text.empty()) out.emplace_back(Node::kText, std::move(chunk.text));
        continue;
      }
      ExprParser p(chunk.tokens);
      if (chunk.kind == Chunk::kOutput) {
        Node node(Node::kOutput);
        node.expr = p.expression();
        p.expect_end();
        out.push_back(std::move(node));
        continue;
      }
      const std::string keyword = p.expect_name();
      for (const char* end : ends) {
        if (keyword == end) {
          current_ = &chunk;
          return keyword;
        }
      }
      out.push_back(statement(keyword, p));
    }
    if (ends.size() > 0)
      throw Error("chat template: missing {% " + std::string(*ends.begin()) + " %}");
    return "";
  }

  Node statement(const std::string& keyword, ExprParser& p) {
    Node node(Node::kText);
    if (keyword == "if") {
      node.kind = Node::kIf;
      ExprPtr condition = p.expression();
      p.expect_end();
      while (true) {
        std::vector<Node> body;
        const std::string end = block(body, {"endif", "elif", "else"});
        node.branches.emplace_back(std::move(condition), std::move(body));
        if (end == "endif") break;
        ExprParser tag = tag_parser();
        condition = end == "elif" ? tag.expression() : nullptr;
        tag.expect_end();
      }
    } else if (keyword == "for") {
      node.kind = Node::kFor;
      do node.targets.push_back(p.expect_name());
      while (p.accept_op(","));
      if (!p.accept_name("in")) p.fail("expected 'in'");
      node.expr = p.expression();  // a trailing "if" is parsed as a conditional; split it off
      if (node.expr->kind == Expr::kConditional && node.expr->args[2]->kind == Expr::kLiteral &&
          node.expr->args[2]->value.is_undefined()) {
        node.condition = std::move(node.expr->args[1]);
        node.expr = std::move(node.expr->args[0]);
      }
      p.expect_end();
      if (block(node.body, {"endfor", "else"}) == "else") block(node.else_body, {"endfor"});
    } else if (keyword == "set") {
      node.kind = Node::kSet;
      node.targets.push_back(p.expect_name());
      if (p.accept_op(".")) node.targets.push_back(p.expect_name());
      p.expect_op("=");
      node.expr = p.expression();
      p.expect_end();
    } else if (keyword == "break" || keyword == "continue") {
      node.kind = keyword == "break" ? Node::kBreak : Node::kContinue;
      p.expect_end();
    } else {
      p.fail("unsupported statement '" + keyword + "'");
    }
    return node;
  }

  std::vector<Chunk> chunks_;
  size_t pos_ = 0;
  int depth_ = 0;                   // blocks open
  const Chunk* current_ = nullptr;  // the statement that ended the last block
};

}  // namespace

std::vector<Node> parse(const std::string& source) {
  TemplateParser parser(lex(source));
  std::vector<Node> nodes;
  parser.block(nodes, {});
  return nodes;
}

}  // namespace tfm::jinja
