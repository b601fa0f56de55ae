// Target for Rust stacks (built with -O, which omits frame pointers): leaf() is 3 frames deep
// below main(), each kept out of line.
//
//   unwind-rust N   calls leaf() N times through top() and middle(), prints {"calls":N,"sum":S}
use std::hint::black_box;

#[inline(never)]
fn leaf(v: u64) -> u64 {
    black_box(v) + 1
}

#[inline(never)]
fn middle(v: u64) -> u64 {
    black_box(leaf(v)) * 3
}

#[inline(never)]
fn top(v: u64) -> u64 {
    black_box(middle(v)) + 2
}

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(100);
    let mut sum = 0u64;
    for i in 0..n {
        sum = sum.wrapping_add(top(i));
    }
    println!("{{\"calls\":{},\"sum\":{}}}", n, sum);
}
