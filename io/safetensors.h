// Named tensors in the safetensors format (https://github.com/huggingface/safetensors):
//
//   8 bytes        N, the header's length, unsigned little-endian
//   N bytes        a JSON object: {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]},
//                  ..., "__metadata__": {"key": "value", ...}}
//   the rest       the data: tensor bytes, little-endian, row-major, at [b, e) from here
//
// Reading trusts nothing in the file: the header's length is capped, every offset and shape is
// checked against the bytes that exist before anything is copied, the tensors must tile the
// data exactly (no overlaps, no holes, as the reference implementation requires), and every
// violation is a gg::io::FormatError naming the file, the tensor and the numbers.
// dtypes: F64, F32, BF16, F16, I64, BOOL (the ones gradgrad has).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "../core/error.h"
#include "../core/tensor.h"

namespace gg::io {

struct FormatError : Error { using Error::Error; };  // malformed or unsupported file contents
struct FileError : Error { using Error::Error; };    // cannot open, read or write the file

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;  // the same type as nn::NamedTensors
using Metadata = std::map<std::string, std::string>;                // "__metadata__": strings only

struct LoadOptions {
  uint64_t max_header_bytes = 100ull << 20;  // 100 MiB; longer headers are refused unread
  Device device = Device::cpu();             // where the loaded tensors go
};

struct Safetensors {
  NamedTensors tensors;  // in the order of their data offsets
  Metadata metadata;
  const Tensor& at(const std::string& name) const;  // throws ValueError when absent
};

// The file's bytes. Tensors may live on any device and have any layout; names must be unique and
// must not be "__metadata__".
std::string serialize_safetensors(const NamedTensors& tensors, const Metadata& metadata = {});
// `what` names the source in error messages (a path, "bytes").
Safetensors parse_safetensors(const std::string& bytes, const LoadOptions& options = {},
                              const std::string& what = "bytes");

void save_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata = {});
Safetensors load_safetensors(const std::string& path, const LoadOptions& options = {});

// "F32" <-> DType::f32 and so on; FormatError for names gradgrad has no dtype for.
DType dtype_from_safetensors(const std::string& name, const std::string& what = "safetensors");
const char* safetensors_dtype_name(DType dtype);

}  // namespace gg::io
