#include "dist/thread_group.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "ops/ops.h"

namespace gg::dist {
namespace {

// What the ranks share: a two-phase rendezvous (deposit, then read) and one mailbox per
// (sender, receiver) pair for send/recv.
struct Shared {
  explicit Shared(int n) : world(n), slots(static_cast<size_t>(n)), tags(static_cast<size_t>(n)) {}

  const int world;
  std::mutex m;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  std::vector<Tensor> slots;
  std::vector<std::string> tags;
  std::map<std::pair<int, int>, std::deque<Tensor>> mail;
  bool aborted = false;
  std::string abort_reason;

  [[noreturn]] void throw_aborted(int rank) const {
    throw DistError("gg::dist: rank " + std::to_string(rank) + " stopped waiting: " + abort_reason);
  }

  bool is_aborted() {
    std::lock_guard<std::mutex> lock(m);
    return aborted;
  }

  void abort(const std::string& reason) {
    std::lock_guard<std::mutex> lock(m);
    if (!aborted) abort_reason = reason;
    aborted = true;
    cv.notify_all();
  }

  // Returns once all ranks have arrived (or throws when a rank failed).
  void wait_all(std::unique_lock<std::mutex>& lock, int rank) {
    if (aborted) throw_aborted(rank);
    const uint64_t gen = generation;
    if (++arrived == world) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    cv.wait(lock, [&] { return generation != gen || aborted; });
    if (generation == gen) throw_aborted(rank);
  }
};

class ThreadGroup final : public Group {
 public:
  ThreadGroup(std::shared_ptr<Shared> shared, int rank) : shared_(std::move(shared)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return shared_->world; }

  void barrier() override {
    std::unique_lock<std::mutex> lock(shared_->m);
    shared_->wait_all(lock, rank_);
  }

 protected:
  Tensor all_reduce_flat(const Tensor& x) override {
    const TensorList all = exchange("all_reduce", x);
    return sum_in_rank_order(all, 0, x.numel());
  }
  Tensor all_gather_flat(const Tensor& x) override { return cat(exchange("all_gather", x), 0); }
  Tensor reduce_scatter_flat(const Tensor& x) override {
    const int64_t n = x.numel() / size();
    return sum_in_rank_order(exchange("reduce_scatter", x), rank_ * n, n);
  }
  Tensor broadcast_flat(const Tensor& x, int root) override {
    const TensorList all = exchange("broadcast from " + std::to_string(root), x);
    return clone(all[static_cast<size_t>(root)]);
  }
  void send_flat(const Tensor& x, int peer) override {
    std::lock_guard<std::mutex> lock(shared_->m);
    if (shared_->aborted) shared_->throw_aborted(rank_);
    shared_->mail[{rank_, peer}].push_back(clone(x));
    shared_->cv.notify_all();
  }
  Tensor recv_flat(const Tensor& like, int peer) override {
    std::unique_lock<std::mutex> lock(shared_->m);
    std::deque<Tensor>& box = shared_->mail[{peer, rank_}];
    shared_->cv.wait(lock, [&] { return !box.empty() || shared_->aborted; });
    if (box.empty()) shared_->throw_aborted(rank_);
    Tensor t = std::move(box.front());
    box.pop_front();
    GG_CHECK(t.numel() == like.numel() && t.dtype() == like.dtype(), ShapeError, "gg::dist::recv: rank ", rank_,
             " expected ", like.numel(), " elements of ", dtype_name(like.dtype()), " from rank ", peer, ", got ",
             t.numel(), " of ", dtype_name(t.dtype()));
    return t;
  }
  Tensor sendrecv_flat(const Tensor& x, int dst, int src) override {
    send_flat(x, dst);
    return recv_flat(x, src);
  }

 private:
  // Deposits a copy of x, waits for every rank's, and returns them all (rank order). The tags
  // name the primitive and the element count: ranks calling different collectives are an error.
  TensorList exchange(const std::string& op, const Tensor& x) {
    Shared& s = *shared_;
    const std::string tag = op + " of " + std::to_string(x.numel()) + " " + dtype_name(x.dtype());
    Tensor copy = clone(x);
    std::unique_lock<std::mutex> lock(s.m);
    s.wait_all(lock, rank_);  // everyone has read the previous round's slots
    s.slots[static_cast<size_t>(rank_)] = copy;
    s.tags[static_cast<size_t>(rank_)] = tag;
    s.wait_all(lock, rank_);  // everyone has deposited
    TensorList all = s.slots;
    const std::vector<std::string> tags = s.tags;
    lock.unlock();
    for (size_t r = 0; r < tags.size(); ++r)
      GG_CHECK(tags[r] == tag, ValueError, "gg::dist: the ranks called different collectives: rank ", rank_,
               " called ", tag, ", rank ", r, " called ", tags[r]);
    return all;
  }

  static Tensor sum_in_rank_order(const TensorList& all, int64_t start, int64_t n) {
    Tensor acc = clone(slice(all[0], 0, start, start + n));
    for (size_t r = 1; r < all.size(); ++r) acc = acc + slice(all[r], 0, start, start + n);
    return acc;
  }

  std::shared_ptr<Shared> shared_;
  int rank_;
};

}  // namespace

void run_threads(int world_size, const std::function<void(Group&)>& fn) {
  GG_CHECK(world_size >= 1, ValueError, "gg::dist::run_threads: world_size must be >= 1, got ", world_size);
  GG_CHECK(static_cast<bool>(fn), ValueError, "gg::dist::run_threads: fn is empty");
  auto shared = std::make_shared<Shared>(world_size);
  std::vector<std::shared_ptr<ThreadGroup>> groups;
  for (int r = 0; r < world_size; ++r) groups.push_back(std::make_shared<ThreadGroup>(shared, r));

  std::mutex first_m;
  std::exception_ptr first;  // the first failure that was not a reaction to another one
  std::exception_ptr any;
  auto body = [&](int r) {
    try {
      fn(*groups[static_cast<size_t>(r)]);
    } catch (const std::exception& e) {
      const bool reaction = dynamic_cast<const DistError*>(&e) && shared->is_aborted();
      {
        std::lock_guard<std::mutex> lock(first_m);
        if (!reaction && !first) first = std::current_exception();
        if (!any) any = std::current_exception();
      }
      shared->abort("rank " + std::to_string(r) + " failed: " + e.what());
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(first_m);
        if (!first) first = std::current_exception();
      }
      shared->abort("rank " + std::to_string(r) + " failed with an unknown exception");
    }
  };
  // Every rank on a fresh thread, so each starts with grad mode on and backward level 0 whatever
  // the caller's thread has set.
  std::vector<std::thread> threads;
  try {
    for (int r = 0; r < world_size; ++r) threads.emplace_back(body, r);
  } catch (const std::system_error& e) {  // no more threads: release the started ones, then fail
    shared->abort(std::string("gg::dist::run_threads: cannot start rank ") + std::to_string(threads.size()) + ": " +
                  e.what());
    for (std::thread& t : threads) t.join();
    throw DistError(std::string("gg::dist::run_threads: cannot start ") + std::to_string(world_size) +
                    " threads: " + e.what());
  }
  for (std::thread& t : threads) t.join();
  if (first) std::rethrow_exception(first);
  if (any) std::rethrow_exception(any);
}

}  // namespace gg::dist
