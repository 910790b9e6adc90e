// tileport CPU runtime: the thread pool a call's chunks run on.
//
// Why not an OpenMP region: its end is a barrier that waits for every thread of the team, started or not.
// When another process holds a core, the second thread may not be scheduled for a time slice (milliseconds)
// while the caller spins at the barrier, and a 0.2 ms call takes 30 ms. Here a call is cut into chunks that
// threads claim one at a time from a shared counter; the caller claims chunks too, and waits only for chunks
// that were claimed and not finished. A worker that wakes late finds nothing left and goes back to sleep, so
// on a busy machine the caller does the work alone at the one-thread speed; on a quiet one, the workers share
// it. Idle workers spin briefly, then sleep on a futex (they do not hold a core that torch's own threads or
// another process want).
//
// A worker can still be descheduled in the middle of a chunk it claimed (torch's own OpenMP threads spin for a
// while after each of torch's parallel ops; another process may hold the other core), and the caller then
// waits a time slice for it. When the caller waited for others longer than half its own share of the work,
// the pool backs off: calls run inline for 1 ms, then 2, 4, ... up to a second while that keeps happening,
// and a call that does not wait ends the backoff. A busy machine so costs one slow call a second at most.
//
// Each kernel library has its own pool (internal linkage), of nthreads - 1 workers made on first use; a forked
// child (verify's worker processes) starts a new one. Two callers at once (threads calling kernels with the
// GIL released): the second runs its chunks itself. Which thread runs a chunk never changes a result: chunks
// are row ranges or fixed blocks whose partials are summed in a fixed order.
#include <atomic>
#include <limits.h>
#include <time.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace {

const int TP_SPIN = 2000;  // pause iterations before a waiting thread sleeps (tens of microseconds)

const uint64_t TP_BACKOFF_MIN_NS = 1000000, TP_BACKOFF_MAX_NS = 1000000000;

inline uint64_t tp_now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

inline void tp_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

inline void tp_futex_wait(std::atomic<uint32_t>* word, uint32_t seen) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, seen, nullptr, nullptr, 0);
}

inline void tp_futex_wake(std::atomic<uint32_t>* word, int n) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, n, nullptr, nullptr, 0);
}

// The claim word packs the job's generation (24 bits), its chunk count (20) and the next chunk (20), so a
// claim is one compare-and-swap and a stale worker can never claim a chunk of a finished job.
inline uint64_t tp_pack(uint64_t gen, uint64_t n, uint64_t next) { return (gen << 40) | (n << 20) | next; }

struct TpPool {
  std::atomic<uint64_t> claim{0};
  std::atomic<uint32_t> done{0};     // chunks finished of the current job (futex word of the caller's wait)
  std::atomic<uint32_t> posted{0};   // jobs posted (futex word of the workers' sleep)
  std::atomic<int32_t> sleepers{0};
  std::atomic<bool> busy{false};
  std::atomic<uint64_t> inline_until{0};  // calls before this time run inline (the backoff, see above)
  uint64_t backoff_ns = 0;
  void (*fn)(void*, int64_t) = nullptr;
  void* ctx = nullptr;
  uint64_t gen = 0;
  int workers = 0;
  pid_t pid = 0;

  // Claim and run chunks of the posted job until none is left.
  void run_chunks() {
    for (;;) {
      uint64_t v = claim.load(std::memory_order_acquire);
      const uint64_t n = (v >> 20) & 0xFFFFF, next = v & 0xFFFFF;
      if (next >= n) return;
      if (!claim.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel)) continue;
      fn(ctx, (int64_t)next);  // the job stays posted until this chunk is counted done
      if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == n) tp_futex_wake(&done, 1);
    }
  }

  void worker() {
    uint32_t seen = posted.load(std::memory_order_acquire);
    for (;;) {
      uint32_t now = posted.load(std::memory_order_acquire);
      for (int i = 0; now == seen && i < TP_SPIN; ++i) {
        tp_relax();
        now = posted.load(std::memory_order_acquire);
      }
      if (now == seen) {
        sleepers.fetch_add(1);  // seq_cst: the caller's post and this count are seen in one order
        tp_futex_wait(&posted, seen);
        sleepers.fetch_sub(1);
        continue;
      }
      seen = now;
      run_chunks();
    }
  }

  static void* start(void* self) {
    static_cast<TpPool*>(self)->worker();
    return nullptr;
  }

  void grow(int want) {
    for (; workers < want; ++workers) {
      pthread_t t;
      pthread_attr_t attr;
      pthread_attr_init(&attr);
      pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
      const int failed = pthread_create(&t, &attr, &TpPool::start, this);
      pthread_attr_destroy(&attr);
      if (failed) break;  // fewer workers: the caller runs the rest
    }
  }

  // Run fn(ctx, 0..n-1) on the caller and up to nthreads - 1 workers; returns when every chunk is done,
  // and whether the caller waited for workers longer than half its own time on the chunks (contention).
  bool run(int nthreads, int64_t n, void (*f)(void*, int64_t), void* c) {
    const uint64_t t0 = tp_now_ns();
    grow(nthreads - 1);
    fn = f;
    ctx = c;
    gen = (gen + 1) & 0xFFFFFF;
    done.store(0, std::memory_order_relaxed);
    claim.store(tp_pack(gen, (uint64_t)n, 0), std::memory_order_release);
    posted.fetch_add(1);
    if (sleepers.load() > 0) tp_futex_wake(&posted, INT_MAX);
    run_chunks();
    const uint64_t t1 = tp_now_ns();
    for (int i = 0;; ++i) {  // only chunks claimed by a worker and not yet finished are waited for
      const uint32_t d = done.load(std::memory_order_acquire);
      if ((int64_t)d == n) break;
      if (i < TP_SPIN) tp_relax();
      else tp_futex_wait(&done, d);
    }
    return tp_now_ns() - t1 > (t1 - t0) / 2 + 20000;  // 20 us: a wake-up's latency is no contention
  }

  // After a call: back off while callers wait for descheduled workers, stop once one does not.
  void settle(bool contended) {
    if (!contended) {
      backoff_ns = 0;
      return;
    }
    backoff_ns = backoff_ns ? (2 * backoff_ns < TP_BACKOFF_MAX_NS ? 2 * backoff_ns : TP_BACKOFF_MAX_NS) : TP_BACKOFF_MIN_NS;
    inline_until.store(tp_now_ns() + backoff_ns, std::memory_order_relaxed);
  }
};

// This library's pool; a new one in a forked child, whose copy lost the parent's workers (the old one is left
// as it is). Two first callers at once: one pool wins, the other is freed.
inline TpPool* tp_pool() {
  static std::atomic<TpPool*> pool{nullptr};
  const pid_t pid = getpid();
  TpPool* have = pool.load(std::memory_order_acquire);
  while (have == nullptr || have->pid != pid) {
    TpPool* made = new TpPool();
    made->pid = pid;
    if (pool.compare_exchange_strong(have, made, std::memory_order_acq_rel)) return made;
    delete made;  // another caller made one first: `have` now holds it
  }
  return have;
}

template <class F>
void tp_chunk_trampoline(void* f, int64_t i) {
  (*static_cast<F*>(f))(i);
}

}  // namespace

// Chunks a call of `work` units is cut into for nthreads threads: a few per thread, so a thread that starts
// late leaves its share to the others.
inline int64_t tp_chunks(int32_t nthreads, int64_t work) {
  const int64_t want = nthreads <= 1 ? 1 : (int64_t)nthreads * 8;
  return work < want ? (work > 0 ? work : 1) : want;
}

// Run body(i) for i in [0, n) (n < 2^20, see tp_chunks) on up to nthreads threads (see above); one thread or
// one chunk runs inline.
template <class F>
inline void tp_parallel_for(int32_t nthreads, int64_t n, F body) {
  if (nthreads <= 1 || n <= 1) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  TpPool* pool = tp_pool();
  // backing off (see above), or another caller holds the pool: this call's chunks run here
  if (tp_now_ns() < pool->inline_until.load(std::memory_order_relaxed) || pool->busy.exchange(true, std::memory_order_acquire)) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  pool->settle(pool->run(nthreads, n, &tp_chunk_trampoline<F>, &body));
  pool->busy.store(false, std::memory_order_release);
}
