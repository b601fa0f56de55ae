// A Rust function whose first instruction the kernel single-steps (`test %rdi,%rdi`: an
// Option<&u64> is a pointer that may be null) and through which a panic unwinds:
// `stepped-start-rs N` calls rust_checked(Some(&i)) N times, whose callee panics on every
// third call (caught in main), and rust_checked(None) N times; it prints its own counts of
// calls of rust_checked, returns from it and panics.
use std::panic;
use std::sync::atomic::{AtomicU64, Ordering};

static CALLS: AtomicU64 = AtomicU64::new(0);
static RETURNS: AtomicU64 = AtomicU64::new(0);

#[inline(never)]
fn deeper(i: u64) -> u64 {
    if i % 3 == 0 {
        panic!("third call");
    }
    std::hint::black_box(i * 2)
}

#[inline(never)]
#[no_mangle]
pub fn rust_checked(p: Option<&u64>) -> u64 {
    let Some(v) = p else { return 0 };
    CALLS.fetch_add(1, Ordering::Relaxed);
    let r = deeper(*v) + 1;
    RETURNS.fetch_add(1, Ordering::Relaxed);
    r
}

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(9);
    panic::set_hook(Box::new(|_| {}));
    let mut total = 0u64;
    let mut panics = 0u64;
    for i in 0..n {
        match panic::catch_unwind(|| rust_checked(Some(&i))) {
            Ok(r) => total += r,
            Err(_) => panics += 1,
        }
        total += rust_checked(std::hint::black_box(None));
    }
    println!(
        "checked={} calls={} returns={} panics={} total={}",
        2 * n,
        CALLS.load(Ordering::Relaxed),
        RETURNS.load(Ordering::Relaxed),
        panics,
        total
    );
}
