//! One persistent pool of worker threads for the decoder's kernels.
//!
//! A kernel hands out its work in chunks from a shared counter; the calling thread takes
//! chunks too, and a worker joins only if it is awake in time. So a second thread can only
//! help: when the workers are asleep or descheduled (this tool runs on shared 2-core machines)
//! the caller simply does every chunk itself, and it waits only for chunks a worker has
//! already started. Nothing is spawned per call. Workers spin for a short while after a job,
//! because a decode step submits one every few tens of microseconds, then park.
//!
//! rayon and candle's barrier pool were measured first (`hefprobe bench --threads`): both make
//! the caller wait for every worker at every op, and decode with two threads on a busy 2-core
//! guest was up to 3× slower than with one.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How long an idle worker spins before parking. A decode step of a 135M model submits a job
/// every 20-200 µs; a parked worker takes longer than that to wake.
const SPIN: Duration = Duration::from_micros(200);

/// A job as the workers see it: a type-erased `&dyn Fn(Range<usize>) + Sync` and its chunks.
#[derive(Clone, Copy)]
struct Job {
    f: *const (dyn Fn(Range<usize>) + Sync),
    items: usize,
    chunk: usize,
}

struct Shared {
    /// Bumped for every job; workers wait for it to change.
    generation: AtomicUsize,
    /// The generation a worker may still join (0: none).
    open: AtomicUsize,
    /// Workers inside the current job.
    active: AtomicUsize,
    /// Next item to hand out.
    cursor: AtomicUsize,
    /// Workers allowed to join the current job.
    allowed: AtomicUsize,
    /// A worker's chunk panicked during the current job.
    panicked: AtomicBool,
    job: Mutex<Option<Job>>,
}

// SAFETY: `Job::f` points to a closure that is `Sync` and outlives every use: a worker
// dereferences it only after joining generation g (active incremented while `open == g`), and
// `run` does not return (so the closure is not dropped) until `open` is cleared and `active`
// is back to 0.
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

pub struct Pool {
    shared: &'static Shared,
    workers: Vec<Thread>,
    /// One caller at a time; a second concurrent caller runs its job alone.
    submit: Mutex<()>,
}

static POOL: OnceLock<Pool> = OnceLock::new();
/// Threads (caller included) the pool is built with; 0 = the machine's available parallelism.
static SIZE: AtomicUsize = AtomicUsize::new(0);
/// Threads a job may use; 0 = all of the pool's.
static ALLOWED: AtomicUsize = AtomicUsize::new(0);

/// Use `threads` threads (the caller included; 0 = all). Before the pool's first use this
/// also fixes its size; afterwards it can only choose up to that size.
pub fn configure(threads: usize) {
    if POOL.get().is_none() {
        SIZE.store(threads, SeqCst);
    }
    ALLOWED.store(threads, SeqCst);
}

/// Kernels on their caller's thread alone until the guard drops: for a caller that keeps every
/// core busy with decoders of its own (explain's candidates, one per core), where a worker
/// joining one of them only takes a core from another and spins between its jobs.
pub fn alone() -> Alone {
    Alone(ALLOWED.swap(1, SeqCst))
}

pub struct Alone(usize);

impl Drop for Alone {
    fn drop(&mut self) {
        ALLOWED.store(self.0, SeqCst);
    }
}

pub fn pool() -> &'static Pool {
    POOL.get_or_init(|| {
        let size = match SIZE.load(SeqCst) {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        Pool::new(size - 1)
    })
}

/// Workers a job may use now.
fn allowed_workers(workers: usize) -> usize {
    match ALLOWED.load(SeqCst) {
        0 => workers,
        n => (n - 1).min(workers),
    }
}

impl Pool {
    fn new(n_workers: usize) -> Pool {
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            generation: AtomicUsize::new(0),
            open: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            cursor: AtomicUsize::new(0),
            allowed: AtomicUsize::new(n_workers),
            panicked: AtomicBool::new(false),
            job: Mutex::new(None),
        }));
        let workers = (0..n_workers)
            .filter_map(|i| {
                std::thread::Builder::new()
                    .name(format!("hefprobe-kernel-{i}"))
                    .spawn(move || worker(shared, i))
                    .ok()
                    .map(|h| h.thread().clone())
            })
            .collect();
        Pool { shared, workers, submit: Mutex::new(()) }
    }

    /// Threads a job can use now (the caller included).
    pub fn threads(&self) -> usize {
        1 + allowed_workers(self.workers.len())
    }

    /// Call `f` on chunks of `0..items` (`chunk` items each, the last shorter) until all are
    /// done, on the calling thread and on whichever workers join.
    pub fn run(&self, items: usize, chunk: usize, f: &(dyn Fn(Range<usize>) + Sync)) {
        let chunk = chunk.max(1);
        let guard = match self.submit.try_lock() {
            Ok(g) if self.threads() > 1 && items > chunk => g,
            _ => return in_chunks(items, chunk, f),
        };
        let s = self.shared;
        let allowed = allowed_workers(self.workers.len());
        s.allowed.store(allowed, SeqCst);
        s.cursor.store(0, SeqCst);
        // SAFETY (lifetime erasure): see `Shared`; the pointer is not used after this call.
        let erased: *const (dyn Fn(Range<usize>) + Sync) = unsafe { std::mem::transmute(f) };
        *s.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(Job { f: erased, items, chunk });
        let g = s.generation.fetch_add(1, SeqCst) + 1;
        s.open.store(g, SeqCst);
        for w in &self.workers[..allowed] {
            w.unpark();
        }
        let mine = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| take_chunks(s, f, items, chunk)));
        s.open.store(0, SeqCst);
        let mut spins = 0u32;
        while s.active.load(SeqCst) != 0 {
            spins += 1;
            if spins < 1000 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        *s.job.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let worker_panicked = s.panicked.swap(false, SeqCst);
        drop(guard);
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        // A chunk lost to a panic would leave a silently wrong result: fail as loudly as the
        // caller's own panic would.
        assert!(!worker_panicked, "a decoder kernel panicked on a worker thread");
    }
}

/// The same chunks `run` hands out, on the calling thread alone (a busy pool, one thread): the
/// part boundaries never depend on who runs them.
pub fn in_chunks(items: usize, chunk: usize, f: &(dyn Fn(Range<usize>) + Sync)) {
    let chunk = chunk.max(1);
    let mut start = 0;
    while start < items {
        f(start..items.min(start + chunk));
        start += chunk;
    }
}

fn take_chunks(s: &Shared, f: &(dyn Fn(Range<usize>) + Sync), items: usize, chunk: usize) {
    loop {
        let start = s.cursor.fetch_add(chunk, SeqCst);
        if start >= items {
            return;
        }
        f(start..items.min(start + chunk));
    }
}

fn worker(s: &'static Shared, index: usize) {
    let mut seen = 0usize;
    loop {
        let spin_until = Instant::now() + SPIN;
        let g = loop {
            let g = s.generation.load(SeqCst);
            if g != seen {
                break g;
            }
            if Instant::now() < spin_until {
                std::hint::spin_loop();
            } else {
                std::thread::park_timeout(Duration::from_millis(100));
            }
        };
        seen = g;
        if index >= s.allowed.load(SeqCst) {
            continue;
        }
        s.active.fetch_add(1, SeqCst);
        if s.open.load(SeqCst) == g {
            let job = *s.job.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(job) = job {
                // SAFETY: we joined generation g while it was open, so `run` is still waiting
                // for `active` to drop and the closure is alive (see `Shared`).
                let f = unsafe { &*job.f };
                // A panic in a kernel must not kill the worker and leave `active` raised.
                let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    take_chunks(s, f, job.items, job.chunk)
                }));
                if done.is_err() {
                    s.panicked.store(true, SeqCst);
                }
            }
        }
        s.active.fetch_sub(1, SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn every_item_is_done_exactly_once_even_with_concurrent_callers() {
        let p = pool();
        std::thread::scope(|scope| {
            for t in 0..3 {
                scope.spawn(move || {
                    for n in [0usize, 1, 7, 1000, 4097] {
                        let sum = AtomicU64::new(0);
                        let count = AtomicU64::new(0);
                        p.run(n, 16 + t, &|r| {
                            for i in r {
                                sum.fetch_add(i as u64, SeqCst);
                                count.fetch_add(1, SeqCst);
                            }
                        });
                        assert_eq!(count.load(SeqCst), n as u64);
                        assert_eq!(sum.load(SeqCst), (n as u64) * (n as u64).saturating_sub(1) / 2);
                    }
                });
            }
        });
    }
}
