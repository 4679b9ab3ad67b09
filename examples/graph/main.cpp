// Drawing the tape: what a gradient of a gradient looks like inside gradgrad.
//
// We build a small computation whose second derivative is taken by autograd itself:
//
//     f(w)       = sum(tanh(w·x)²)              w (3, 4) the weights, x (4, 5) data
//     g          = ∂f/∂w                        gg::grad with create_graph: g is on the tape
//     penalty    = sum(g ∘ g)                   a gradient penalty, as in WGAN-GP or MAML
//     ∂penalty/∂w                               gg::grad again, also recorded
//
// and hand the tape to gg::to_dot, which writes a Graphviz file. With Graphviz installed the
// program also renders it to SVG and PNG. The three colours say which pass recorded each node:
//
//   blue    level 0, the forward: ops you called (matmul, tanh, ...), including sum(g ∘ g),
//           which is ordinary user code even though g is a gradient.
//   amber   level 1, the backward: the ops gg::grad ran to compute g. Because create_graph
//           was on, each backward rule (written in gg ops) left nodes on the tape.
//   violet  level 2, the backward of a backward: the ops the second gg::grad ran while
//           differentiating through the amber nodes.
//
// Why few frameworks can draw the violet nodes: two things are needed. First, the backward
// must itself be recorded, which means every backward rule is built from differentiable ops;
// engines whose rules compute on raw buffers (micrograd, many C++ engines) stop at first order
// and have no amber nodes, let alone violet ones. Second, each node must remember which pass
// made it; gradgrad stores that as Node::level, so the picture can tell the passes apart.
//
// Usage:  graph [--out graph.dot] [--tb] [--smoke]      (exits non-zero if something is missing)
// Beside the DOT file: metrics.jsonl (common/metrics.h: the configuration, then the node count
// of each pass) and, with Graphviz, the drawing as SVG and PNG.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <unordered_set>
#include <vector>

#include <CLI/CLI.hpp>

#include "autograd/to_dot.h"
#include "common/metrics.h"
#include "common/run.h"
#include "gradgrad.h"

namespace {

namespace fs = std::filesystem;

struct Computation {
  gg::Tensor w, f, g, penalty, penalty_grad;
};

Computation build() {
  gg::manual_seed(0);
  Computation c;
  const gg::Tensor x = gg::randn({4, 5});  // (4, 5) data: no gradient, so not drawn
  c.w = gg::randn({3, 4}).requires_grad_();
  const gg::Tensor h = gg::tanh(gg::matmul(c.w, x));  // (3, 5)
  c.f = gg::sum(h * h);                               // ()
  gg::GradOptions record;
  record.create_graph = true;                             // keep the backward on the tape
  c.g = gg::grad(c.f, c.w, gg::Tensor(), record);         // (3, 4), made of level-1 nodes
  c.penalty = gg::sum(c.g * c.g);                         // (), level 0 again
  c.penalty_grad = gg::grad(c.penalty, c.w, gg::Tensor(), record);  // (3, 4), level-2 nodes
  return c;
}

// How many nodes each pass left on the tape behind `roots`. The tape is a graph: follow
// grad_fn, then next_edges; a node can be reached along several paths, so remember visits.
// An explicit stack rather than recursion, because tapes can be very long.
std::map<int, int> nodes_per_level(const gg::TensorList& roots) {
  std::map<int, int> count;
  std::unordered_set<const gg::Node*> seen;
  std::vector<const gg::Node*> stack;
  for (const gg::Tensor& t : roots)
    if (t.grad_fn()) stack.push_back(t.grad_fn().get());
  while (!stack.empty()) {
    const gg::Node* node = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second) continue;
    if (std::string(node->name()) != "AccumulateGrad") ++count[node->level];
    for (const gg::Edge& e : node->next_edges)
      if (e.valid()) stack.push_back(e.node.get());
  }
  return count;
}

// Single-quoted for the shell, so paths with spaces survive std::system.
std::string shell_quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

bool on_path(const std::string& program) {
  return std::system(("command -v " + program + " >/dev/null 2>&1").c_str()) == 0;
}

// Runs `dot -T<format>`; returns false if Graphviz reported an error.
bool render(const fs::path& dot_file, const std::string& format) {
  fs::path out = dot_file;
  out.replace_extension(format);
  const std::string cmd = "dot -T" + format + " " + shell_quoted(dot_file.string()) + " -o " + shell_quoted(out.string());
  const bool ok = std::system(cmd.c_str()) == 0;
  std::printf("  %-5s %s\n", ok ? "wrote" : "FAILED", out.string().c_str());
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Draw the tape of a gradient-of-a-gradient computation with gg::to_dot"};
  std::string out_path = "graph.dot";
  bool top_to_bottom = false, smoke = false;
  app.add_option("out,-o,--out", out_path, "where to write the DOT file (metrics.jsonl goes beside it)")
      ->capture_default_str();
  app.add_flag("--tb", top_to_bottom, "lay the graph out top to bottom instead of left to right");
  app.add_flag("--smoke", smoke, "the ctest's run (the tape is small: the same work as without it)");
  CLI11_PARSE(app, argc, argv);

  return examples::run_checked([&] {
    const Computation c = build();
    const gg::TensorList roots{c.f, c.penalty, c.penalty_grad};

    std::printf("nodes on the tape behind f, penalty and d penalty / dw, by the pass that recorded them:\n");
    const std::map<int, int> levels = nodes_per_level(roots);
    const char* pass[] = {"forward", "backward", "backward of backward"};
    for (const auto& [level, n] : levels)
      std::printf("  level %d  %-22s %3d nodes\n", level, pass[std::min(level, 2)], n);

    gg::DotOptions options;
    options.names = {{c.w, "w"}, {c.f, "f"}, {c.g, "g = df/dw"}, {c.penalty, "penalty = |g|²"},
                     {c.penalty_grad, "d penalty / dw"}};
    options.title = "f = sum(tanh(w·x)²),  penalty = |df/dw|²,  and d penalty / dw";
    options.left_to_right = !top_to_bottom;  // the three passes become three horizontal lanes
    const std::string dot = gg::to_dot(roots, options);

    const fs::path dot_file(out_path);
    if (dot_file.has_parent_path()) fs::create_directories(dot_file.parent_path());
    examples::Metrics metrics(dot_file.has_parent_path() ? dot_file.parent_path().string() : ".", "graph",
                              {{"out", out_path}, {"top_to_bottom", top_to_bottom}, {"smoke", smoke},
                               {"w", {3, 4}}, {"x", {4, 5}}});
    for (const auto& [level, n] : levels)
      metrics.write({{"phase", "tape"}, {"level", level}, {"pass", pass[std::min(level, 2)]}, {"nodes", n}});
    std::ofstream(dot_file) << dot;
    std::printf("\n  wrote %s (%zu bytes)\n", dot_file.string().c_str(), dot.size());

    bool ok = levels.count(0) && levels.count(1) && levels.count(2);
    if (!ok) std::printf("error: expected nodes of levels 0, 1 and 2 on the tape\n");
    if (on_path("dot")) {
      ok = render(dot_file, "svg") && ok;
      ok = render(dot_file, "png") && ok;
    } else {
      fs::path svg = dot_file;
      svg.replace_extension("svg");
      std::printf("  note: Graphviz `dot` is not on PATH; install it, or render elsewhere with\n"
                  "        dot -Tsvg %s -o %s\n", dot_file.string().c_str(), svg.string().c_str());
    }
    return ok ? 0 : 1;
  });
}
