// A module's parameters to and from a safetensors file (io/safetensors.h), keyed by
// named_parameters() names, so "attn.q_proj.weight" in the file is that parameter.
#pragma once
#include <string>

#include "io/safetensors.h"
#include "nn/module.h"

namespace gg::nn {

void save(const Module& module, const std::string& path, const io::Metadata& metadata = {});
// Loads the file and copies its tensors into the module (Module::load_state_dict). Returns the
// file's __metadata__.
io::Metadata load(Module& module, const std::string& path, bool strict = true);

}  // namespace gg::nn
