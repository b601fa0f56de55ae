// Target for return probes in Rust code a panic unwinds through: `rust-unwind N` calls
// guarded(i) N times, which calls probed(i) inside std::panic::catch_unwind; probed() calls
// deeper(), which panics on every third call. The panic hook is silenced, so the output is
// only the program's own counts: calls and normal returns of probed(), panics caught, and
// the drops of a guard that the unwind ran in probed().
use std::panic;
use std::sync::atomic::{AtomicU64, Ordering};

static CALLS: AtomicU64 = AtomicU64::new(0);
static RETURNS: AtomicU64 = AtomicU64::new(0);
static DROPS: AtomicU64 = AtomicU64::new(0);

struct Guard;

impl Drop for Guard {
    fn drop(&mut self) {
        DROPS.fetch_add(1, Ordering::Relaxed);
    }
}

#[inline(never)]
fn deeper(i: u64) -> u64 {
    if i % 3 == 0 {
        panic!("third call");
    }
    std::hint::black_box(i * 2)
}

#[inline(never)]
#[no_mangle]
pub fn rust_unwind_probed(i: u64) -> u64 {
    CALLS.fetch_add(1, Ordering::Relaxed);
    let _guard = Guard;
    let r = deeper(i) + 1;
    RETURNS.fetch_add(1, Ordering::Relaxed);
    r
}

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(9);
    panic::set_hook(Box::new(|_| {}));
    let mut sum = 0u64;
    let mut caught = 0u64;
    for i in 0..n {
        match panic::catch_unwind(|| rust_unwind_probed(i)) {
            Ok(r) => sum += r,
            Err(_) => caught += 1,
        }
    }
    println!(
        "rust calls={} returns={} caught={} drops={} sum={}",
        CALLS.load(Ordering::Relaxed),
        RETURNS.load(Ordering::Relaxed),
        caught,
        DROPS.load(Ordering::Relaxed),
        sum
    );
}
