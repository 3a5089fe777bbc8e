// all_reduce across processes, pipelined: the slice is cut into P owner parts, part q owned
// by process q, and each part into steps (plan.step_bytes). Each process sends its
// partials of part q to q step by step and receives everyone's partials of its own part;
// the owner combines each step in id order as soon as it has arrived and sends its result
// to all, while later steps still move; then the slice's result is written into every
// local buffer. Bytes sent per process: about (k + 1)·(P-1)/P of the slice.
//
// Two schedules: where receives posted ahead save a round trip (plan.receives_ahead),
// every receive is posted first; otherwise one exchange a step, combining step s between
// exchanges while its data is still in cache. Results of steps of at least
// plan.stream_bytes are written past the cache (see plan.h).
#include <algorithm>
#include <cstring>

#include "src/collectives/across/all_reduce_slice.h"
#include "src/collectives/frames.h"

namespace replicator::detail {
namespace {

// One call's pipeline: the parts, their steps, where each step's bytes live, and the
// point-to-point steps that move them.
class Pipeline {
 public:
  Pipeline(SliceReduce& s, const AllReducePlan& plan)
      : s_(s),
        plan_(plan),
        p_(s.p),
        layout_(s.layout),
        lane_(s.lane),
        buffers_(s.buffers),
        op_(s.op),
        rank_(s.rank),
        P_(s.P),
        lo_(s.lo),
        hi_(s.hi),
        early_(plan.receives_ahead),
        step_elements_(
            std::max<std::uint64_t>(64, plan.step_bytes / partial_size(s.d.dtype, s.op))) {
    for (int q = 0; q < P_; ++q) {
      const auto [a, b] = part(q);
      steps_ = std::max(steps_, (b - a + step_elements_ - 1) / step_elements_);
    }
    my_a_ = part(rank_).first;
    my_b_ = part(rank_).second;
    // Where a received step of partials lands: with every receive posted at once, each step
    // has its own place in rows as long as my part; otherwise a step is combined before the
    // next is received, so every step reuses one row as long as the largest step, which
    // stays in cache instead of streaming the whole part through memory.
    if (early_) {
      received_row_bytes_ = partial_bytes(buffers_, my_a_, my_b_, op_);
    } else {
      for (std::uint64_t step = 0; step < steps_; ++step) {
        const auto [ma, mb] = chunk(rank_, step);
        received_row_bytes_ = std::max(received_row_bytes_, partial_bytes(buffers_, ma, mb, op_));
      }
    }
    // Arena: my partial rows (unless they all alias buffers) | received partial rows (of
    // my part) | result row (elements, unless results land in the buffers).
    s_.reduce_partials(/*rows_in_arena=*/false, s_.received_rows() * received_row_bytes_,
                       s_.single ? 0 : element_bytes(buffers_, lo_, hi_));
    // Results: into local buffer 0 (one buffer) or the result row (several).
    results_ = s_.single ? element(p_.of(0).call.buffers[s_.seg], lo_ - s_.seg_base) : s_.result;
  }

  // Every receive is posted first (the partials of my part step by step, then the owners'
  // results), then every partial is sent; step s is combined as soon as it has arrived and
  // its result sent at once, while later steps still move.
  void run_receives_ahead(Deadline deadline, Transport::Ticket framed) {
    const Descriptor& d = s_.d;
    lane_.tickets.clear();
    for (std::uint64_t step = 0; step < steps_; ++step) {
      for_peers([&](int q) { recv_partials(q, step); });
      lane_.tickets.push_back(post(layout_, p_.me, {}, lane_.recvs, d));
    }
    for_peers([&](int q) {
      for (std::uint64_t step = 0; step < steps_; ++step) recv_result(q, step);
    });
    post(layout_, p_.me, {}, lane_.recvs, d);
    check_frames(p_, layout_, lane_, framed, deadline);
    for_peers([&](int q) {
      for (std::uint64_t step = 0; step < steps_; ++step) send_partials(q, step);
    });
    Transport::Ticket last = post(layout_, p_.me, lane_.sends, {}, d);
    for (std::uint64_t step = 0; step < steps_; ++step) {
      wait(layout_, p_.me, lane_.tickets[step], deadline, d);
      combine_step(step);
      for_peers([&](int q) { send_result(q, step); });
      last = post(layout_, p_.me, lane_.sends, {}, d);
    }
    wait(layout_, p_.me, last, deadline, d);
  }

  // One exchange a step: everyone's partials of step s and the owners' results of step
  // s - 1; step s is combined in between, while its data is still in cache.
  void run_stepped(Deadline deadline, Transport::Ticket framed) {
    check_frames(p_, layout_, lane_, framed, deadline);
    for (std::uint64_t step = 0; step <= steps_; ++step) {
      for_peers([&](int q) {
        if (step < steps_) {
          send_partials(q, step);
          recv_partials(q, step);
        }
        if (step > 0) {
          send_result(q, step - 1);
          recv_result(q, step - 1);
        }
      });
      exchange(layout_, p_.me, lane_.sends, lane_.recvs, deadline, s_.d);
      if (step < steps_) combine_step(step);
    }
  }

  // The slice's result into every local buffer.
  void write_results() {
    const std::size_t seg = s_.seg;
    const std::uint64_t seg_base = s_.seg_base;
    if (s_.single) {
      // Local buffer 0 holds the whole slice now; the others lack the other parts.
      for (int q = 0; q < P_; ++q) {
        if (q == rank_) continue;
        const auto [a, b] = part(q);
        for (int l = 1; l < layout_.local; ++l) {
          std::memcpy(element(p_.of(l).call.buffers[seg], a - seg_base),
                      element(p_.of(0).call.buffers[seg], a - seg_base),
                      element_bytes(buffers_, a, b));
        }
      }
      return;
    }
    std::size_t offset = 0;
    for_each_piece(
        buffers_, lo_, hi_, [&](std::size_t i, std::uint64_t at, std::uint64_t len, std::uint64_t) {
          const std::size_t bytes = len * dtype_size(buffers_[i].dtype);
          for (int l = 0; l < layout_.local; ++l) {
            std::memcpy(element(p_.of(l).call.buffers[i], at), s_.result + offset, bytes);
          }
          offset += bytes;
        });
  }

 private:
  std::pair<std::uint64_t, std::uint64_t> part(int q) const {
    const auto [a, b] = slice_of(hi_ - lo_, q, P_);
    return {lo_ + a, lo_ + b};
  }
  std::pair<std::uint64_t, std::uint64_t> chunk(int q, std::uint64_t k) const {
    const auto [a, b] = part(q);
    const std::uint64_t ca = std::min(b, a + k * step_elements_);
    return {ca, std::min(b, ca + step_elements_)};
  }
  std::size_t received_offset_of(std::uint64_t at) const {
    return early_ ? partial_bytes(buffers_, my_a_, at, op_) : 0;
  }
  std::byte* received_row(int q, std::size_t t) const {
    return s_.received + s_.row_index(q, t) * received_row_bytes_;
  }

  // My partials of chunk `step` of q's part, my result of chunk `step` of my part, to q; q's
  // partials of chunk `step` of my part, q's result of chunk `step` of its part.
  void send_partials(int q, std::uint64_t step) {
    const auto [ca, cb] = chunk(q, step);
    if (cb <= ca) return;
    const std::size_t off = partial_bytes(buffers_, lo_, ca, op_);
    const std::size_t bytes = partial_bytes(buffers_, ca, cb, op_);
    for (std::size_t t = 0; t < s_.mine.size(); ++t) {
      lane_.sends.push_back({q, lane_.rows[t] + off, bytes});
    }
  }
  void send_result(int q, std::uint64_t step) {
    const auto [ma, mb] = chunk(rank_, step);
    if (mb > ma) {
      lane_.sends.push_back(
          {q, results_ + element_bytes(buffers_, lo_, ma), element_bytes(buffers_, ma, mb)});
    }
  }
  void recv_partials(int q, std::uint64_t step) {
    const auto [ma, mb] = chunk(rank_, step);
    if (mb <= ma) return;
    const std::size_t off = received_offset_of(ma);
    const std::size_t bytes = partial_bytes(buffers_, ma, mb, op_);
    for (std::size_t t = 0; t < layout_.subtrees[static_cast<std::size_t>(q)].size(); ++t) {
      lane_.recvs.push_back({q, received_row(q, t) + off, bytes});
    }
  }
  void recv_result(int q, std::uint64_t step) {
    const auto [ca, cb] = chunk(q, step);
    if (cb > ca) {
      lane_.recvs.push_back(
          {q, results_ + element_bytes(buffers_, lo_, ca), element_bytes(buffers_, ca, cb)});
    }
  }
  // Combines everyone's partials of chunk `step` of my part into the results.
  void combine_step(std::uint64_t step) {
    const auto [ma, mb] = chunk(rank_, step);
    if (mb <= ma) return;
    const std::size_t own_offset = partial_bytes(buffers_, lo_, ma, op_);
    const std::size_t received_offset = received_offset_of(ma);
    const std::size_t result_offset = element_bytes(buffers_, lo_, ma);
    s_.combine(
        ma, mb,
        [&](int q, std::size_t t) -> const std::byte* {
          return q == rank_ ? lane_.rows[t] + own_offset : received_row(q, t) + received_offset;
        },
        [&, ma = ma](std::size_t i, std::uint64_t at, std::uint64_t from_a) {
          if (s_.single) return s_.local_outputs(i, at);
          lane_.outputs.clear();
          lane_.outputs.push_back(s_.result + result_offset +
                                  element_bytes(buffers_, ma, ma + from_a));
        },
        element_bytes(buffers_, ma, mb) >= plan_.stream_bytes);
  }
  // Runs add(q) for every other process, into lane.sends / lane.recvs emptied first.
  template <typename Add>
  void for_peers(Add&& add) {
    lane_.sends.clear();
    lane_.recvs.clear();
    for (int q = 0; q < P_; ++q) {
      if (q != rank_) add(q);
    }
  }

  SliceReduce& s_;
  const AllReducePlan& plan_;
  const Peers& p_;
  const ProcessLayout& layout_;
  LaneScratch& lane_;
  const std::span<const Buffer> buffers_;
  const ReduceOp op_;
  const int rank_;
  const int P_;
  const std::uint64_t lo_;
  const std::uint64_t hi_;
  const bool early_;
  const std::uint64_t step_elements_;
  std::uint64_t steps_ = 0;
  std::uint64_t my_a_ = 0;
  std::uint64_t my_b_ = 0;
  std::uint64_t received_row_bytes_ = 0;
  std::byte* results_ = nullptr;
};

}  // namespace

void all_reduce_pipelined(SliceReduce& s, const AllReducePlan& plan, Deadline deadline) {
  Pipeline pipeline(s, plan);
  const Transport::Ticket framed = post_frame(s.p, s.layout, s.lane, nullptr, 0);
  if (plan.receives_ahead) {
    pipeline.run_receives_ahead(deadline, framed);
  } else {
    pipeline.run_stepped(deadline, framed);
  }
  pipeline.write_results();
}

}  // namespace replicator::detail
