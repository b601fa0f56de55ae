// A Rust program for `upscope leaks`: Vec and Box allocations through the system allocator
// (malloc, realloc, free) in 4 threads, some leaked with Box::leak, a caught panic that
// unwinds through frames; prints its checksum and exits with status 0.
use std::thread;

#[inline(never)]
fn build(n: usize) -> Vec<u64> {
    let mut v = Vec::new();
    for i in 0..n {
        v.push(i as u64 * 3);
    }
    v
}

fn main() {
    let handles: Vec<_> = (0..4)
        .map(|t| {
            thread::spawn(move || {
                let mut sum = 0u64;
                for i in 0..300 {
                    let v = build(10 + (i + t) % 40);
                    sum += v.iter().sum::<u64>();
                    if i % 30 == 0 {
                        let kept: &'static mut Vec<u64> = Box::leak(Box::new(v));
                        sum += kept.len() as u64;
                    }
                    if i % 100 == 0 {
                        let r = std::panic::catch_unwind(|| {
                            let _b = build(5);
                            panic!("caught");
                        });
                        sum += r.is_err() as u64;
                    }
                }
                sum
            })
        })
        .collect();
    let total: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    println!("total {}", total);
}
