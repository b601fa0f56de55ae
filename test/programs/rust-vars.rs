// Rust functions for the tests of variables and names: process has std::hint::black_box
// inlined at its top (whose parameter `dummy` is not one of process's variables), and
// twice::<u32> and twice::<u64> are two functions whose legacy-mangled names demangle to the
// same path. main calls process and twice::<u32> ROUNDS times (argv[1], default 3) and
// twice::<u64> twice as often, and prints "name count" lines.
use std::hint::black_box;

#[inline(never)]
pub fn process(n: u64) -> u64 {
    let x = black_box(n);
    x * 3
}

#[inline(never)]
pub fn twice<T: std::ops::Add<Output = T> + Copy>(v: T) -> T {
    black_box(v) + v
}

fn main() {
    let rounds: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(3);
    let mut sum = 0u64;
    for i in 0..rounds {
        sum += process(i);
        sum += twice::<u32>(i as u32) as u64;
        sum += twice::<u64>(i) + twice::<u64>(i + 1);
    }
    println!("process {}", rounds);
    println!("twice_u32 {}", rounds);
    println!("twice_u64 {}", 2 * rounds);
    println!("sum {}", sum);
}
