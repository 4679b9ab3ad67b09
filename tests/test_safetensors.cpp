// gg::io safetensors: a file written by Python's safetensors package (tests/fixtures), round
// trips through bytes and files, a module's state dict through a file, and one test per kind of
// malformed file, each of which must raise gg::io::FormatError (or FileError) before any read
// outside the bytes that exist.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include "gradgrad.h"
#include "io/safetensors.h"
#include "nn/module.h"
#include "test_util.h"

namespace gg::test {
namespace {

using io::FormatError;

// A file name of this process and test alone: ctest runs the tests in parallel processes.
std::string temp_path(const std::string& name) {
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  return ::testing::TempDir() + "gg_st_" + std::to_string(::getpid()) + "_" + t->test_suite_name() + "_" + t->name() +
         "_" + name;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file from a header text and `data_bytes` bytes of data (0, 1, 2, ...).
std::string make_file(const std::string& header, size_t data_bytes, uint64_t declared_length = UINT64_MAX) {
  const uint64_t n = declared_length == UINT64_MAX ? header.size() : declared_length;
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  for (size_t i = 0; i < data_bytes; ++i) out.push_back(static_cast<char>(i));
  return out;
}

// Expects FormatError whose message contains `needle`, from bytes and from the same bytes in a file.
void expect_format_error(const std::string& bytes, const std::string& needle, const io::LoadOptions& o = {}) {
  try {
    io::parse_safetensors(bytes, o);
    ADD_FAILURE() << "no FormatError from bytes (expected '" << needle << "')";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  const std::string path = temp_path("bad.safetensors");
  write_file(path, bytes);
  try {
    io::load_safetensors(path, o);
    ADD_FAILURE() << "no FormatError from the file (expected '" << needle << "')";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << "names the file: " << e.what();
  }
}

const std::string kOne = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

// ------------------------------------------------------------------ the fixture from Python
TEST(Safetensors, LoadsFileWrittenByPython) {
  const io::Safetensors f = io::load_safetensors(GG_FIXTURES_DIR "/reference.safetensors");
  // The values make_safetensors_fixture.py writes.
  EXPECT_EQ(f.metadata.at("format"), "np");
  EXPECT_EQ(f.metadata.at("written_by"), "make_safetensors_fixture.py");
  EXPECT_EQ(f.tensors.size(), 7u);

  const Tensor& w32 = f.at("weights.f32");
  EXPECT_EQ(w32.dtype(), DType::f32);
  EXPECT_EQ(w32.shape(), Shape({2, 3}));
  Values want;
  for (int i = 0; i < 6; ++i) want.push_back(i / 8.0 - 1);
  EXPECT_EQ(w32.to_vector<double>(), want);

  const Tensor& w64 = f.at("weights.f64");
  EXPECT_EQ(w64.dtype(), DType::f64);
  EXPECT_EQ(w64.to_vector<double>(), Values({1.0 / 3.0, -2.0 / 7.0, 1e-300, 12345.678901234567}));

  const Tensor& ids = f.at("ids.i64");
  EXPECT_EQ(ids.dtype(), DType::i64);
  EXPECT_EQ(ids.shape(), Shape({2, 2}));
  EXPECT_EQ(ids.to_vector<int64_t>(), std::vector<int64_t>({0, -1, (int64_t(1) << 62) + 1, -(int64_t(1) << 40)}));

  const Tensor& half = f.at("half.f16");
  EXPECT_EQ(half.dtype(), DType::f16);
  EXPECT_EQ(half.to_vector<double>(), Values({0.5, -1.25, 2048.0}));

  const Tensor& mask = f.at("mask.bool");
  EXPECT_EQ(mask.dtype(), DType::b8);
  EXPECT_EQ(mask.to_vector<uint8_t>(), std::vector<uint8_t>({1, 0, 1}));

  EXPECT_EQ(f.at("scalar.f32").shape(), Shape({}));
  EXPECT_EQ(f.at("scalar.f32").item(), 2.5);
  EXPECT_EQ(f.at("empty.f32").shape(), Shape({0, 4}));
  EXPECT_THROW(f.at("nope"), ValueError);
}

// A state dict written by PyTorch (tests/fixtures/make_torch_fixture.py, safetensors.torch), bf16
// included.
TEST(Safetensors, LoadsFileWrittenByPyTorch) {
  const io::Safetensors f = io::load_safetensors(GG_FIXTURES_DIR "/torch_reference.safetensors");
  EXPECT_EQ(f.metadata.at("written_by"), "make_torch_fixture.py");
  EXPECT_EQ(f.tensors.size(), 6u);
  Values steps;
  for (int i = 0; i < 6; ++i) steps.push_back(i / 8.0 - 1);

  const Tensor& w = f.at("linear.weight");
  EXPECT_EQ(w.dtype(), DType::bf16);
  EXPECT_EQ(w.shape(), Shape({3, 2}));
  EXPECT_EQ(w.to_vector<double>(), steps);
  const Tensor& b = f.at("linear.bias");
  EXPECT_EQ(b.dtype(), DType::f16);
  EXPECT_EQ(b.to_vector<double>(), Values({0.5, -1.25, 2048.0}));
  const Tensor& e = f.at("embedding.weight");
  EXPECT_EQ(e.dtype(), DType::f32);
  EXPECT_EQ(e.shape(), Shape({2, 3}));
  EXPECT_EQ(e.to_vector<double>(), steps);
  EXPECT_EQ(f.at("scale").to_vector<double>(), Values({1.0 / 3.0, -1e-300}));
  EXPECT_EQ(f.at("step").to_vector<int64_t>(), std::vector<int64_t>({(int64_t(1) << 62) + 1, -(int64_t(1) << 40)}));
  EXPECT_EQ(f.at("mask").dtype(), DType::b8);
  EXPECT_EQ(f.at("mask").to_vector<uint8_t>(), std::vector<uint8_t>({1, 0, 1}));
}

// ------------------------------------------------------------------ round trips
TEST(Safetensors, RoundTripEveryDtype) {
  manual_seed(1);
  const Tensor f32 = randn({3, 4});
  const Tensor f64 = transpose(randn({2, 5}, DType::f64), 0, 1);  // not contiguous
  const Tensor i64 = from_indices({7, -3, int64_t(1) << 60}, {3});
  const Tensor b8 = gt(randn({4}), zeros({4}));
  const Tensor bf16 = from_vector({1.5, -0.25, 3.0}, {3}).to(DType::bf16);
  const Tensor f16 = from_vector({0.125, 1000.0}, {2, 1}).to(DType::f16);
  const io::NamedTensors in = {{"a", f32}, {"b.f64", f64}, {"c", i64}, {"d", b8}, {"e", bf16}, {"f", f16},
                               {"empty", zeros({0})}, {"s", scalar_tensor(4.0, DType::f64)}};
  const io::Metadata meta = {{"k", "v"}, {"step", "12"}};

  const std::string path = temp_path("roundtrip.safetensors");
  io::save_safetensors(path, in, meta);
  const std::string bytes = read_file(path);
  EXPECT_EQ(bytes, io::serialize_safetensors(in, meta));
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u) << "data starts 8-byte aligned";

  for (const io::Safetensors& out : {io::load_safetensors(path), io::parse_safetensors(bytes)}) {
    EXPECT_EQ(out.metadata, meta);
    ASSERT_EQ(out.tensors.size(), in.size());
    for (const auto& [name, t] : in) {
      const Tensor& got = out.at(name);
      EXPECT_EQ(got.dtype(), t.dtype()) << name;
      EXPECT_EQ(got.shape(), t.shape()) << name;
      if (t.dtype() == DType::i64) EXPECT_EQ(got.to_vector<int64_t>(), t.to_vector<int64_t>()) << name;
      else EXPECT_EQ(got.to_vector<double>(), t.to_vector<double>()) << name;
    }
  }
  // The header is plain JSON in the layout the format describes.
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["b.f64"]["dtype"], "F64");
  EXPECT_EQ(header["b.f64"]["shape"], nlohmann::json({5, 2}));
  EXPECT_EQ(header["__metadata__"]["step"], "12");
}

TEST(Safetensors, SaveRejectsBadNames) {
  EXPECT_THROW(io::serialize_safetensors({{"a", zeros({1})}, {"a", zeros({1})}}), ValueError);
  EXPECT_THROW(io::serialize_safetensors({{"__metadata__", zeros({1})}}), ValueError);
  EXPECT_THROW(io::serialize_safetensors({{"a", Tensor()}}), ValueError);
  EXPECT_THROW(io::save_safetensors("/nonexistent-dir/x.safetensors", {{"a", zeros({1})}}), io::FileError);
  EXPECT_THROW(io::load_safetensors(temp_path("does-not-exist")), io::FileError);
}

TEST(Safetensors, ModuleStateDictThroughFile) {
  manual_seed(2);
  nn::BlockConfig c;
  c.attention = {8, 2, true};
  c.mlp_hidden = 16;
  nn::TransformerBlock a(c), b(c);
  const std::string path = temp_path("block.safetensors");
  nn::save(a, path, {{"model", "block"}});
  const io::Safetensors file = io::load_safetensors(path);
  EXPECT_EQ(file.at("attn.q_proj.weight").shape(), Shape({8, 8}));
  EXPECT_EQ(nn::load(b, path).at("model"), "block");
  const TensorList pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_EQ(pa[i].to_vector<double>(), pb[i].to_vector<double>()) << i;
  Tensor x = randn({1, 4, 8});
  EXPECT_EQ(a(x).to_vector<double>(), b(x).to_vector<double>());
  // A file for another shape of model is refused by name.
  nn::MLP other({8, 3});
  EXPECT_THROW(nn::load(other, path), ValueError);
}

// nn::load is all or nothing: a file whose second tensor has the wrong shape or dtype, or that
// lacks the last one, is refused before the first tensor is copied.
TEST(Safetensors, ModuleLoadChangesNothingWhenAnyTensorIsRejected) {
  manual_seed(3);
  nn::MLP a({2, 3, 1}), b({2, 3, 1});
  const nn::NamedTensors good = a.state_dict();
  ASSERT_EQ(good.size(), 4u);
  std::vector<Values> before;
  for (const Tensor& t : b.parameters()) before.push_back(t.to_vector<double>());
  ASSERT_NE(before[0], good[0].second.to_vector<double>());

  nn::NamedTensors wrong_shape = good, wrong_dtype = good, missing_last = good;
  wrong_shape[1].second = zeros({4});
  wrong_dtype[1].second = from_indices({0, 0, 0}, {3});
  missing_last.pop_back();
  const std::string path = temp_path("bad_model.safetensors");
  const auto expect_unchanged = [&](const char* what) {
    const TensorList now = b.parameters();
    for (size_t i = 0; i < now.size(); ++i) EXPECT_EQ(now[i].to_vector<double>(), before[i]) << what << ", " << i;
  };
  io::save_safetensors(path, wrong_shape);
  EXPECT_THROW(nn::load(b, path), ShapeError);
  expect_unchanged("second tensor of the wrong shape");
  io::save_safetensors(path, wrong_dtype);
  EXPECT_THROW(nn::load(b, path), DTypeError);
  expect_unchanged("second tensor of the wrong dtype");
  io::save_safetensors(path, missing_last);
  EXPECT_THROW(nn::load(b, path), ValueError);
  expect_unchanged("last tensor missing");

  io::save_safetensors(path, good);  // the same file, complete, loads
  nn::load(b, path);
  for (size_t i = 0; i < good.size(); ++i)
    EXPECT_EQ(b.parameters()[i].to_vector<double>(), good[i].second.to_vector<double>()) << i;
}

// ------------------------------------------------------------------ malformed files
TEST(SafetensorsBad, ShorterThanTheLengthField) { expect_format_error(std::string(5, '\0'), "shorter than the 8-byte"); }

TEST(SafetensorsBad, Truncated) {
  std::string bytes = io::serialize_safetensors({{"t", ones({4})}});
  bytes.resize(bytes.size() - 3);
  expect_format_error(bytes, "reach past the data");
}

TEST(SafetensorsBad, HeaderLengthBeyondFile) { expect_format_error(make_file(kOne, 8, 4096), "reaches past the end"); }

TEST(SafetensorsBad, HeaderTooLarge) {
  expect_format_error(make_file(kOne, 8, uint64_t(1) << 40), "exceeds the limit");  // 1 TiB declared
  io::LoadOptions small;
  small.max_header_bytes = 16;
  expect_format_error(make_file(kOne, 8), "exceeds the limit of 16", small);
}

TEST(SafetensorsBad, InvalidJson) {
  expect_format_error(make_file(R"({"t":{"dtype":"F32",)", 8), "not valid JSON");
  expect_format_error(make_file(R"([1, 2])", 0), "must be a JSON object");
}

TEST(SafetensorsBad, UnknownDtype) {
  expect_format_error(make_file(R"({"t":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", 8), "unknown dtype 'F33'");
  expect_format_error(make_file(R"({"t":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})", 8), "gradgrad has no such dtype");
}

TEST(SafetensorsBad, WrongOffsets) {
  expect_format_error(make_file(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8), "end before they begin");
  expect_format_error(make_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8), "two non-negative");
  expect_format_error(make_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", 8), "two non-negative");
}

TEST(SafetensorsBad, OutOfRangeOffsets) {
  expect_format_error(make_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 8), "reach past the data");
  // An end near 2^64 must not wrap around.
  expect_format_error(
      make_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551608,18446744073709551615]}})", 8),
      "reach past the data");
}

TEST(SafetensorsBad, OverlappingOffsets) {
  expect_format_error(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
                      "overlaps tensor 'a'");
}

TEST(SafetensorsBad, BytesBelongingToNoTensor) {
  expect_format_error(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8), "belong to no tensor");
  expect_format_error(make_file(kOne, 12), "the tensors cover 8");
}

TEST(SafetensorsBad, ShapeBytesMismatch) {
  expect_format_error(make_file(R"({"t":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})", 8), "needs 16 bytes");
  expect_format_error(make_file(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), "non-negative integers");
  expect_format_error(
      make_file(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8), "overflows");
}

TEST(SafetensorsBad, MalformedEntriesAndMetadata) {
  expect_format_error(make_file(R"({"t":{"dtype":"F32","shape":[2]}})", 8), "needs an object with dtype");
  expect_format_error(make_file(R"({"t":{"dtype":3,"shape":[2],"data_offsets":[0,8]}})", 8), "dtype must be a string");
  expect_format_error(make_file(R"({"__metadata__":{"k":1},"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8),
                      "not a string");
}

// Random damage to a valid file (bytes overwritten, in the header or the data, and cuts at random
// lengths): every outcome is a file that loads or a FormatError, never another exception (and,
// under AddressSanitizer, never a read outside the bytes).
TEST(SafetensorsBad, RandomCorruptionIsLoadedOrRejected) {
  const std::string good = io::serialize_safetensors(
      {{"a", from_vector({1, 2, 3, 4, 5, 6}, {2, 3})}, {"b", from_indices({7, 8}, {2})}, {"c", zeros({0, 2})}},
      {{"k", "v"}});
  std::mt19937 rng(12345);
  int loaded = 0, rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bytes = good;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e)
      bytes[rng() % bytes.size()] = static_cast<char>(rng() % 2 ? rng() % 256 : "0123456789[]{},:\"-"[rng() % 18]);
    if (rng() % 4 == 0) bytes.resize(rng() % bytes.size());
    try {
      const io::Safetensors f = io::parse_safetensors(bytes);
      size_t total = 0;
      for (const auto& [n, t] : f.tensors) total += static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
      EXPECT_LE(total, bytes.size()) << "trial " << trial;
      ++loaded;
    } catch (const FormatError&) {
      ++rejected;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "trial " << trial << ": not a FormatError: " << e.what();
    }
  }
  EXPECT_GT(rejected, 1000);  // most damage is caught...
  EXPECT_GT(loaded, 10);      // ...and damage confined to the data still loads
}

}  // namespace
}  // namespace gg::test
