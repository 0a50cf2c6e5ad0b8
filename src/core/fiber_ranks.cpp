#include "core/fiber_ranks.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <system_error>
#include <thread>

// Switching stacks under the sanitizers needs their fiber annotations, or
// ASan takes the switch for a stack overflow and TSan loses the thread's
// history.
#if defined(__SANITIZE_ADDRESS__)
#define QC_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define QC_FIBER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define QC_FIBER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define QC_FIBER_TSAN 1
#endif
#endif
#if QC_FIBER_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if QC_FIBER_TSAN
#include <sanitizer/tsan_interface.h>
#endif

// The switch itself. glibc's swapcontext saves and restores the signal
// mask with a system call each time: measured 70,000 calls (most of the
// time) for one 128-rank ring of 4096 floats. On x86-64 qc switches with
// the few instructions the ABI asks for: push the callee-saved registers
// and the FPU control words on the old stack, store its stack pointer,
// load the new one, pop. Elsewhere ucontext serves.
#if defined(__x86_64__) && !defined(QC_FIBER_UCONTEXT)
#define QC_FIBER_ASM_X86_64 1
extern "C" {
// Saves the running context on its stack, stores that stack pointer in
// *save and resumes the context whose stack pointer is `load`.
void qcfiber_switch(void** save, void* load) __attribute__((visibility("hidden")));
// A new fiber's first frame returns here: it calls r13(r12), never back.
void qcfiber_start() __attribute__((visibility("hidden")));
}
asm(R"(
  .text
  .p2align 4
  .globl qcfiber_switch
  .hidden qcfiber_switch
  .type qcfiber_switch, @function
qcfiber_switch:
  .cfi_startproc
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .cfi_endproc
  .size qcfiber_switch, .-qcfiber_switch

  .p2align 4
  .globl qcfiber_start
  .hidden qcfiber_start
  .type qcfiber_start, @function
qcfiber_start:
  .cfi_startproc
  .cfi_undefined rip
  andq $-16, %rsp
  movq %r12, %rdi
  callq *%r13
  ud2
  .cfi_endproc
  .size qcfiber_start, .-qcfiber_start
)");
#endif

namespace qc {
namespace {

// A rank's stack: reserved, not committed (MAP_NORESERVE), so a rank costs
// the pages its deepest call touches (tens of KiB), not this. The threads
// of the threaded emulation had 8 MiB each; a rank's deepest path (the
// codecs' block loops) needs far less, and a guard page below turns an
// overflow into a crash instead of silent corruption.
#if QC_FIBER_ASAN
constexpr size_t kStackBytes = size_t{8} << 20;  // ASan's redzones triple the frames
#else
constexpr size_t kStackBytes = size_t{1} << 20;
#endif

}  // namespace

struct FiberRanks::Fiber {
  FiberRanks* owner = nullptr;
  int rank = 0;
  int worker = 0;
  enum class State { kReady, kRunning, kBlocked, kDone } state = State::kReady;
  bool news = false;  // notified while running: look again before blocking
  Deadline deadline{};
#if QC_FIBER_ASM_X86_64
  void* sp = nullptr;  // its saved stack pointer while switched out
#else
  ucontext_t context{};
#endif
  void* mapping = nullptr;  // guard page + stack
  size_t mapping_bytes = 0;
  Status result;
#if QC_FIBER_ASAN
  void* fake_stack = nullptr;
#endif
#if QC_FIBER_TSAN
  void* tsan_fiber = nullptr;
#endif
  char* stack() const { return static_cast<char*>(mapping) + getpagesize(); }
};

struct FiberRanks::Worker {
#if QC_FIBER_ASM_X86_64
  void* sp = nullptr;
#else
  ucontext_t home{};
#endif
  std::deque<int> ready;
  std::condition_variable changed;
  std::vector<int> ranks;
  int unfinished = 0;
#if QC_FIBER_ASAN
  void* fake_stack = nullptr;
  const void* stack_bottom = nullptr;
  size_t stack_size = 0;
#endif
#if QC_FIBER_TSAN
  void* tsan_fiber = nullptr;
#endif
};

namespace {

// The worker's thread goes from its own stack onto fiber `f`'s, until the
// fiber blocks or ends.
void switch_to_fiber(FiberRanks::Worker& w, FiberRanks::Fiber& f) {
#if QC_FIBER_ASAN
  __sanitizer_start_switch_fiber(&w.fake_stack, f.stack(), kStackBytes);
#endif
#if QC_FIBER_TSAN
  __tsan_switch_to_fiber(f.tsan_fiber, 0);
#endif
#if QC_FIBER_ASM_X86_64
  qcfiber_switch(&w.sp, f.sp);
#else
  swapcontext(&w.home, &f.context);
#endif
#if QC_FIBER_ASAN
  __sanitizer_finish_switch_fiber(w.fake_stack, nullptr, nullptr);
#endif
}

// Fiber `f` gives its thread back to the worker; `done`: for good.
void switch_home(FiberRanks::Worker& w, FiberRanks::Fiber& f, bool done) {
#if QC_FIBER_ASAN
  __sanitizer_start_switch_fiber(done ? nullptr : &f.fake_stack, w.stack_bottom, w.stack_size);
#endif
#if QC_FIBER_TSAN
  __tsan_switch_to_fiber(w.tsan_fiber, 0);
#endif
#if QC_FIBER_ASM_X86_64
  qcfiber_switch(&f.sp, w.sp);
#else
  swapcontext(&f.context, &w.home);
#endif
#if QC_FIBER_ASAN
  __sanitizer_finish_switch_fiber(f.fake_stack, &w.stack_bottom, &w.stack_size);
#endif
  (void)done;
}

}  // namespace

FiberRanks::FiberRanks(int nranks, int threads) {
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (threads <= 0) threads = cores > 0 ? cores : 1;
  threads = std::max(1, std::min(threads, nranks));
  for (int i = 0; i < threads; ++i) workers_.push_back(std::make_unique<Worker>());
  for (int r = 0; r < nranks; ++r) {
    fibers_.push_back(std::make_unique<Fiber>());
    fibers_.back()->owner = this;
    fibers_.back()->rank = r;
  }
}

FiberRanks::~FiberRanks() {
  for (auto& f : fibers_) {
    if (f->mapping == nullptr) continue;
#if QC_FIBER_ASAN
    // The stack's shadow still marks the fibers' old frames: clear it, or a
    // later mapping at these addresses would inherit their redzones.
    ASAN_UNPOISON_MEMORY_REGION(f->mapping, f->mapping_bytes);
#endif
#if QC_FIBER_TSAN
    if (f->tsan_fiber != nullptr) __tsan_destroy_fiber(f->tsan_fiber);
#endif
    munmap(f->mapping, f->mapping_bytes);
  }
}

void FiberRanks::enter(unsigned lo, unsigned hi) {
  auto* f = reinterpret_cast<Fiber*>((static_cast<uintptr_t>(hi) << 32) | lo);
  f->owner->run_fiber(*f);
}

void FiberRanks::enter_fiber(void* fiber) {
  auto* f = static_cast<Fiber*>(fiber);
  f->owner->run_fiber(*f);
}

void FiberRanks::run_fiber(Fiber& f) {
  Worker& w = *workers_[f.worker];
#if QC_FIBER_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &w.stack_bottom, &w.stack_size);
#endif
  {
    Status result;
    try {
      result = (*body_)(f.rank);
    } catch (const std::bad_alloc&) {
      result = Status(QC_ERROR_OUT_OF_MEMORY, "out of memory");
    } catch (const std::exception& e) {
      result = internal_error(std::string("a virtual rank threw: ") + e.what());
    } catch (...) {
      result = internal_error("a virtual rank threw an unknown exception");
    }
    std::lock_guard<std::mutex> lock(mutex_);
    f.result = std::move(result);
    f.state = Fiber::State::kDone;
    --w.unfinished;
  }
  switch_home(w, f, /*done=*/true);  // never resumed
}

Status FiberRanks::run(const std::function<Status(int)>& body, std::vector<Status>* results) {
  body_ = &body;
  const size_t page = static_cast<size_t>(getpagesize());
  for (auto& f : fibers_) {
    f->mapping_bytes = kStackBytes + page;
    void* m = mmap(nullptr, f->mapping_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (m == MAP_FAILED) {
      return Status(QC_ERROR_OUT_OF_MEMORY, "could not map a stack for virtual rank " +
                                                std::to_string(f->rank) + " of " +
                                                std::to_string(fibers_.size()));
    }
    f->mapping = m;
    mprotect(m, page, PROT_NONE);  // the guard page
#if QC_FIBER_ASM_X86_64
    // The frame qcfiber_switch pops at the first switch in: the control
    // words of this thread, six registers (r12: the fiber, r13: the entry),
    // and qcfiber_start as the return address.
    auto* top = reinterpret_cast<uint64_t*>(f->stack() + kStackBytes);
    uint64_t* frame = top - 16;  // room, 16-byte aligned
    uint32_t controls[2] = {0, 0};
    asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(controls[0]), "=m"(controls[1]));
    uint64_t words = 0;
    std::memcpy(&words, controls, sizeof words);
    frame[0] = words;
    frame[1] = 0;                                                   // r15
    frame[2] = 0;                                                   // r14
    frame[3] = reinterpret_cast<uint64_t>(&FiberRanks::enter_fiber);  // r13
    frame[4] = reinterpret_cast<uint64_t>(f.get());                 // r12
    frame[5] = 0;                                                   // rbx
    frame[6] = 0;                                                   // rbp
    frame[7] = reinterpret_cast<uint64_t>(&qcfiber_start);
    f->sp = frame;
#else
    getcontext(&f->context);
    f->context.uc_stack.ss_sp = f->stack();
    f->context.uc_stack.ss_size = kStackBytes;
    f->context.uc_link = nullptr;  // a fiber ends by switching home itself
    const auto bits = reinterpret_cast<uintptr_t>(f.get());
    makecontext(&f->context, reinterpret_cast<void (*)()>(&FiberRanks::enter), 2,
                static_cast<unsigned>(bits & 0xffffffffu), static_cast<unsigned>(bits >> 32));
#endif
#if QC_FIBER_TSAN
    f->tsan_fiber = __tsan_create_fiber(0);
#endif
  }

  std::vector<std::thread> threads;
  {
    // The workers start on the queues once they are dealt out below; a
    // thread that cannot be started leaves its ranks to the others.
    std::unique_lock<std::mutex> lock(mutex_);
    int started = 1;
    try {
      for (int i = 1; i < static_cast<int>(workers_.size()); ++i) {
        threads.emplace_back([this, i] { work(i); });
        ++started;
      }
    } catch (const std::system_error&) {
    }
    workers_.resize(started);
    const int k = started;
    // Contiguous ranks share a thread: a ring's or a butterfly's
    // neighbours then mostly wake each other on their own thread, and few
    // messages cross to the other threads (each crossing may be a futex).
    const size_t n = fibers_.size();
    for (auto& f : fibers_) {
      f->worker = static_cast<int>(static_cast<size_t>(f->rank) * static_cast<size_t>(k) / n);
      Worker& w = *workers_[f->worker];
      w.ranks.push_back(f->rank);
      w.ready.push_back(f->rank);
      ++w.unfinished;
    }
    for (auto& w : workers_) w->changed.notify_all();
  }
  work(0);
  for (std::thread& t : threads) t.join();
  results->clear();
  for (auto& f : fibers_) results->push_back(f->result);
  return Status::ok();
}

void FiberRanks::work(int index) {
  std::unique_lock<std::mutex> lock(mutex_);
  // run() deals the ranks out under the lock before any worker gets it.
  if (index >= static_cast<int>(workers_.size())) return;
  Worker& w = *workers_[index];
#if QC_FIBER_TSAN
  w.tsan_fiber = __tsan_get_current_fiber();
#endif
  while (w.unfinished > 0) {
    if (w.ready.empty()) {
      Deadline earliest = Deadline::max();
      for (int r : w.ranks) {
        const Fiber& f = *fibers_[r];
        if (f.state == Fiber::State::kBlocked) earliest = std::min(earliest, f.deadline);
      }
      if (earliest == Deadline::max()) {
        w.changed.wait(lock);
      } else if (w.changed.wait_until(lock, earliest) == std::cv_status::timeout) {
        // Their deadlines passed: they wake to time out (LocalTransport::wait_all).
        const Deadline now = Clock::now();
        for (int r : w.ranks) {
          Fiber& f = *fibers_[r];
          if (f.state == Fiber::State::kBlocked && f.deadline <= now) {
            f.state = Fiber::State::kReady;
            w.ready.push_back(r);
          }
        }
      }
      continue;
    }
    Fiber& f = *fibers_[w.ready.front()];
    w.ready.pop_front();
    f.state = Fiber::State::kRunning;
    lock.unlock();
    switch_to_fiber(w, f);
    lock.lock();
  }
}

void FiberRanks::wait(int rank, std::unique_lock<std::mutex>& mailbox, Deadline deadline) {
  // Never switch away holding a mailbox: the next fiber on this thread
  // may lock the same one.
  mailbox.unlock();
  Fiber& f = *fibers_[rank];
  std::unique_lock<std::mutex> lock(mutex_);
  if (f.news) {
    f.news = false;  // something changed since the caller looked
  } else {
    f.state = Fiber::State::kBlocked;
    f.deadline = deadline;
    lock.unlock();
    switch_home(*workers_[f.worker], f, /*done=*/false);
    lock.lock();
    f.news = false;
  }
  lock.unlock();
  mailbox.lock();
}

void FiberRanks::notify(int rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (rank < 0 || rank >= static_cast<int>(fibers_.size())) return;
  Fiber& f = *fibers_[rank];
  switch (f.state) {
    case Fiber::State::kBlocked: {
      f.state = Fiber::State::kReady;
      Worker& w = *workers_[f.worker];
      w.ready.push_back(rank);
      w.changed.notify_one();
      break;
    }
    case Fiber::State::kRunning: f.news = true; break;
    case Fiber::State::kReady:
    case Fiber::State::kDone: break;
  }
}

}  // namespace qc
