// gg::to_dot. Three steps: discover the nodes reachable from the roots (an explicit stack, no
// recursion), number them in creation order (sequence_nr) so the text never depends on
// addresses, then print: global styles, leaves, one cluster per level, edges, legend.
#include "autograd/to_dot.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "autograd/node.h"

namespace gg {
namespace {

// ---------------------------------------------------------------- palette
// Soft fills with a darker border and ink of the same hue: readable on screen and in print.
struct Colors {
  const char* fill;    // node fill
  const char* border;  // node border, edges leaving the node, cluster title
  const char* ink;     // node text
  const char* tint;    // cluster background
};
constexpr Colors kForward{"#dbeafe", "#3b73b9", "#173a63", "#f5f9ff"};         // blue
constexpr Colors kBackward{"#fde7c8", "#d4811f", "#6b3d06", "#fffaf2"};        // amber
constexpr Colors kDoubleBackward{"#eadcf8", "#8451c2", "#3f1f66", "#fbf8ff"};  // violet
constexpr Colors kLeaf{"#dcf2e3", "#3f9a62", "#17452a", "#ffffff"};            // green
constexpr Colors kTangent{"#d3f2ee", "#16877a", "#0b463f", "#ffffff"};         // teal: JVP rules' ops
constexpr const char* kRootBorder = "#c2334d";                                 // crimson
constexpr const char* kFont = "Helvetica,Arial,sans-serif";
constexpr const char* kMuted = "#5f6b7a";  // shapes and captions

const Colors& colors_of_level(int level) {
  if (level <= 0) return kForward;
  if (level == 1) return kBackward;
  return kDoubleBackward;
}

const Colors& colors_of(const Node& node) { return node.tangent ? kTangent : colors_of_level(node.level); }

// Colour category of a level: 0, 1, or 2 for every level >= 2.
int category_of_level(int level) { return std::min(std::max(level, 0), 2); }

std::string level_title(int level) {
  if (level <= 0) return "forward";
  if (level == 1) return "backward";
  if (level == 2) return "backward of backward";
  return "backward, order " + std::to_string(level);
}

// ---------------------------------------------------------------- text helpers
// Escapes for an HTML-like label <...> (also safe inside a quoted attribute).
std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\n': out += "<br/>"; break;
      default: out += c;
    }
  }
  return out;
}

// "(3, 5)", "()" for a scalar; with show_dtype "(3, 5) f64" or "(3, 5) f32 cuda:0".
std::string shape_text(const TensorMeta& m, bool show_dtype) {
  std::string s = "(";
  for (size_t i = 0; i < m.shape.size(); ++i) s += (i ? ", " : "") + std::to_string(m.shape[i]);
  s += ")";
  if (show_dtype) {
    s += std::string(" ") + dtype_name(m.dtype);
    if (!m.device.is_cpu()) s += " " + m.device.str();
  }
  return s;
}

std::string shapes_text(const Node& node, bool show_dtype) {
  std::string s;
  for (size_t i = 0; i < node.outputs.size(); ++i)
    s += (i ? "<br/>" : "") + html_escape(shape_text(node.outputs[i], show_dtype));
  return s;
}

std::string small(const std::string& html, const char* color, int points = 10) {
  return "<font point-size=\"" + std::to_string(points) + "\" color=\"" + color + "\">" + html + "</font>";
}

// ---------------------------------------------------------------- the walk
struct Tape {
  std::vector<Node*> nodes;                     // in creation order
  std::unordered_map<const Node*, size_t> ids;  // node -> index in `nodes`
};

Tape discover(const std::vector<Node*>& roots) {
  Tape tape;
  std::unordered_map<const Node*, bool> seen;
  std::vector<Node*> stack(roots.begin(), roots.end());
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    if (!seen.emplace(node, true).second) continue;
    tape.nodes.push_back(node);
    for (const Edge& e : node->next_edges)
      if (e.valid() && !seen.count(e.node.get())) stack.push_back(e.node.get());
  }
  std::sort(tape.nodes.begin(), tape.nodes.end(),
            [](const Node* a, const Node* b) { return a->sequence_nr < b->sequence_nr; });
  for (size_t i = 0; i < tape.nodes.size(); ++i) tape.ids[tape.nodes[i]] = i;
  return tape;
}

std::string id_of(size_t i) { return "n" + std::to_string(i); }

// ---------------------------------------------------------------- the printer
class DotWriter {
 public:
  DotWriter(const TensorList& roots, const DotOptions& options) : options_(options) {
    std::vector<Node*> root_nodes;
    for (const Tensor& t : roots) {
      if (!t.defined() || !t.requires_grad()) continue;
      Edge e = gradient_edge(t);  // grad_fn, or the leaf's accumulator
      keep_alive_.push_back(e.node);
      root_nodes.push_back(e.node.get());
      roots_.insert(e.node.get());
    }
    for (const auto& [t, name] : options.names) {
      if (!t.defined()) continue;
      if (t.is_leaf()) {
        append(leaf_names_[t.impl_ptr().get()], name);
      } else {
        append(output_names_[{t.grad_fn().get(), t.output_nr()}], name);
      }
    }
    tape_ = discover(root_nodes);
  }

  std::string str() {
    header();
    for (size_t i = 0; i < tape_.nodes.size(); ++i)
      if (is_leaf(i)) out_ << "  " << node_line(i) << "\n";
    std::set<int> levels;
    for (size_t i = 0; i < tape_.nodes.size(); ++i)
      if (!is_leaf(i)) levels.insert(tape_.nodes[i]->level);
    for (int level : levels) cluster(level);
    edges();
    out_ << "}\n";
    return out_.str();
  }

 private:
  static void append(std::string& to, const std::string& name) { to += (to.empty() ? "" : ", ") + name; }

  bool is_leaf(size_t i) const { return dynamic_cast<const AccumulateGrad*>(tape_.nodes[i]) != nullptr; }

  void header() {
    out_ << "digraph gradgrad {\n"
         << "  graph [rankdir=" << (options_.left_to_right ? "LR" : "TB")
         << ", fontname=\"" << kFont << "\", fontsize=12, bgcolor=\"white\", pad=0.3,"
         << " nodesep=0.25, ranksep=0.35, newrank=true, compound=true];\n"
         << "  node [fontname=\"" << kFont << "\", fontsize=12, penwidth=1.2, margin=\"0.14,0.05\"];\n"
         << "  edge [arrowsize=0.65, penwidth=1.1];\n";
    const std::string label = graph_label();
    if (!label.empty()) out_ << "  label=<" << label << ">;\n  labelloc=b;\n  labeljust=c;\n";
  }

  // One declaration: `n3 [shape=..., label=<...>, ...];`
  std::string node_line(size_t i) const {
    const Node& node = *tape_.nodes[i];
    const bool root = roots_.count(&node) > 0;
    std::ostringstream s;
    std::string label, tooltip, klass;
    const Colors* c;
    if (is_leaf(i)) {
      c = &kLeaf;
      const auto& acc = static_cast<const AccumulateGrad&>(node);
      auto it = leaf_names_.find(acc.leaf.get());
      const std::string shapes = shapes_text(node, options_.show_dtype);
      if (it != leaf_names_.end()) {
        label = "<b>" + html_escape(it->second) + "</b><br/>" + small(shapes, kMuted);
        tooltip = it->second + ": leaf";
      } else {
        label = shapes;
        tooltip = "leaf";
      }
      s << id_of(i) << " [shape=ellipse, style=filled, margin=\"0.06,0.04\"";
      klass = "leaf";
    } else {
      c = &colors_of(node);
      label = "<b>" + html_escape(node.name()) + "</b><br/>" + small(shapes_text(node, options_.show_dtype), kMuted);
      std::string names;
      for (uint32_t k = 0; k < node.outputs.size(); ++k) {
        auto it = output_names_.find({&node, k});
        if (it != output_names_.end()) append(names, it->second);
      }
      if (!names.empty()) label = small("<i>" + html_escape(names) + "</i>", c->border, 11) + "<br/>" + label;
      tooltip = std::string(node.name()) + ": " + (node.tangent ? "tangent, " : "") + level_title(node.level) +
                " (level " + std::to_string(node.level) + ")";
      s << id_of(i) << " [shape=box, style=\"rounded,filled\"";
      klass = "level" + std::to_string(category_of_level(node.level)) + (node.tangent ? " tangent" : "");
    }
    if (root) {
      label += "<br/>" + small("<b>output</b>", kRootBorder, 9);
      klass += " root";
    }
    s << ", fillcolor=\"" << c->fill << "\", color=\"" << (root ? kRootBorder : c->border)
      << "\", fontcolor=\"" << c->ink << "\"";
    if (root) s << ", penwidth=2.6";
    s << ", class=\"" << klass << "\", tooltip=\"" << html_escape(tooltip) << "\", label=<" << label << ">];";
    return s.str();
  }

  void cluster(int level) {
    const Colors& c = colors_of_level(level);
    const std::string indent = options_.cluster_levels ? "    " : "  ";
    if (options_.cluster_levels) {
      out_ << "  subgraph cluster_" << level << " {\n"
           << "    label=<" << small("<b>" + html_escape(level_title(level)) + "</b>", c.border, 12)
           << small("  level " + std::to_string(level), kMuted, 10) << ">;\n"
           << "    labeljust=l; labelloc=t;\n"
           << "    style=\"rounded,filled\"; fillcolor=\"" << c.tint << "\"; color=\"" << c.border
           << "\"; penwidth=1.0; margin=12;\n";
    }
    for (size_t i = 0; i < tape_.nodes.size(); ++i)
      if (!is_leaf(i) && tape_.nodes[i]->level == level) out_ << indent << node_line(i) << "\n";
    if (options_.cluster_levels) out_ << "  }\n";
  }

  // Input -> consumer: the reverse of next_edges, coloured like the value it carries.
  void edges() {
    for (size_t i = 0; i < tape_.nodes.size(); ++i) {
      const Node& consumer = *tape_.nodes[i];
      for (const Edge& e : consumer.next_edges) {
        if (!e.valid()) continue;
        const size_t from = tape_.ids.at(e.node.get());
        const Node& producer = *e.node;
        const Colors& c = is_leaf(from) ? kLeaf : colors_of(producer);
        out_ << "  " << id_of(from) << " -> " << id_of(i) << " [color=\"" << c.border << "\"";
        if (producer.outputs.size() > 1)
          out_ << ", taillabel=<" << small(std::to_string(e.input_nr), kMuted, 9) << ">";
        out_ << "];\n";
      }
    }
  }

  // The caption: an optional title over a one-row legend of the categories present.
  std::string graph_label() const {
    std::string rows;
    if (!options_.title.empty())
      rows += "<tr><td>" + small("<b>" + html_escape(options_.title) + "</b>", "#1f2933", 14) + "</td></tr>";
    if (options_.legend && !tape_.nodes.empty()) {
      bool has[3] = {false, false, false}, has_leaf = false, has_root = !roots_.empty(), has_tangent = false;
      for (size_t i = 0; i < tape_.nodes.size(); ++i) {
        if (is_leaf(i)) has_leaf = true;
        else if (tape_.nodes[i]->tangent) has_tangent = true;
        else has[category_of_level(tape_.nodes[i]->level)] = true;
      }
      std::string cells;
      auto key = [&](const char* fill, const char* border, const std::string& text) {
        cells += "<td bgcolor=\"" + std::string(fill) + "\" color=\"" + border +
                 "\" border=\"1\" style=\"rounded\" width=\"22\" height=\"12\"> </td>"
                 "<td align=\"left\">" + small(text, "#334155", 11) + "</td><td width=\"12\"> </td>";
      };
      if (has_leaf) key(kLeaf.fill, kLeaf.border, "leaf");
      if (has[0]) key(kForward.fill, kForward.border, "forward (level 0)");
      if (has[1]) key(kBackward.fill, kBackward.border, "backward (level 1)");
      if (has[2]) key(kDoubleBackward.fill, kDoubleBackward.border, "backward of backward (level &#8805; 2)");
      if (has_tangent) key(kTangent.fill, kTangent.border, "tangent (JVP rule)");
      if (has_root) key("#ffffff", kRootBorder, "output (root)");
      rows += "<tr><td><table border=\"0\" cellborder=\"0\" cellspacing=\"3\" cellpadding=\"2\"><tr>" + cells +
              "</tr></table></td></tr>";
    }
    if (rows.empty()) return "";
    return "<table border=\"0\" cellborder=\"0\" cellspacing=\"2\">" + rows + "</table>";
  }

  const DotOptions& options_;
  std::vector<std::shared_ptr<Node>> keep_alive_;  // accumulators made for leaf roots
  std::set<const Node*> roots_;
  std::unordered_map<const TensorImpl*, std::string> leaf_names_;
  std::map<std::pair<const Node*, uint32_t>, std::string> output_names_;
  Tape tape_;
  std::ostringstream out_;
};

}  // namespace

std::string to_dot(const TensorList& roots, const DotOptions& options) {
  return DotWriter(roots, options).str();
}

}  // namespace gg
