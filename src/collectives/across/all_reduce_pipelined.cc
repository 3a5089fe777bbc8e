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

void all_reduce_pipelined(SliceReduce& s, const AllReducePlan& plan, Deadline deadline) {
  const Peers& p = s.p;
  const ProcessLayout& layout = s.layout;
  LaneScratch& lane = s.lane;
  const Descriptor& d = s.d;
  const std::span<const Buffer> buffers = s.buffers;
  const ReduceOp op = s.op;
  const int rank = s.rank;
  const int P = s.P;
  const std::uint64_t lo = s.lo;
  const std::uint64_t hi = s.hi;
  const std::vector<Subtree>& mine = s.mine;
  const bool single = s.single;
  const std::size_t seg = s.seg;
  const std::uint64_t seg_base = s.seg_base;
  const bool early = plan.receives_ahead;

  const auto part = [&](int q) {
    const auto [a, b] = slice_of(hi - lo, q, P);
    return std::pair<std::uint64_t, std::uint64_t>{lo + a, lo + b};
  };
  const std::uint64_t step_elements =
      std::max<std::uint64_t>(64, plan.step_bytes / partial_size(d.dtype, op));
  const auto chunk = [&](int q, std::uint64_t k) {
    const auto [a, b] = part(q);
    const std::uint64_t ca = std::min(b, a + k * step_elements);
    return std::pair<std::uint64_t, std::uint64_t>{ca, std::min(b, ca + step_elements)};
  };
  std::uint64_t steps = 0;
  for (int q = 0; q < P; ++q) {
    const auto [a, b] = part(q);
    steps = std::max(steps, (b - a + step_elements - 1) / step_elements);
  }
  const std::uint64_t my_a = part(rank).first;
  const std::uint64_t my_b = part(rank).second;
  // Where a received step of partials lands: with every receive posted at once, each step
  // has its own place in rows as long as my part; otherwise a step is combined before the
  // next is received, so every step reuses one row as long as the largest step, which
  // stays in cache instead of streaming the whole part through memory.
  std::uint64_t received_row_bytes = 0;
  if (early) {
    received_row_bytes = partial_bytes(buffers, my_a, my_b, op);
  } else {
    for (std::uint64_t step = 0; step < steps; ++step) {
      const auto [ma, mb] = chunk(rank, step);
      received_row_bytes = std::max(received_row_bytes, partial_bytes(buffers, ma, mb, op));
    }
  }
  const auto received_offset_of = [&](std::uint64_t at) {
    return early ? partial_bytes(buffers, my_a, at, op) : 0;
  };

  // Arena: my partial rows (unless they all alias buffers) | received partial rows (of
  // my part) | result row (elements, unless results land in the buffers).
  s.reduce_partials(/*rows_in_arena=*/false, s.received_rows() * received_row_bytes,
                    single ? 0 : element_bytes(buffers, lo, hi));
  std::byte* const result = s.result;
  const Transport::Ticket framed = post_frame(p, layout, lane, nullptr, 0);
  const auto received_row = [&](int q, std::size_t t) {
    return s.received + s.row_index(q, t) * received_row_bytes;
  };
  // Results: into local buffer 0 (one buffer) or the result row (several).
  std::byte* const results = single ? element(p.of(0).call.buffers[seg], lo - seg_base) : result;

  // My partials of chunk `step` of q's part, my result of chunk `step` of my part, to q; q's
  // partials of chunk `step` of my part, q's result of chunk `step` of its part.
  const auto send_partials = [&](int q, std::uint64_t step) {
    const auto [ca, cb] = chunk(q, step);
    if (cb <= ca) return;
    const std::size_t off = partial_bytes(buffers, lo, ca, op);
    const std::size_t bytes = partial_bytes(buffers, ca, cb, op);
    for (std::size_t t = 0; t < mine.size(); ++t)
      lane.sends.push_back({q, lane.rows[t] + off, bytes});
  };
  const auto send_result = [&](int q, std::uint64_t step) {
    const auto [ma, mb] = chunk(rank, step);
    if (mb > ma) {
      lane.sends.push_back(
          {q, results + element_bytes(buffers, lo, ma), element_bytes(buffers, ma, mb)});
    }
  };
  const auto recv_partials = [&](int q, std::uint64_t step) {
    const auto [ma, mb] = chunk(rank, step);
    if (mb <= ma) return;
    const std::size_t off = received_offset_of(ma);
    const std::size_t bytes = partial_bytes(buffers, ma, mb, op);
    for (std::size_t t = 0; t < layout.subtrees[static_cast<std::size_t>(q)].size(); ++t) {
      lane.recvs.push_back({q, received_row(q, t) + off, bytes});
    }
  };
  const auto recv_result = [&](int q, std::uint64_t step) {
    const auto [ca, cb] = chunk(q, step);
    if (cb > ca) {
      lane.recvs.push_back(
          {q, results + element_bytes(buffers, lo, ca), element_bytes(buffers, ca, cb)});
    }
  };
  // Combines everyone's partials of chunk `step` of my part into the results.
  const auto combine_step = [&](std::uint64_t step) {
    const std::uint64_t ma = chunk(rank, step).first;
    const std::uint64_t mb = chunk(rank, step).second;
    if (mb <= ma) return;
    const std::size_t own_offset = partial_bytes(buffers, lo, ma, op);
    const std::size_t received_offset = received_offset_of(ma);
    const std::size_t result_offset = element_bytes(buffers, lo, ma);
    s.combine(
        ma, mb,
        [&](int q, std::size_t t) -> const std::byte* {
          return q == rank ? lane.rows[t] + own_offset : received_row(q, t) + received_offset;
        },
        [&](std::size_t i, std::uint64_t at, std::uint64_t from_a) {
          if (single) return s.local_outputs(i, at);
          lane.outputs.clear();
          lane.outputs.push_back(result + result_offset + element_bytes(buffers, ma, ma + from_a));
        },
        element_bytes(buffers, ma, mb) >= plan.stream_bytes);
  };
  // Runs add(q) for every other process, into lane.sends / lane.recvs emptied first.
  const auto for_peers = [&](auto&& add) {
    lane.sends.clear();
    lane.recvs.clear();
    for (int q = 0; q < P; ++q) {
      if (q != rank) add(q);
    }
  };

  if (early) {
    // Every receive is posted first (the partials of my part step by step, then the
    // owners' results), then every partial is sent; step s is combined as soon as it has
    // arrived and its result sent at once, while later steps still move.
    lane.tickets.clear();
    for (std::uint64_t step = 0; step < steps; ++step) {
      for_peers([&](int q) { recv_partials(q, step); });
      lane.tickets.push_back(post(layout, p.me, {}, lane.recvs, d));
    }
    for_peers([&](int q) {
      for (std::uint64_t step = 0; step < steps; ++step) recv_result(q, step);
    });
    post(layout, p.me, {}, lane.recvs, d);
    check_frames(p, layout, lane, framed, deadline);
    for_peers([&](int q) {
      for (std::uint64_t step = 0; step < steps; ++step) send_partials(q, step);
    });
    Transport::Ticket last = post(layout, p.me, lane.sends, {}, d);
    for (std::uint64_t step = 0; step < steps; ++step) {
      wait(layout, p.me, lane.tickets[step], deadline, d);
      combine_step(step);
      for_peers([&](int q) { send_result(q, step); });
      last = post(layout, p.me, lane.sends, {}, d);
    }
    wait(layout, p.me, last, deadline, d);
  } else {
    // One exchange a step: everyone's partials of step s and the owners' results of step
    // s - 1; step s is combined in between, while its data is still in cache.
    check_frames(p, layout, lane, framed, deadline);
    for (std::uint64_t step = 0; step <= steps; ++step) {
      for_peers([&](int q) {
        if (step < steps) {
          send_partials(q, step);
          recv_partials(q, step);
        }
        if (step > 0) {
          send_result(q, step - 1);
          recv_result(q, step - 1);
        }
      });
      exchange(layout, p.me, lane.sends, lane.recvs, deadline, d);
      if (step < steps) combine_step(step);
    }
  }
  if (single) {
    // Local buffer 0 holds the whole slice now; the others lack the other parts.
    for (int q = 0; q < P; ++q) {
      if (q == rank) continue;
      const auto [a, b] = part(q);
      for (int l = 1; l < layout.local; ++l) {
        std::memcpy(element(p.of(l).call.buffers[seg], a - seg_base),
                    element(p.of(0).call.buffers[seg], a - seg_base), element_bytes(buffers, a, b));
      }
    }
    return;
  }

  // (4) The slice's result into every local buffer.
  std::size_t offset = 0;
  for_each_piece(buffers, lo, hi,
                 [&](std::size_t i, std::uint64_t at, std::uint64_t len, std::uint64_t) {
                   const std::size_t bytes = len * dtype_size(buffers[i].dtype);
                   for (int l = 0; l < layout.local; ++l) {
                     std::memcpy(element(p.of(l).call.buffers[i], at), result + offset, bytes);
                   }
                   offset += bytes;
                 });
}

}  // namespace replicator::detail
