// Test-only hooks of the CUDA attention kernels: which kernel family the attention calls take,
// and the SM count the tail split plans for. Not part of the library's interface and not
// installed: tests/gpu uses them to run the sm_80 kernels and the generic kernels on any device
// and to split the last wave of a small problem, bench/ to name the kernel a run takes. Defined
// in kernels/cuda/attention/attention.cu; read by choose_path (traits.cuh) and tail_split_sms
// (sweeps.cuh). Plain C++: no CUDA headers.
#pragma once

namespace gg::kernels::cuda::testing {

enum class AttentionPath {
  kAuto,     // traits.cuh, choose_path: sm_90a where it applies, else sm_80, else generic
  kSm80,     // the mma.sync kernels wherever they apply (bf16/f16, d in {32, 64, 128}), else generic
  kGeneric,  // the generic kernels for every call
};
void set_attention_path(AttentionPath path);
AttentionPath attention_path();
bool sm90_path_available();  // sm_90a code built and the current device is compute capability 9.x
// Plan the tail split as if the device had `sms` SMs (0: no split; -1: the device's count).
void set_tail_split_sms(int sms);
int tail_split_sms_override();

// Sets a value for one scope and restores the previous one after it.
class ScopedAttentionPath {
 public:
  explicit ScopedAttentionPath(AttentionPath path) : was_(attention_path()) { set_attention_path(path); }
  ~ScopedAttentionPath() { set_attention_path(was_); }
  ScopedAttentionPath(const ScopedAttentionPath&) = delete;
  ScopedAttentionPath& operator=(const ScopedAttentionPath&) = delete;

 private:
  AttentionPath was_;
};
class ScopedTailSplitSms {
 public:
  explicit ScopedTailSplitSms(int sms) : was_(tail_split_sms_override()) { set_tail_split_sms(sms); }
  ~ScopedTailSplitSms() { set_tail_split_sms(was_); }
  ScopedTailSplitSms(const ScopedTailSplitSms&) = delete;
  ScopedTailSplitSms& operator=(const ScopedTailSplitSms&) = delete;

 private:
  int was_;
};

}  // namespace gg::kernels::cuda::testing
