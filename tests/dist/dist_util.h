// Helpers for the gg::dist tests: uneven shard sizes and per-rank result slots.
#pragma once
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "gradgrad.h"
#include "test_util.h"

namespace gg::test {

// n rows cut into p contiguous shards, the first n % p one row longer.
inline std::vector<int64_t> shard_sizes(int64_t n, int64_t p) {
  std::vector<int64_t> s(static_cast<size_t>(p), n / p);
  for (int64_t r = 0; r < n % p; ++r) ++s[static_cast<size_t>(r)];
  return s;
}
inline int64_t shard_start(const std::vector<int64_t>& sizes, int64_t r) {
  int64_t s = 0;
  for (int64_t i = 0; i < r; ++i) s += sizes[static_cast<size_t>(i)];
  return s;
}
// Rank r's contiguous shard of x along dim, detached (a leaf when requires_grad).
inline Tensor shard(const Tensor& x, int64_t dim, int64_t r, int64_t p, bool requires_grad = false) {
  const std::vector<int64_t> s = shard_sizes(x.size(dim), p);
  const int64_t a = shard_start(s, r);
  Tensor t = contiguous(slice(x.detach(), dim, a, a + s[static_cast<size_t>(r)]));
  if (requires_grad) t.requires_grad_(true);
  return t;
}

inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// A rank's group that writes the name of each primitive it runs ("all_gather", "sendrecv",
// "start_sendrecv", ...) to *log and passes the work to the rank's own group (a ThreadGroup).
class RecordingRank final : public dist::Group {
 public:
  RecordingRank(dist::Group& inner, std::vector<std::string>* log) : inner_(inner), log_(log) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void barrier() override { inner_.barrier(); }

 protected:
  Tensor all_reduce_flat(const Tensor& x) override {
    note("all_reduce");
    return inner_.all_reduce(x);
  }
  Tensor all_gather_flat(const Tensor& x) override {
    note("all_gather");
    return inner_.all_gather(x, 0);
  }
  Tensor reduce_scatter_flat(const Tensor& x) override {
    note("reduce_scatter");
    return inner_.reduce_scatter(x, 0);
  }
  Tensor broadcast_flat(const Tensor& x, int root) override {
    note("broadcast");
    return inner_.broadcast(x, root);
  }
  void send_flat(const Tensor& x, int peer) override {
    note("send");
    inner_.send(x, peer);
  }
  Tensor recv_flat(const Tensor& like, int peer) override {
    note("recv");
    return inner_.recv(like, peer);
  }
  Tensor sendrecv_flat(const Tensor& x, int dst, int src) override {
    note("sendrecv");
    return inner_.sendrecv(x, dst, src);
  }
  std::unique_ptr<Pending> start_sendrecv_flat(const Tensor& x, int dst, int src) override {
    note("start_sendrecv");
    return inner_.start_sendrecv(x, dst, src);
  }

 private:
  void note(const char* what) { log_->push_back(what); }
  dist::Group& inner_;
  std::vector<std::string>* log_;
};

// Largest |a - b| over max(1, max |b|): agreement "to rounding" in f64.
inline double relative_gap(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return 1.0;
  const std::vector<double> x = values(a), y = values(b);
  double num = 0, den = 1;
  for (size_t i = 0; i < x.size(); ++i) {
    num = std::max(num, std::abs(x[i] - y[i]));
    den = std::max(den, std::abs(y[i]));
  }
  return num / den;
}

}  // namespace gg::test
