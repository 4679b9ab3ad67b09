#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "autograd/grad_mode.h"
#include "ops/ops.h"

namespace gg::io {
namespace {

using json = nlohmann::ordered_json;
using detail::concat;

bool little_endian_host() {
  const uint16_t one = 1;
  unsigned char first;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

// The file's byte order is little-endian; on a big-endian host every element is reversed.
void to_from_little_endian(char* data, size_t bytes, size_t element) {
  if (little_endian_host() || element == 1) return;
  for (size_t i = 0; i + element <= bytes; i += element) std::reverse(data + i, data + i + element);
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

struct Header {
  std::vector<Entry> entries;  // sorted by begin
  Metadata metadata;
};

uint64_t read_u64_le(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// Validates the JSON header against `data_size` bytes of data.
Header parse_header(const std::string& text, uint64_t data_size, const std::string& what) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw FormatError(concat("gg::io::load_safetensors: ", what, ": the header is not valid JSON (", e.what(), ")"));
  }
  GG_CHECK(j.is_object(), FormatError, "gg::io::load_safetensors: ", what, ": the header must be a JSON object, got ",
           j.type_name());
  Header h;
  for (const auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      GG_CHECK(v.is_object(), FormatError, "gg::io::load_safetensors: ", what, ": __metadata__ must be an object of strings");
      for (const auto& [k, s] : v.items()) {
        GG_CHECK(s.is_string(), FormatError, "gg::io::load_safetensors: ", what, ": __metadata__[\"", k,
                 "\"] is a ", s.type_name(), ", not a string");
        h.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    const std::string where = concat("gg::io::load_safetensors: ", what, ": tensor '", name, "'");
    GG_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"), FormatError,
             where, " needs an object with dtype, shape and data_offsets");
    GG_CHECK(v["dtype"].is_string(), FormatError, where, ": dtype must be a string");
    Entry e;
    e.name = name;
    e.dtype = dtype_from_safetensors(v["dtype"].get<std::string>(), where);
    const json& shape = v["shape"];
    GG_CHECK(shape.is_array(), FormatError, where, ": shape must be an array");
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& d : shape) {
      GG_CHECK(d.is_number_unsigned(), FormatError, where, ": shape ", shape.dump(), " must hold non-negative integers");
      const uint64_t n = d.get<uint64_t>();
      GG_CHECK(n <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), FormatError, where, ": dim ", n,
               " is too large");
      overflow = overflow || __builtin_mul_overflow(numel, n, &numel);
      e.shape.push_back(static_cast<int64_t>(n));
    }
    uint64_t nbytes = 0;
    overflow = overflow || __builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(e.dtype)), &nbytes);
    GG_CHECK(!overflow, FormatError, where, ": shape ", shape.dump(), " overflows 64 bits");
    const json& off = v["data_offsets"];
    GG_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
             FormatError, where, ": data_offsets must be two non-negative integers, got ", off.dump());
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    GG_CHECK(e.begin <= e.end, FormatError, where, ": data_offsets [", e.begin, ", ", e.end, "] end before they begin");
    GG_CHECK(e.end <= data_size, FormatError, where, ": data_offsets [", e.begin, ", ", e.end,
             "] reach past the data, which has ", data_size, " bytes");
    GG_CHECK(e.end - e.begin == nbytes, FormatError, where, ": shape ", shape.dump(), " of ", dtype_name(e.dtype),
             " needs ", nbytes, " bytes, data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin);
    h.entries.push_back(std::move(e));
  }
  std::sort(h.entries.begin(), h.entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t covered = 0;
  for (size_t i = 0; i < h.entries.size(); ++i) {
    const Entry& e = h.entries[i];
    GG_CHECK(e.begin >= covered, FormatError, "gg::io::load_safetensors: ", what, ": tensor '", e.name,
             "' at [", e.begin, ", ", e.end, ") overlaps tensor '", h.entries[i - 1].name, "' at [",
             h.entries[i - 1].begin, ", ", h.entries[i - 1].end, ")");
    GG_CHECK(e.begin == covered, FormatError, "gg::io::load_safetensors: ", what, ": bytes [", covered, ", ", e.begin,
             ") before tensor '", e.name, "' belong to no tensor");
    covered = e.end;
  }
  GG_CHECK(covered == data_size, FormatError, "gg::io::load_safetensors: ", what, ": the data has ", data_size,
           " bytes but the tensors cover ", covered);
  return h;
}

// The header's length from the first 8 bytes, checked against the cap and the total size.
uint64_t header_length(const char* first8, uint64_t total, const LoadOptions& o, const std::string& what) {
  const uint64_t n = read_u64_le(first8);
  GG_CHECK(n <= o.max_header_bytes, FormatError, "gg::io::load_safetensors: ", what, ": header length ", n,
           " exceeds the limit of ", o.max_header_bytes, " bytes");
  GG_CHECK(n <= total - 8, FormatError, "gg::io::load_safetensors: ", what, ": header length ", n,
           " reaches past the end of the file (", total, " bytes)");
  return n;
}

// Builds the tensors; `fill(entry, destination)` copies entry's bytes into destination.
Safetensors materialise(const Header& h, const LoadOptions& o, const std::function<void(const Entry&, char*)>& fill) {
  Safetensors out;
  out.metadata = h.metadata;
  for (const Entry& e : h.entries) {
    Tensor t = empty(e.shape, e.dtype, Device::cpu());
    if (e.end > e.begin) {
      char* dst = static_cast<char*>(t.raw_data());
      fill(e, dst);
      to_from_little_endian(dst, e.end - e.begin, dtype_size(e.dtype));
    }
    out.tensors.emplace_back(e.name, o.device == Device::cpu() ? t : t.to(o.device));
  }
  return out;
}

}  // namespace

DType dtype_from_safetensors(const std::string& name, const std::string& what) {
  if (name == "F32") return DType::f32;
  if (name == "F64") return DType::f64;
  if (name == "BF16") return DType::bf16;
  if (name == "F16") return DType::f16;
  if (name == "I64") return DType::i64;
  if (name == "BOOL") return DType::b8;
  static const std::set<std::string> known = {"I8", "U8", "I16", "U16", "I32", "U32", "U64", "F8_E4M3", "F8_E5M2",
                                              "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64"};
  GG_CHECK(!known.count(name), FormatError, what, ": dtype ", name,
           " is valid safetensors but gradgrad has no such dtype (F64, F32, BF16, F16, I64, BOOL)");
  throw FormatError(concat(what, ": unknown dtype '", name, "'"));
}

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::i64: return "I64";
    case DType::b8: return "BOOL";
  }
  return "?";
}

const Tensor& Safetensors::at(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  throw ValueError(concat("gg::io::Safetensors::at: no tensor named '", name, "' (", tensors.size(), " tensors)"));
}

std::string serialize_safetensors(const NamedTensors& tensors, const Metadata& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> cpu;
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const auto& [name, t] : tensors) {
    GG_CHECK(t.defined(), ValueError, "gg::io::save_safetensors: tensor '", name, "' is undefined");
    GG_CHECK(name != "__metadata__", ValueError, "gg::io::save_safetensors: '__metadata__' is reserved, not a tensor name");
    GG_CHECK(names.insert(name).second, ValueError, "gg::io::save_safetensors: the name '", name, "' appears twice");
    NoGradGuard no_grad;
    Tensor c = contiguous(t.detach().to(Device::cpu()));
    const uint64_t n = static_cast<uint64_t>(c.numel()) * dtype_size(c.dtype());
    header[name] = {{"dtype", safetensors_dtype_name(c.dtype())}, {"shape", c.shape()}, {"data_offsets", {offset, offset + n}}};
    offset += n;
    cpu.push_back(c);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  out += text;
  const size_t data_start = out.size();
  out.resize(data_start + offset);
  char* dst = &out[data_start];
  for (const Tensor& c : cpu) {
    const size_t n = static_cast<size_t>(c.numel()) * dtype_size(c.dtype());
    if (n) std::memcpy(dst, c.raw_data(), n);
    to_from_little_endian(dst, n, dtype_size(c.dtype()));
    dst += n;
  }
  return out;
}

Safetensors parse_safetensors(const std::string& bytes, const LoadOptions& o, const std::string& what) {
  GG_CHECK(bytes.size() >= 8, FormatError, "gg::io::load_safetensors: ", what, ": ", bytes.size(),
           " bytes is shorter than the 8-byte header length");
  const uint64_t n = header_length(bytes.data(), bytes.size(), o, what);
  const Header h = parse_header(bytes.substr(8, n), bytes.size() - 8 - n, what);
  const char* data = bytes.data() + 8 + n;
  return materialise(h, o, [&](const Entry& e, char* dst) { std::memcpy(dst, data + e.begin, e.end - e.begin); });
}

void save_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata) {
  const std::string bytes = serialize_safetensors(tensors, metadata);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  GG_CHECK(f, FileError, "gg::io::save_safetensors: cannot open '", path, "' for writing");
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  GG_CHECK(f, FileError, "gg::io::save_safetensors: writing ", bytes.size(), " bytes to '", path, "' failed");
}

Safetensors load_safetensors(const std::string& path, const LoadOptions& o) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  GG_CHECK(f, FileError, "gg::io::load_safetensors: cannot open '", path, "'");
  const uint64_t total = static_cast<uint64_t>(f.tellg());
  const std::string what = "'" + path + "'";
  GG_CHECK(total >= 8, FormatError, "gg::io::load_safetensors: ", what, ": ", total,
           " bytes is shorter than the 8-byte header length");
  char first8[8];
  f.seekg(0);
  f.read(first8, 8);
  GG_CHECK(f, FileError, "gg::io::load_safetensors: reading '", path, "' failed");
  const uint64_t n = header_length(first8, total, o, what);
  std::string text(n, '\0');
  f.read(text.data(), static_cast<std::streamsize>(n));
  GG_CHECK(f, FileError, "gg::io::load_safetensors: reading the header of '", path, "' failed");
  const Header h = parse_header(text, total - 8 - n, what);
  return materialise(h, o, [&](const Entry& e, char* dst) {
    f.seekg(static_cast<std::streamoff>(8 + n + e.begin));
    f.read(dst, static_cast<std::streamsize>(e.end - e.begin));
    GG_CHECK(f, FileError, "gg::io::load_safetensors: reading tensor '", e.name, "' of '", path, "' failed");
  });
}

}  // namespace gg::io
