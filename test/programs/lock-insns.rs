// Rust target for probes on lock-prefixed instructions (the kernel's uprobes refuse them): at
// -O, locked_add() starts with `lock add` (an atomic fetch_add whose result is not used). Two
// threads call it N times (argv[1]) each; the program prints the calls and what the atomic kept.
// `lock-insns until FILE`: the threads call it until FILE exists (looked for every
// millisecond), then 100,000 times more each; the calls printed are those the threads counted.
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::Arc;

static ADDED: AtomicUsize = AtomicUsize::new(0);

#[inline(never)]
fn locked_add(by: usize) {
    ADDED.fetch_add(by, SeqCst);
}

fn until(file: &str) {
    let stopping = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let stopping = Arc::clone(&stopping);
            std::thread::spawn(move || {
                let mut calls = 0usize;
                while !stopping.load(Relaxed) {
                    locked_add(std::hint::black_box(2));
                    calls += 1;
                }
                for _ in 0..100_000 {
                    locked_add(std::hint::black_box(2));
                    calls += 1;
                }
                calls
            })
        })
        .collect();
    while !std::path::Path::new(file).exists() {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    stopping.store(true, Relaxed);
    let calls: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    println!("calls={} added={}", calls, ADDED.load(SeqCst));
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() > 2 && args[1] == "until" {
        return until(&args[2]);
    }
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
