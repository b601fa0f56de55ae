// Rust target for probes on lock-prefixed instructions (the kernel's uprobes refuse them): at
// -O, locked_add() starts with `lock add` (an atomic fetch_add whose result is not used). Two
// threads call it N times (argv[1]) each; the program prints the calls and what the atomic kept.
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

static ADDED: AtomicUsize = AtomicUsize::new(0);

#[inline(never)]
fn locked_add(by: usize) {
    ADDED.fetch_add(by, SeqCst);
}

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let threads: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || {
                for _ in 0..n {
                    locked_add(std::hint::black_box(2));
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    println!("calls={} added={}", 2 * n, ADDED.load(SeqCst));
}
