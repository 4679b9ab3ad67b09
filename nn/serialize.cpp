#include "nn/serialize.h"

namespace gg::nn {

void save(const Module& module, const std::string& path, const io::Metadata& metadata) {
  io::save_safetensors(path, module.state_dict(), metadata);
}

io::Metadata load(Module& module, const std::string& path, bool strict) {
  io::Safetensors file = io::load_safetensors(path);
  module.load_state_dict(file.tensors, strict);
  return file.metadata;
}

}  // namespace gg::nn
