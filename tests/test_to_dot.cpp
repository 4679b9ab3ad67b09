// gg::to_dot: the DOT text names every op on the tape, puts the nodes of a grad-of-grad tape in
// three levels, is a well-formed digraph whose edges run input -> consumer, and depends only on
// the computation (same graph, same text). The checks read the text with a small line-based
// reader: to_dot writes one statement per line.
#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <unordered_set>
#include <vector>

#include "autograd/to_dot.h"
#include "test_util.h"

namespace gg::test {
namespace {

// f = sum(tanh(w·x)²), g = ∂f/∂w (recorded), penalty = sum(g∘g), hg = ∂penalty/∂w (recorded).
struct GradOfGrad {
  Tensor w, f, g, penalty, hg;
  TensorList roots() const { return {f, penalty, hg}; }
};

GradOfGrad grad_of_grad() {
  manual_seed(3);
  GradOfGrad c;
  Tensor x = randn({4, 5}, DType::f64);
  c.w = randn({3, 4}, DType::f64).requires_grad_();
  Tensor h = tanh(matmul(c.w, x));
  c.f = sum(h * h);
  GradOptions record;
  record.create_graph = true;
  c.g = grad(c.f, c.w, Tensor(), record);
  c.penalty = sum(c.g * c.g);
  c.hg = grad(c.penalty, c.w, Tensor(), record);
  return c;
}

// The tape behind `roots`, walked here independently of to_dot.
std::vector<const Node*> tape_nodes(const TensorList& roots) {
  std::vector<const Node*> nodes, stack;
  std::unordered_set<const Node*> seen;
  for (const Tensor& t : roots)
    if (t.grad_fn()) stack.push_back(t.grad_fn().get());
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    nodes.push_back(n);
    for (const Edge& e : n->next_edges)
      if (e.valid()) stack.push_back(e.node.get());
  }
  return nodes;
}

// What the reader finds in the text.
struct Dot {
  std::map<std::string, std::string> nodes;           // id -> the rest of its declaration line
  std::map<std::string, std::string> cluster_of;      // id -> "cluster_k" or "" (top level)
  std::vector<std::pair<std::string, std::string>> edges;
  int duplicate_ids = 0;
};

Dot read_dot(const std::string& text) {
  static const std::regex node_re(R"(^\s*(n\d+) \[(.*)\];$)");
  static const std::regex edge_re(R"(^\s*(n\d+) -> (n\d+)( \[.*\])?;$)");
  static const std::regex cluster_re(R"(^\s*subgraph (cluster_\d+) \{$)");
  Dot dot;
  std::string cluster;
  std::istringstream lines(text);
  std::smatch m;
  for (std::string line; std::getline(lines, line);) {
    if (std::regex_match(line, m, cluster_re)) {
      cluster = m[1];
    } else if (line == "  }") {
      cluster.clear();
    } else if (std::regex_match(line, m, edge_re)) {
      dot.edges.emplace_back(m[1], m[2]);
    } else if (std::regex_match(line, m, node_re)) {
      if (!dot.nodes.emplace(m[1], m[2]).second) ++dot.duplicate_ids;
      dot.cluster_of[m[1]] = cluster;
    }
  }
  return dot;
}

// Braces balance outside quoted strings and HTML-like labels <...>, and never go negative.
bool braces_balanced(const std::string& text) {
  int depth = 0, angle = 0;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '\\') ++i;
      else if (c == '"') quoted = false;
    } else if (angle > 0) {
      if (c == '<') ++angle;
      if (c == '>') --angle;
    } else if (c == '"') {
      quoted = true;
    } else if (c == '<') {
      angle = 1;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}') {
      if (--depth < 0) return false;
    }
  }
  return depth == 0 && !quoted && angle == 0;
}

std::string id_with(const Dot& dot, const std::string& fragment) {
  for (const auto& [id, decl] : dot.nodes)
    if (decl.find(fragment) != std::string::npos) return id;
  return "";
}

TEST(ToDot, NamesEveryOpOnTheTape) {
  const GradOfGrad c = grad_of_grad();
  const std::string text = to_dot(c.roots());
  std::set<std::string> names;
  for (const Node* n : tape_nodes(c.roots()))
    if (!dynamic_cast<const AccumulateGrad*>(n)) names.insert(n->name());
  for (const char* expected : {"matmul", "tanh", "mul", "sum"}) EXPECT_TRUE(names.count(expected)) << expected;
  for (const std::string& name : names) EXPECT_NE(text.find("<b>" + name + "</b>"), std::string::npos) << name;
}

TEST(ToDot, GradOfGradHasNodesOfAllThreeLevels) {
  const GradOfGrad c = grad_of_grad();
  const Dot dot = read_dot(to_dot(c.roots()));
  std::map<int, int> per_level;  // from the tape itself
  for (const Node* n : tape_nodes(c.roots()))
    if (!dynamic_cast<const AccumulateGrad*>(n)) ++per_level[std::min(n->level, 2)];
  std::map<int, int> drawn;  // from the text: class="levelK", inside subgraph cluster_K
  for (const auto& [id, decl] : dot.nodes) {
    for (int k = 0; k <= 2; ++k) {
      if (decl.find("class=\"level" + std::to_string(k)) == std::string::npos) continue;
      ++drawn[k];
      EXPECT_EQ(dot.cluster_of.at(id), "cluster_" + std::to_string(k)) << id << ": " << decl;
    }
  }
  for (int k = 0; k <= 2; ++k) {
    EXPECT_GT(per_level[k], 0) << "the tape has no node of level " << k;
    EXPECT_EQ(drawn[k], per_level[k]) << "level " << k;
  }
}

// Reverse over forward: the tangent of tanh is computed by its JVP rule's ops (mul, sub, ...),
// recorded because x requires grad; they are drawn as tangent nodes with their own key.
TEST(ToDot, TangentComputationsHaveTheirOwnColour) {
  const Tensor x = from_vector({0.5, -1.0}, {2}, DType::f64).requires_grad_();
  Tensor t;
  {
    fwd::DualLevel level;
    t = fwd::unpack_dual(tanh(fwd::make_dual(x, from_vector({1.0, 2.0}, {2}, DType::f64)))).tangent;
  }
  const std::string text = to_dot({t});
  const Dot dot = read_dot(text);
  int tangents = 0, drawn = 0;
  for (const Node* n : tape_nodes({t}))
    if (!dynamic_cast<const AccumulateGrad*>(n)) tangents += n->tangent;
  for (const auto& [id, decl] : dot.nodes) {  // class="levelK tangent" (and " root" on the output)
    const size_t at = decl.find("class=\"") + 7;
    drawn += decl.substr(at, decl.find('"', at) - at).find("tangent") != std::string::npos;
  }
  EXPECT_GT(tangents, 0);
  EXPECT_EQ(drawn, tangents);
  EXPECT_NE(text.find("tangent (JVP rule)"), std::string::npos);
  EXPECT_NE(text.find("<b>tanh</b>"), std::string::npos);  // the primal's op, blue, feeds the tangent
}

TEST(ToDot, IsAWellFormedDigraph) {
  const GradOfGrad c = grad_of_grad();
  const std::string text = to_dot(c.roots());
  EXPECT_EQ(text.rfind("digraph ", 0), 0u);
  EXPECT_TRUE(braces_balanced(text));
  const Dot dot = read_dot(text);
  EXPECT_EQ(dot.duplicate_ids, 0);

  const std::vector<const Node*> nodes = tape_nodes(c.roots());
  size_t edges = 0;
  for (const Node* n : nodes)
    for (const Edge& e : n->next_edges) edges += e.valid();
  EXPECT_EQ(dot.nodes.size(), nodes.size());  // one declaration per node
  EXPECT_EQ(dot.edges.size(), edges);         // one arrow per edge
  for (const auto& [from, to] : dot.edges) {
    EXPECT_TRUE(dot.nodes.count(from)) << "undeclared " << from;
    EXPECT_TRUE(dot.nodes.count(to)) << "undeclared " << to;
  }
}

TEST(ToDot, GraphvizAcceptsIt) {
  if (std::system("command -v dot >/dev/null 2>&1") != 0) GTEST_SKIP() << "Graphviz `dot` not on PATH";
  const std::string path = ::testing::TempDir() + "gg_to_dot_test.dot";
  std::ofstream(path) << to_dot(grad_of_grad().roots());
  EXPECT_EQ(std::system(("dot -Tcanon '" + path + "' -o /dev/null").c_str()), 0);
  std::remove(path.c_str());
}

TEST(ToDot, EdgesRunFromInputToConsumerAndRootsAreMarked) {
  Tensor x = full({2, 3}, 0.5, DType::f64).requires_grad_();
  Tensor y = tanh(x);
  const Dot dot = read_dot(to_dot({y}));
  ASSERT_EQ(dot.nodes.size(), 2u);
  const std::string leaf = id_with(dot, "shape=ellipse"), op = id_with(dot, "<b>tanh</b>");
  ASSERT_FALSE(leaf.empty());
  ASSERT_FALSE(op.empty());
  ASSERT_EQ(dot.edges.size(), 1u);
  EXPECT_EQ(dot.edges[0], std::make_pair(leaf, op));       // x -> tanh, not tanh -> x
  EXPECT_NE(dot.nodes.at(leaf).find("(2, 3)"), std::string::npos);
  EXPECT_NE(dot.nodes.at(op).find("root"), std::string::npos);
  EXPECT_EQ(dot.nodes.at(leaf).find("root"), std::string::npos);
}

TEST(ToDot, PrintsNamesEscaped) {
  Tensor x = full({3}, 1.0, DType::f64).requires_grad_();
  Tensor y = exp(x);
  DotOptions options;
  options.names = {{x, "x<0> & \"co\""}, {y, "y"}};
  const std::string text = to_dot({y}, options);
  EXPECT_NE(text.find("<b>x&lt;0&gt; &amp; &quot;co&quot;</b>"), std::string::npos) << text;
  EXPECT_NE(text.find("<i>y</i>"), std::string::npos);
  EXPECT_TRUE(braces_balanced(text));
}

TEST(ToDot, SameComputationGivesTheSameText) {
  const GradOfGrad a = grad_of_grad();
  const std::string first = to_dot(a.roots());
  EXPECT_EQ(first, to_dot(a.roots()));
  const GradOfGrad b = grad_of_grad();  // fresh nodes at fresh addresses
  EXPECT_EQ(first, to_dot(b.roots()));
}

TEST(ToDot, RootsWithoutTapeGiveAnEmptyGraph) {
  const std::string text = to_dot({full({2}, 1.0), Tensor()});
  EXPECT_TRUE(braces_balanced(text));
  EXPECT_TRUE(read_dot(text).nodes.empty());
}

TEST(ToDot, ALeafRootIsOneMarkedEllipse) {
  Tensor x = full({4}, 1.0).requires_grad_();
  const Dot dot = read_dot(to_dot({x}));
  ASSERT_EQ(dot.nodes.size(), 1u);
  EXPECT_NE(dot.nodes.begin()->second.find("shape=ellipse"), std::string::npos);
  EXPECT_NE(dot.nodes.begin()->second.find("root"), std::string::npos);
}

TEST(ToDot, OptionsKeepItWellFormed) {
  const GradOfGrad c = grad_of_grad();
  DotOptions options;
  options.cluster_levels = false;
  options.legend = false;
  options.left_to_right = true;
  options.show_dtype = true;
  const std::string text = to_dot(c.roots(), options);
  EXPECT_TRUE(braces_balanced(text));
  EXPECT_EQ(text.find("subgraph"), std::string::npos);
  EXPECT_NE(text.find("rankdir=LR"), std::string::npos);
  EXPECT_NE(text.find("(3, 4) f64"), std::string::npos);
  EXPECT_EQ(read_dot(text).nodes.size(), tape_nodes(c.roots()).size());
}

// A recursive walk would overflow this thread's 256 KiB stack on a 20000-op chain.
void* draw_chain(void* arg) {
  const auto& y = *static_cast<const Tensor*>(arg);
  return new std::string(to_dot({y}));
}

TEST(ToDot, LongTapeOnASmallStack) {
  const int kLength = 20000;
  Tensor x = scalar_tensor(1.0, DType::f64).requires_grad_();
  Tensor y = x;
  for (int i = 0; i < kLength; ++i) y = neg(y);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  pthread_t thread;
  ASSERT_EQ(pthread_create(&thread, &attr, draw_chain, &y), 0);
  void* result = nullptr;
  pthread_join(thread, &result);
  pthread_attr_destroy(&attr);
  std::unique_ptr<std::string> text(static_cast<std::string*>(result));
  const Dot dot = read_dot(*text);
  EXPECT_EQ(dot.nodes.size(), static_cast<size_t>(kLength + 1));
  EXPECT_EQ(dot.edges.size(), static_cast<size_t>(kLength));
}

}  // namespace
}  // namespace gg::test
