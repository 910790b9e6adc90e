// tileport CPU runtime: the parallel loop a call's chunks run on, and its backoff on a shared machine.
//
// The chunks run on OpenMP's team, which is torch's own libgomp team: one set of threads for torch's ops and
// tileport's, warm between calls (a second pool beside torch's would keep two sets of threads competing for
// the cores). Threads claim chunks one at a time, so the caller does a late thread's share itself.
//
// What OpenMP cannot do is leave a thread behind: a region ends at a barrier that waits for every thread of
// the team. When another process holds a core, a thread may not be scheduled for a time slice (milliseconds)
// and a 0.2 ms call takes 10-40 ms. So each region measures how long the caller waited at that barrier after
// its last chunk; a wait longer than half the caller's own time in the loop means the machine is
// oversubscribed, and calls then run on the caller alone (the one-thread speed) for a while: at least 64 times
// the wait (so the slow calls cost at most a 64th of the time), doubling while it recurs, up to 4 s. A call
// that does not wait ends the backoff. Each kernel library keeps its own state (internal linkage).
//
// Which thread runs a chunk never changes a result: chunks are row ranges or fixed blocks whose partials are
// summed in a fixed order.
#include <atomic>
#include <omp.h>
#include <time.h>

namespace {

const uint64_t TP_BACKOFF_MIN_NS = 1000000, TP_BACKOFF_MAX_NS = 4000000000ull, TP_BACKOFF_PER_WAIT = 64;
const uint64_t TP_WAKE_NS = 20000;  // a wait this short is a thread waking, not a core held by another process

inline uint64_t tp_now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

struct TpBackoff {
  std::atomic<uint64_t> inline_until{0};  // calls before this time run on the caller alone
  std::atomic<uint64_t> span_ns{0};       // the current backoff's length (0: none)

  // After a parallel call: back off while the caller waits at the barrier, stop once it does not.
  void settle(uint64_t own_ns, uint64_t wait_ns) {
    if (wait_ns <= own_ns / 2 + TP_WAKE_NS) {
      span_ns.store(0, std::memory_order_relaxed);
      return;
    }
    uint64_t span = 2 * span_ns.load(std::memory_order_relaxed);
    const uint64_t floor = TP_BACKOFF_PER_WAIT * wait_ns > TP_BACKOFF_MIN_NS ? TP_BACKOFF_PER_WAIT * wait_ns : TP_BACKOFF_MIN_NS;
    span = span < floor ? floor : (span > TP_BACKOFF_MAX_NS ? TP_BACKOFF_MAX_NS : span);
    span_ns.store(span, std::memory_order_relaxed);
    inline_until.store(tp_now_ns() + span, std::memory_order_relaxed);
  }
};

inline TpBackoff& tp_backoff() {
  static TpBackoff state;
  return state;
}

}  // namespace

// Chunks a call of `work` units is cut into for nthreads threads: a few per thread, so a thread that starts
// late leaves its share to the others.
inline int64_t tp_chunks(int32_t nthreads, int64_t work) {
  const int64_t want = nthreads <= 1 ? 1 : (int64_t)nthreads * 8;
  return work < want ? (work > 0 ? work : 1) : want;
}

// Run body(i) for i in [0, n) on up to nthreads threads (see above). One thread, one chunk, a backoff or a
// call from inside a parallel region runs the chunks on the caller, without an OpenMP region (even if(0), one
// costs about 0.23 us, a fifth of a one-row call's launch).
template <class F>
inline void tp_parallel_for(int32_t nthreads, int64_t n, F body) {
  TpBackoff& backoff = tp_backoff();
  if (nthreads <= 1 || n <= 1 || tp_now_ns() < backoff.inline_until.load(std::memory_order_relaxed) || omp_in_parallel()) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  const uint64_t start = tp_now_ns();
  uint64_t own_done = start;
#pragma omp parallel num_threads(nthreads)
  {
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t i = 0; i < n; ++i) body(i);
    if (omp_get_thread_num() == 0) own_done = tp_now_ns();
  }
  backoff.settle(own_done - start, tp_now_ns() - own_done);
}

// Run body(lo, hi) over [0, work) cut into tp_chunks(nthreads, work) even ranges (rows, blocks or columns).
template <class F>
inline void tp_parallel_ranges(int32_t nthreads, int64_t work, F body) {
  const int64_t nc = tp_chunks(nthreads, work);
  tp_parallel_for(nthreads, nc, [&](int64_t c) { body(work * c / nc, work * (c + 1) / nc); });
}
